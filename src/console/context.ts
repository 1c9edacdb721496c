import { randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { FailureLimiter } from "../http/auth.js";
import { readJsonBody } from "../http/body.js";
import { refuse, sendError } from "../http/respond.js";
import type { Exchange, Handler } from "../http/router.js";
import type { OAuthConfig } from "../oauth/authorization.js";
import type { KeyPolicy } from "../policy/key-policy.js";
import type { CallerPolicy } from "../policy/resolve.js";
import type { TrustedIssuer } from "../oauth/oidc.js";
import type { KeyInfo, KeyStore } from "../store/keys.js";
import type { OAuthStore } from "../store/oauth.js";
import type { RunStore } from "../store/runs.js";
import { SESSION_MS, type ConsoleSession, type UserStore } from "../store/users.js";
import { parseCookies, sessionCookieName, setCookie, signinCookieName } from "./cookies.js";
import { pageHeaders, signinPage } from "./pages.js";

/** The largest sign-in and consent form, and a JSON body but the playground's. */
export const FORM_CAP_BYTES = 16 * 1024;
const SMALL_BODY = 64 * 1024;

/** What the console's pages and routes need of the server. */
export interface ConsoleDeps {
  config: OAuthConfig;
  users: UserStore;
  oauth: OAuthStore;
  keys: KeyStore;
  runs: RunStore;
  /** Failed sign-ins count here, per client address, beside the per-name lockout. */
  signinFailures: FailureLimiter;
  /** The client's address (the peer's, or a trusted proxy's client's: http/client-address.ts). */
  clientOf(req: IncomingMessage): string;
  /**
   * What a key policy (or a console user's key ceiling) gives on this server: the server's
   * settings with the policy over them (ExecService.policyFor).
   */
  policyFor(policy: KeyPolicy | null): CallerPolicy;
  /**
   * A key's policy changed or the key was revoked: its sessions are held to it now, not at the
   * next sweep (src/api/session-policy.ts).
   */
  keyChanged?(keyId: string): void;
  /** Runs the request as this key (its policy, quota and records), answering as /v1/exec. */
  execAs(res: ServerResponse, keyId: string, request: unknown): Promise<void>;
  /** The server's health: readiness, pools, workers (cluster), image and its runtimes. */
  health(): Record<string, unknown>;
  /** The largest playground request (the service's body cap). */
  bodyCapBytes: number;
  /** A trusted OIDC issuer: with a client ID, people may sign in through it too. */
  oidc?: TrustedIssuer;
}

/**
 * What every console page shares: its cookies (Secure and `__Host-` behind TLS), finding the
 * signed-in session, answering with a page or a redirect, and the check its JSON routes sit
 * behind (`signedIn`).
 */
export interface ConsoleContext {
  readonly d: ConsoleDeps;
  readonly secure: boolean;
  /** The session cookie's name, and the sign-in form's own CSRF cookie's. */
  readonly cookieName: string;
  readonly signinName: string;
  sessionOf(req: IncomingMessage): Promise<ConsoleSession | null>;
  /** The Set-Cookie of a signed-in session, and the one that clears it. */
  sessionCookie(session: string): string;
  clearedSession(): string;
  sendPage(res: ServerResponse, status: number, html: string, targets?: string[]): void;
  seeOther(res: ServerResponse, to: string, headers?: Record<string, string | string[]>): void;
  /** The sign-in page, with a fresh CSRF token in its form and its cookie. */
  showSignin(res: ServerResponse, next: string, status?: number, error?: string): void;
  /**
   * A JSON route on the session cookie: 401 without a session, 403 for a write whose
   * X-CSRF-Token is not the session's.
   */
  signedIn(handle: (x: Exchange, s: ConsoleSession) => Promise<void> | void): Handler;
}

export function consoleContext(d: ConsoleDeps): ConsoleContext {
  const secure = d.config.issuer.startsWith("https://");
  const cookieName = sessionCookieName(secure);
  const signinName = signinCookieName(secure);
  const c: ConsoleContext = {
    d,
    secure,
    cookieName,
    signinName,
    sessionOf: async (req) => {
      const cookie = parseCookies(req.headers.cookie).get(cookieName);
      return cookie ? d.users.session(cookie) : null;
    },
    sessionCookie: (session) =>
      setCookie(cookieName, session, { secure, maxAgeS: SESSION_MS / 1000, sameSite: "Lax" }),
    clearedSession: () => setCookie(cookieName, "", { secure, maxAgeS: 0, sameSite: "Lax" }),
    sendPage: (res, status, html, targets = []) => {
      res.writeHead(status, pageHeaders(targets));
      res.end(html);
    },
    seeOther: (res, to, headers = {}) => {
      res.writeHead(303, {
        Location: to,
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        ...headers,
      });
      res.end();
    },
    showSignin: (res, next, status = 200, error) => {
      const csrf = randomBytes(24).toString("base64url");
      res.setHeader(
        "Set-Cookie",
        setCookie(signinName, csrf, { secure, maxAgeS: 600, sameSite: "Strict" }),
      );
      const issuer = d.oidc?.signsIn ? d.oidc.issuer : undefined;
      c.sendPage(
        res,
        status,
        signinPage({ csrf, next, ...(error ? { error } : {}), ...(issuer ? { issuer } : {}) }),
      );
    },
    signedIn: (handle) => async (x) => {
      const s = await c.sessionOf(x.req);
      if (!s)
        return sendError(
          x.res,
          401,
          "UNAUTHORIZED",
          "Sign in first: POST /v1/console/session (the session cookie)",
        );
      const token = x.req.headers["x-csrf-token"] as string | undefined;
      if (x.req.method !== "GET" && !sameSecret(token, s.csrf))
        return sendError(
          x.res,
          403,
          "FORBIDDEN",
          "X-CSRF-Token must carry this session's csrf_token",
        );
      return handle(x, s);
    },
  };
  return c;
}

export function sameSecret(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b) return false;
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * The keys a console user may see and act as: an admin every active key, a member their own
 * (active: neither revoked nor expired).
 */
export async function visibleKeys(
  keys: KeyStore,
  s: ConsoleSession,
  now = Date.now(),
): Promise<KeyInfo[]> {
  return (await ownedKeys(keys, s)).filter(
    (k) => k.revokedAt === null && (k.expiresAt === null || k.expiresAt > now),
  );
}

/** A console user's keys with their revoked ones too (whose runs stay in their history). */
export function ownedKeys(keys: KeyStore, s: ConsoleSession): Promise<KeyInfo[]> {
  return keys.list(s.user.role === "admin" ? undefined : s.user.id);
}

/** A JSON object body of at most `cap` bytes, or null once the refusal is answered. */
export async function readObject(
  { req, res }: Exchange,
  cap = SMALL_BODY,
): Promise<Record<string, unknown> | null> {
  const body = await readJsonBody(req, cap);
  if (!body.ok) {
    refuse(res, body.refusal);
    return null;
  }
  if (typeof body.value !== "object" || body.value === null || Array.isArray(body.value)) {
    sendError(res, 400, "INVALID_INPUT", "The body is a JSON object");
    return null;
  }
  return body.value as Record<string, unknown>;
}

/**
 * Records a change a console user made in the audit log: who (the session's user), what, to which
 * id, from the request's client address, now. `detail` names what changed, never a secret.
 */
export function audited(
  d: ConsoleDeps,
  x: Exchange,
  s: ConsoleSession,
  action: string,
  target: string | null,
  detail: Record<string, unknown> | null = null,
): Promise<void> {
  return d.users.audit.record({
    actorId: s.user.id,
    actor: s.user.name,
    address: d.clientOf(x.req),
    action,
    target,
    detail,
  });
}

/** A key the person may not see is not found, exactly as an unknown id. */
export const noKey = (res: ServerResponse) =>
  sendError(res, 404, "NOT_FOUND", "None of your active keys has this id");
