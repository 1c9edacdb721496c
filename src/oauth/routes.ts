import type { IncomingMessage, ServerResponse } from "node:http";
import type { FailureLimiter } from "../http/auth.js";
import { readFormBody, readJsonBody } from "../http/body.js";
import { sendJson } from "../http/respond.js";
import type { Exchange, Handler, Route } from "../http/router.js";
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
  /**
   * Every authorization request that is written down (a row waiting for consent) counts here,
   * per address: /oauth/authorize is open to anyone who names a registered client.
   */
  authorizations: FailureLimiter;
  /** The client's address (the peer's, or a trusted proxy's client's: http/client-address.ts). */
  clientOf(req: IncomingMessage): string;
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

/** The rows of CROSS_ORIGIN_PATHS say so to any origin, and answer its preflight. */
function crossOrigin(routes: Route[]): Route[] {
  const preflight: Handler = ({ res }) => {
    res.writeHead(204, CORS_PREFLIGHT);
    res.end();
  };
  return routes.flatMap((r): Route[] => {
    if (!CROSS_ORIGIN_PATHS.has(r.path)) return [r];
    const handle: Handler = (x) => {
      x.res.setHeader("Access-Control-Allow-Origin", "*");
      return r.handle(x);
    };
    return [
      { ...r, handle },
      { ...r, method: "OPTIONS", handle: preflight },
    ];
  });
}

/**
 * The authorization server's HTTP routes: the two metadata documents, /oauth/authorize,
 * /oauth/token and /oauth/register.
 */
export function oauthRoutes(d: OAuthRouteDeps): Route[] {
  const metadata: Handler = ({ res }) => sendJson(res, 200, protectedResourceMetadata(d.config));
  return crossOrigin([
    { method: "GET", path: PRM_PATH, handle: metadata },
    { method: "GET", path: `${PRM_PATH}/mcp`, label: PRM_PATH, handle: metadata },
    {
      method: "GET",
      path: ASM_PATH,
      handle: ({ res }) => sendJson(res, 200, authorizationServerMetadata(d.config)),
    },
    {
      method: "GET",
      path: "/oauth/authorize",
      handle: async ({ req, res, query }) => {
        // The request's row is written only past every check, so only a good request is charged;
        // its token is taken first, so requests sent at once are held to the limit too.
        const addr = d.clientOf(req);
        const token = d.authorizations.take(addr);
        if (!token)
          return d.authorizePage(
            res,
            429,
            `Too many authorization requests from this address; wait ${d.authorizations.retryAfterS(addr)} s`,
          );
        const out = await authorize(d.oauth, d.config, query);
        if (out.kind !== "consent") token.refund();
        if (out.kind === "page") return d.authorizePage(res, out.status, out.message);
        const to = out.kind === "redirect" ? out.to : `/oauth/consent?request=${out.requestId}`;
        res.writeHead(302, { Location: to, ...NO_STORE, "Referrer-Policy": "no-referrer" });
        res.end();
      },
    },
    { method: "POST", path: "/oauth/token", handle: (x) => tokenRoute(d, x) },
    { method: "POST", path: "/oauth/register", handle: (x) => registerRoute(d, x) },
  ]);
}

/** An error as RFC 6749 (§5.2) and RFC 7591 (§3.2.2) shape it. */
function oauthError(
  res: ServerResponse,
  status: number,
  error: string,
  description: string,
  headers: Record<string, string> = {},
): void {
  sendJson(res, status, { error, error_description: description }, headers);
}

const slowDown = (res: ServerResponse, waitS: number, description: string) =>
  oauthError(res, 429, "slow_down", description, { "Retry-After": String(waitS) });

/**
 * POST /oauth/token: a failed request counts against its address (its token taken before the
 * request is checked, given back when it succeeds).
 */
async function tokenRoute(d: OAuthRouteDeps, { req, res }: Exchange): Promise<void> {
  const addr = d.clientOf(req);
  const taken = d.failures.take(addr);
  if (!taken)
    return slowDown(res, d.failures.retryAfterS(addr), "Too many failed requests; wait and retry");
  const form = await readFormBody(req, FORM_CAP_BYTES);
  if (!form.ok) {
    const { status, message, headers } = form.refusal;
    return oauthError(res, status, "invalid_request", message, { ...NO_STORE, ...headers });
  }
  const out = await token(
    d.oauth,
    d.config,
    form.value,
    async (id) => (await d.keys.active(id)) !== null,
  );
  if (out.ok) {
    taken.refund();
    return sendJson(res, 200, out.tokens, NO_STORE);
  }
  oauthError(res, out.status, out.error, out.description, NO_STORE);
}

/** POST /oauth/register: open to anyone, so every registration counts against its address. */
async function registerRoute(d: OAuthRouteDeps, { req, res }: Exchange): Promise<void> {
  const addr = d.clientOf(req);
  if (!d.registrations.take(addr))
    return slowDown(
      res,
      d.registrations.retryAfterS(addr),
      "Too many registrations from this address",
    );
  const body = await readJsonBody(req, REGISTER_CAP_BYTES);
  if (!body.ok) {
    const { status, message, headers } = body.refusal;
    return oauthError(res, status, "invalid_client_metadata", message, headers);
  }
  const out = await register(d.oauth, body.value);
  if (out.ok) sendJson(res, 201, out.body, NO_STORE);
  else oauthError(res, 400, out.error, out.description);
}
