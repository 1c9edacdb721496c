import { randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { FailureLimiter } from "../http/auth.js";
import { readFormBody, readJsonBody } from "../http/body.js";
import { sendError, sendJson } from "../http/respond.js";
import type { OAuthConfig } from "../oauth/authorization.js";
import { isLocalPath, withParams } from "../oauth/uris.js";
import type { KeyInfo, KeyStore } from "../store/keys.js";
import type { AuthRequest, OAuthStore } from "../store/oauth.js";
import { SESSION_MS, type ConsoleSession, type UserStore } from "../store/users.js";
import { consoleApiLabel, grantJson, keyJson, type consoleApi } from "./api.js";
import { APP_PATH, serveStatic } from "./static.js";
import type { TrustedIssuer } from "../oauth/oidc.js";
import {
  oidcCookieName,
  parseCookies,
  sessionCookieName,
  setCookie,
  signinCookieName,
} from "./cookies.js";
import {
  consentPage,
  formTargetOf,
  messagePage,
  pageHeaders,
  signinPage,
  STYLE,
  STYLE_PATH,
} from "./pages.js";

/**
 * The console's sign-in and the OAuth consent page, each also a JSON route (openapi.json): a
 * person signs in with a console user's password, gets a session cookie, and approves or denies
 * a client's authorization request for one of the keys they may see (an admin: every key; a
 * member: their own). Every form carries a CSRF token (the session's; the sign-in form's own,
 * double-submitted in a cookie), every JSON write carries it in X-CSRF-Token. The later console
 * pages (keys, runs, playground, health) sit on the same session and `visibleKeys`.
 */
export interface ConsoleDeps {
  config: OAuthConfig;
  users: UserStore;
  oauth: OAuthStore;
  keys: KeyStore;
  /** Failed sign-ins count here, per address, beside the per-user lockout. */
  signinFailures: FailureLimiter;
  /** The routes behind the console's pages (api.ts); absent: sign-in and consent only. */
  api?: ReturnType<typeof consoleApi>;
  /** A trusted OIDC issuer: with a client ID, people may sign in through it too. */
  oidc?: TrustedIssuer;
}

const FORM_CAP_BYTES = 16 * 1024;

function sameSecret(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b) return false;
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The keys a console user may see and act as: an admin every active key, a member their own. */
export async function visibleKeys(keys: KeyStore, s: ConsoleSession): Promise<KeyInfo[]> {
  const all = await keys.list(s.user.role === "admin" ? undefined : s.user.id);
  return all.filter((k) => k.revokedAt === null);
}

export function consoleRoutes(d: ConsoleDeps) {
  const secure = d.config.issuer.startsWith("https://");
  const cookieName = sessionCookieName(secure);
  const signinName = signinCookieName(secure);

  const sendPage = (res: ServerResponse, status: number, html: string, targets: string[] = []) => {
    res.writeHead(status, pageHeaders(targets));
    res.end(html);
  };
  const seeOther = (
    res: ServerResponse,
    to: string,
    headers: Record<string, string | string[]> = {},
  ) => {
    res.writeHead(303, {
      Location: to,
      "Cache-Control": "no-store",
      "Referrer-Policy": "no-referrer",
      ...headers,
    });
    res.end();
  };

  const sessionOf = async (req: IncomingMessage): Promise<ConsoleSession | null> => {
    const cookie = parseCookies(req.headers.cookie).get(cookieName);
    return cookie ? d.users.session(cookie) : null;
  };

  const showSignin = (res: ServerResponse, next: string, status = 200, error?: string) => {
    const csrf = randomBytes(24).toString("base64url");
    res.setHeader(
      "Set-Cookie",
      setCookie(signinName, csrf, { secure, maxAgeS: 600, sameSite: "Strict" }),
    );
    const issuer = d.oidc?.signsIn ? d.oidc.issuer : undefined;
    sendPage(
      res,
      status,
      signinPage({ csrf, next, ...(error ? { error } : {}), ...(issuer ? { issuer } : {}) }),
    );
  };

  /** The session cookie of a signed-in user, and where they go. */
  const sessionCookie = (session: string) =>
    setCookie(cookieName, session, { secure, maxAgeS: SESSION_MS / 1000, sameSite: "Lax" });

  // Sign-in through the trusted issuer: the browser's state, nonce and PKCE verifier ride in a
  // short-lived HttpOnly cookie (SameSite=Lax: it must come back on the issuer's top-level
  // redirect), so whichever replica the callback reaches can check it.
  const oidcName = oidcCookieName(secure);
  const callbackUri = `${d.config.issuer}/console/oidc/callback`;
  const oidcStart = async (res: ServerResponse, next: string) => {
    let t: Awaited<ReturnType<TrustedIssuer["startSignIn"]>>;
    try {
      t = await d.oidc!.startSignIn(callbackUri);
    } catch (e) {
      showSignin(res, next, 503, e instanceof Error ? e.message : String(e));
      return;
    }
    const pending = Buffer.from(
      JSON.stringify({ s: t.state, n: t.nonce, v: t.verifier, next }),
    ).toString("base64url");
    seeOther(res, t.to, {
      "Set-Cookie": setCookie(oidcName, pending, { secure, maxAgeS: 600, sameSite: "Lax" }),
    });
  };
  const oidcFinish = async (
    req: IncomingMessage,
    res: ServerResponse,
    addr: string,
    query: URLSearchParams,
  ) => {
    const clear = setCookie(oidcName, "", { secure, maxAgeS: 0, sameSite: "Lax" });
    const refuse = (status: number, message: string) => {
      d.signinFailures.recordFailure(addr);
      res.setHeader("Set-Cookie", clear);
      showSignin(res, "/console", status, message);
    };
    const wait = d.signinFailures.retryAfterS(addr);
    if (wait > 0) {
      res.setHeader("Retry-After", String(wait));
      showSignin(res, "/console", 429, `Too many failed sign-ins from here; wait ${wait} s`);
      return;
    }
    let pending: { s?: unknown; n?: unknown; v?: unknown; next?: unknown } = {};
    try {
      pending = JSON.parse(
        Buffer.from(parseCookies(req.headers.cookie).get(oidcName) ?? "", "base64url").toString(),
      ) as typeof pending;
    } catch {
      /* no cookie: refused below */
    }
    const { s, n, v, next } = pending;
    if (typeof s !== "string" || typeof n !== "string" || typeof v !== "string")
      return refuse(
        400,
        "This sign-in was not started in this browser (or it expired); start again",
      );
    if (!sameSecret(query.get("state") ?? undefined, s))
      return refuse(400, "The sign-in's state does not match this browser's; start again");
    if (query.has("error"))
      return refuse(
        401,
        `The identity provider refused: ${query.get("error_description") ?? query.get("error")}`,
      );
    const code = query.get("code");
    if (!code) return refuse(400, "The identity provider returned no code");
    let r: Awaited<ReturnType<TrustedIssuer["finishSignIn"]>>;
    try {
      r = await d.oidc!.finishSignIn(code, callbackUri, v, n);
    } catch (e) {
      return refuse(503, e instanceof Error ? e.message : String(e));
    }
    if (!r.ok) return refuse(401, `Sign-in refused: ${r.reason}`);
    const signed = await d.users.signInSubject(r.subject);
    if (!signed.ok)
      return refuse(
        signed.reason === "locked" ? 429 : 403,
        signed.reason === "locked"
          ? "This account is locked; try again later"
          : `No console user is linked to this identity (subject ${r.subject}). An admin links one: scratchrun users create --name NAME --oidc-subject '${r.subject}'`,
      );
    const to = typeof next === "string" && isLocalPath(next) ? next : "/console";
    seeOther(res, to, { "Set-Cookie": [sessionCookie(signed.session), clear] });
  };

  /** Checks a sign-in and, when it holds, the Set-Cookie of its session. */
  const signIn = async (
    addr: string,
    name: string,
    password: string,
  ): Promise<
    | { ok: true; cookie: string; session: ConsoleSession }
    | { ok: false; status: number; message: string; retryAfterS: number }
  > => {
    const wait = d.signinFailures.retryAfterS(addr);
    if (wait > 0)
      return {
        ok: false,
        status: 429,
        message: `Too many failed sign-ins from here; wait ${wait} s`,
        retryAfterS: wait,
      };
    const r = await d.users.signIn(name, password);
    if (!r.ok) {
      d.signinFailures.recordFailure(addr);
      return r.reason === "locked"
        ? {
            ok: false,
            status: 429,
            message: `This account is locked after repeated wrong passwords; try again in ${Math.ceil((r.retryAfterS ?? 60) / 60)} min`,
            retryAfterS: r.retryAfterS ?? 60,
          }
        : { ok: false, status: 401, message: "Wrong user or password", retryAfterS: 0 };
    }
    return {
      ok: true,
      cookie: sessionCookie(r.session),
      session: { user: r.user, csrf: r.csrf, expiresAt: Date.now() + SESSION_MS },
    };
  };

  /** The person's decision on a request: where the browser goes next (code or error). */
  const decide = async (
    s: ConsoleSession,
    requestId: string,
    decision: unknown,
    keyId: unknown,
  ): Promise<{ ok: true; to: string } | { ok: false; status: number; message: string }> => {
    const pending = await d.oauth.pendingRequest(requestId);
    if (!pending)
      return {
        ok: false,
        status: 400,
        message:
          "This authorization request expired or was decided already; start again from the client",
      };
    if (decision === "deny") {
      const r = await d.oauth.decide(requestId, { deny: true });
      if (!r)
        return {
          ok: false,
          status: 400,
          message: "This authorization request expired or was decided already",
        };
      return {
        ok: true,
        to: back(r.request, {
          error: "access_denied",
          error_description: "the user denied the request",
        }),
      };
    }
    if (decision !== "approve")
      return { ok: false, status: 400, message: "decision is approve or deny" };
    const mine = await visibleKeys(d.keys, s);
    if (typeof keyId !== "string" || !mine.some((k) => k.id === keyId))
      return { ok: false, status: 403, message: "key_id is not one of your active keys" };
    const r = await d.oauth.decide(requestId, { approve: { userId: s.user.id, keyId } });
    if (!r || !r.code)
      return {
        ok: false,
        status: 400,
        message: "This authorization request expired or was decided already",
      };
    return { ok: true, to: back(r.request, { code: r.code }) };
  };
  const back = (r: AuthRequest, params: Record<string, string>) =>
    withParams(r.redirectUri, { ...params, state: r.state, iss: d.config.issuer });

  const consentView = (r: AuthRequest, s: ConsoleSession, keys: KeyInfo[]) =>
    consentPage({
      requestId: r.id,
      csrf: s.csrf,
      userName: s.user.name,
      clientName: r.clientName,
      clientId: r.clientId,
      redirectUri: r.redirectUri,
      keys: keys.map((k) => ({ id: k.id, name: k.name })),
    });

  return async (
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    method: string,
  ): Promise<string | null> => {
    const addr = req.socket.remoteAddress ?? "unknown";
    const url = new URL(req.url ?? "/", "http://x");
    if (path === STYLE_PATH && method === "GET") {
      res.writeHead(200, {
        "Content-Type": "text/css; charset=utf-8",
        "Cache-Control": "max-age=3600",
        "X-Content-Type-Options": "nosniff",
      });
      res.end(STYLE);
      return path;
    }
    if ((path === "/console" || path === "/console/") && method === "GET") {
      const s = await sessionOf(req);
      if (!s) seeOther(res, "/console/signin");
      else if (d.api) serveStatic(res, APP_PATH);
      else
        sendPage(
          res,
          200,
          messagePage("ScratchRun console", `Signed in as ${s.user.name} (${s.user.role}).`),
        );
      return "/console";
    }
    if (method === "GET" && d.api && serveStatic(res, path)) return path;
    if (path === "/console/signin" && method === "GET") {
      const next = url.searchParams.get("next") ?? "/console";
      showSignin(res, isLocalPath(next) ? next : "/console");
      return path;
    }
    if (path === "/console/signin/oidc" && method === "GET" && d.oidc?.signsIn) {
      const next = url.searchParams.get("next") ?? "/console";
      await oidcStart(res, isLocalPath(next) ? next : "/console");
      return path;
    }
    if (path === "/console/oidc/callback" && method === "GET" && d.oidc?.signsIn) {
      await oidcFinish(req, res, addr, url.searchParams);
      return path;
    }
    if (path === "/console/signin" && method === "POST") {
      const form = await readFormBody(req, FORM_CAP_BYTES);
      if (!form.ok) {
        sendPage(res, form.refusal.status, messagePage("Sign in", form.refusal.message));
        return path;
      }
      const f = form.value;
      const next = f.next && isLocalPath(f.next) ? f.next : "/console";
      if (!sameSecret(f.csrf, parseCookies(req.headers.cookie).get(signinName))) {
        showSignin(
          res,
          next,
          403,
          "The form expired or did not come from this page; sign in again",
        );
        return path;
      }
      const r = await signIn(addr, f.name ?? "", f.password ?? "");
      if (!r.ok) {
        if (r.retryAfterS > 0) res.setHeader("Retry-After", String(r.retryAfterS));
        showSignin(res, next, r.status, r.message);
        return path;
      }
      seeOther(res, next, {
        "Set-Cookie": [
          r.cookie,
          setCookie(signinName, "", { secure, maxAgeS: 0, sameSite: "Strict" }),
        ],
      });
      return path;
    }
    if (path === "/console/signout" && method === "POST") {
      const form = await readFormBody(req, FORM_CAP_BYTES);
      const cookie = parseCookies(req.headers.cookie).get(cookieName);
      const s = await sessionOf(req);
      if (form.ok && s && cookie && sameSecret(form.value.csrf, s.csrf))
        await d.users.signOut(cookie);
      else if (s) {
        sendPage(res, 403, messagePage("Sign out", "The form did not come from this console"));
        return path;
      }
      seeOther(res, "/console/signin", {
        "Set-Cookie": setCookie(cookieName, "", { secure, maxAgeS: 0, sameSite: "Lax" }),
      });
      return path;
    }
    if (path === "/oauth/consent" && method === "GET") {
      const id = url.searchParams.get("request") ?? "";
      const s = await sessionOf(req);
      if (!s) {
        seeOther(res, `/console/signin?next=${encodeURIComponent(`/oauth/consent?request=${id}`)}`);
        return path;
      }
      const r = await d.oauth.pendingRequest(id);
      if (!r) {
        sendPage(
          res,
          400,
          messagePage(
            "Authorization",
            "This authorization request expired or was decided already; start again from the client",
          ),
        );
        return path;
      }
      sendPage(res, 200, consentView(r, s, await visibleKeys(d.keys, s)), [
        formTargetOf(r.redirectUri),
      ]);
      return path;
    }
    if (path === "/oauth/consent" && method === "POST") {
      const form = await readFormBody(req, FORM_CAP_BYTES);
      const s = await sessionOf(req);
      if (!s) {
        sendPage(res, 401, messagePage("Authorization", "Sign in first"));
        return path;
      }
      if (!form.ok || !sameSecret(form.value.csrf, s.csrf)) {
        sendPage(
          res,
          403,
          messagePage(
            "Authorization",
            "The form did not come from this console (CSRF token missing or wrong)",
          ),
        );
        return path;
      }
      const r = await decide(s, form.value.request ?? "", form.value.decision, form.value.key_id);
      if (r.ok) seeOther(res, r.to);
      else sendPage(res, r.status, messagePage("Authorization", r.message));
      return path;
    }
    // The JSON API (openapi.json): the same actions for scripts and the later console pages.
    if (path === "/v1/console/session" && method === "POST") {
      const body = await readJsonBody(req, FORM_CAP_BYTES);
      const b = body.ok ? (body.value as Record<string, unknown> | null) : null;
      if (!b || typeof b.name !== "string" || typeof b.password !== "string") {
        sendError(
          res,
          400,
          "INVALID_INPUT",
          'The body is {"name": "...", "password": "..."} as application/json',
        );
        return path;
      }
      const r = await signIn(addr, b.name, b.password);
      if (!r.ok) {
        sendError(
          res,
          r.status,
          r.status === 429 ? "BUSY" : "UNAUTHORIZED",
          r.message,
          r.retryAfterS > 0 ? { "Retry-After": String(r.retryAfterS) } : {},
        );
        return path;
      }
      sendJson(
        res,
        200,
        { user: r.session.user, csrf_token: r.session.csrf, expires_at: r.session.expiresAt },
        { "Set-Cookie": r.cookie },
      );
      return path;
    }
    const grantId = path.startsWith("/v1/console/grants/")
      ? path.slice("/v1/console/grants/".length)
      : null;
    const requestId = path.startsWith("/v1/oauth/requests/")
      ? path.slice("/v1/oauth/requests/".length)
      : null;
    const apiLabel = d.api ? consoleApiLabel(path) : null;
    const json =
      path === "/v1/console/session" ||
      path === "/v1/console/keys" ||
      path === "/v1/console/grants" ||
      apiLabel !== null ||
      grantId !== null ||
      requestId !== null;
    if (!json) return null;
    const label =
      grantId !== null
        ? "/v1/console/grants/{id}"
        : requestId !== null
          ? "/v1/oauth/requests/{id}"
          : (apiLabel ?? path);
    const s = await sessionOf(req);
    if (!s) {
      sendError(
        res,
        401,
        "UNAUTHORIZED",
        "Sign in first: POST /v1/console/session (the session cookie)",
      );
      return label;
    }
    if (
      method !== "GET" &&
      !sameSecret(req.headers["x-csrf-token"] as string | undefined, s.csrf)
    ) {
      sendError(res, 403, "FORBIDDEN", "X-CSRF-Token must carry this session's csrf_token");
      return label;
    }
    if (path === "/v1/console/session" && method === "GET") {
      sendJson(res, 200, { user: s.user, csrf_token: s.csrf, expires_at: s.expiresAt });
    } else if (path === "/v1/console/session" && method === "DELETE") {
      await d.users.signOut(parseCookies(req.headers.cookie).get(cookieName)!);
      sendJson(
        res,
        200,
        { signed_out: true },
        { "Set-Cookie": setCookie(cookieName, "", { secure, maxAgeS: 0, sameSite: "Lax" }) },
      );
    } else if (path === "/v1/console/keys" && method === "GET") {
      sendJson(res, 200, { keys: (await visibleKeys(d.keys, s)).map(keyJson) });
    } else if (path === "/v1/console/grants" && method === "GET") {
      const keys = await visibleKeys(d.keys, s);
      const grants = await d.oauth.grantsFor(keys.map((k) => k.id));
      sendJson(res, 200, { grants: grants.map(grantJson) });
    } else if (grantId !== null && method === "DELETE") {
      const g = await d.oauth.grant(grantId);
      const keys = await visibleKeys(d.keys, s);
      if (!g || !keys.some((k) => k.id === g.keyId))
        sendError(res, 404, "NOT_FOUND", "No grant of your keys has this id");
      else
        sendJson(res, 200, {
          id: g.id,
          revoked: await d.oauth.revokeGrant(g.id, `revoked by ${s.user.name}`),
        });
    } else if (requestId !== null && method === "GET") {
      const r = await d.oauth.pendingRequest(requestId);
      if (!r)
        sendError(
          res,
          404,
          "NOT_FOUND",
          "No pending authorization request has this id (expired or decided)",
        );
      else
        sendJson(res, 200, {
          id: r.id,
          client_id: r.clientId,
          client_name: r.clientName,
          redirect_uri: r.redirectUri,
          scope: r.scope,
          resource: r.resource,
          expires_at: r.expiresAt,
        });
    } else if (requestId !== null && method === "POST") {
      const body = await readJsonBody(req, FORM_CAP_BYTES);
      const b = body.ok ? (body.value as Record<string, unknown> | null) : null;
      const r = await decide(s, requestId, b?.decision, b?.key_id);
      if (r.ok) sendJson(res, 200, { redirect_to: r.to });
      else sendError(res, r.status, r.status === 403 ? "FORBIDDEN" : "INVALID_INPUT", r.message);
    } else if (!(
      d.api &&
      (await d.api(
        req,
        res,
        path,
        method,
        s,
        () => visibleKeys(d.keys, s),
        () => d.keys.list(s.user.role === "admin" ? undefined : s.user.id),
      ))
    ))
      sendError(res, 405, "NOT_FOUND", `${method} is not allowed on ${path}`);
    return label;
  };
}
