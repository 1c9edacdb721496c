import type { IncomingMessage, ServerResponse } from "node:http";
import type { FailureLimiter } from "../http/auth.js";
import { readFormBody, readJsonBody } from "../http/body.js";
import { sendJson } from "../http/respond.js";
import type { KeyStore } from "../store/keys.js";
import type { OAuthStore } from "../store/oauth.js";
import {
  ASM_PATH,
  authorizationServerMetadata,
  authorize,
  PRM_PATH,
  protectedResourceMetadata,
  register,
  token,
  type OAuthConfig,
} from "./authorization.js";

/** What the authorization server's routes need. */
export interface OAuthRouteDeps {
  config: OAuthConfig;
  oauth: OAuthStore;
  keys: KeyStore;
  /** Failed token requests count here, per address (the API key limiter's bucket). */
  failures: FailureLimiter;
  /** Every registration counts here, per address: registration is open to anyone. */
  registrations: FailureLimiter;
  /** Renders a refusal of /oauth/authorize that must not redirect (a page, see console/). */
  authorizePage(res: ServerResponse, status: number, message: string): void;
}

const FORM_CAP_BYTES = 16 * 1024;
const REGISTER_CAP_BYTES = 64 * 1024;
const NO_STORE = { "Cache-Control": "no-store", Pragma: "no-cache" };

/**
 * The endpoints a client running in a browser page calls across origins: the metadata documents,
 * the token and registration endpoints. They take no cookie and answer nothing a cookie would
 * unlock (a token needs the code and its PKCE verifier), so any origin may read them; /authorize
 * (a top-level navigation) and every console route send no CORS headers. A loopback-bound server
 * still refuses foreign origins first (DNS rebinding, src/api/origin.ts).
 */
export const CROSS_ORIGIN_PATHS: ReadonlySet<string> = new Set([
  PRM_PATH,
  `${PRM_PATH}/mcp`,
  ASM_PATH,
  "/oauth/token",
  "/oauth/register",
]);

const CORS_PREFLIGHT = {
  "Access-Control-Allow-Origin": "*",
  "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
  "Access-Control-Allow-Headers": "Content-Type, MCP-Protocol-Version",
  "Access-Control-Max-Age": "600",
};

/**
 * The authorization server's HTTP routes: the two metadata documents, /oauth/authorize,
 * /oauth/token and /oauth/register. Returns the route's label, or null when the path is not one.
 */
export function oauthRoutes(d: OAuthRouteDeps) {
  return async (
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    method: string,
  ): Promise<string | null> => {
    const addr = req.socket.remoteAddress ?? "unknown";
    if (CROSS_ORIGIN_PATHS.has(path)) {
      if (method === "OPTIONS") {
        res.writeHead(204, CORS_PREFLIGHT);
        res.end();
        return path === `${PRM_PATH}/mcp` ? PRM_PATH : path;
      }
      res.setHeader("Access-Control-Allow-Origin", "*");
    }
    if ((path === PRM_PATH || path === `${PRM_PATH}/mcp`) && method === "GET") {
      sendJson(res, 200, protectedResourceMetadata(d.config));
      return PRM_PATH;
    }
    if (path === ASM_PATH && method === "GET") {
      sendJson(res, 200, authorizationServerMetadata(d.config));
      return path;
    }
    if (path === "/oauth/authorize" && method === "GET") {
      const query = new URL(req.url ?? "/", "http://x").searchParams;
      const out = await authorize(d.oauth, d.config, query);
      if (out.kind === "page") d.authorizePage(res, out.status, out.message);
      else {
        const to = out.kind === "redirect" ? out.to : `/oauth/consent?request=${out.requestId}`;
        res.writeHead(302, { Location: to, ...NO_STORE, "Referrer-Policy": "no-referrer" });
        res.end();
      }
      return path;
    }
    if (path === "/oauth/token" && method === "POST") {
      const wait = d.failures.retryAfterS(addr);
      if (wait > 0) {
        sendJson(
          res,
          429,
          { error: "slow_down", error_description: "Too many failed requests; wait and retry" },
          { "Retry-After": String(wait) },
        );
        return path;
      }
      const form = await readFormBody(req, FORM_CAP_BYTES);
      if (!form.ok) {
        sendJson(
          res,
          form.refusal.status,
          { error: "invalid_request", error_description: form.refusal.message },
          { ...NO_STORE, ...form.refusal.headers },
        );
        return path;
      }
      const out = await token(
        d.oauth,
        d.config,
        form.value,
        async (id) => (await d.keys.active(id)) !== null,
      );
      if (out.ok) sendJson(res, 200, out.tokens, NO_STORE);
      else {
        d.failures.recordFailure(addr);
        sendJson(
          res,
          out.status,
          { error: out.error, error_description: out.description },
          NO_STORE,
        );
      }
      return path;
    }
    if (path === "/oauth/register" && method === "POST") {
      const wait = d.registrations.retryAfterS(addr);
      if (wait > 0) {
        sendJson(
          res,
          429,
          { error: "slow_down", error_description: "Too many registrations from this address" },
          { "Retry-After": String(wait) },
        );
        return path;
      }
      d.registrations.recordFailure(addr);
      const body = await readJsonBody(req, REGISTER_CAP_BYTES);
      if (!body.ok) {
        sendJson(
          res,
          body.refusal.status,
          { error: "invalid_client_metadata", error_description: body.refusal.message },
          body.refusal.headers,
        );
        return path;
      }
      const out = await register(d.oauth, body.value);
      if (out.ok) sendJson(res, 201, out.body, NO_STORE);
      else sendJson(res, 400, { error: out.error, error_description: out.description });
      return path;
    }
    return null;
  };
}
