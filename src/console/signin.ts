import { readFormBody, readJsonBody } from "../http/body.js";
import { sendError, sendJson } from "../http/respond.js";
import type { Route } from "../http/router.js";
import { isLocalPath } from "../oauth/uris.js";
import { SESSION_MS, USER_NAME, type ConsoleSession } from "../store/users.js";
import type { CallerPolicy } from "../policy/resolve.js";
import { FORM_CAP_BYTES, sameSecret, type ConsoleContext, type ConsoleDeps } from "./context.js";
import { parseCookies, setCookie } from "./cookies.js";
import { messagePage } from "./pages.js";

type SignIn =
  | { ok: true; cookie: string; session: ConsoleSession }
  | { ok: false; status: number; message: string; retryAfterS: number };

/**
 * Signing in and out with a console user's password: the page and its form (CSRF by double
 * submit: the form's token is also in a cookie of its own), the form that signs out, and the
 * same as JSON (`/v1/console/session`, openapi.json).
 */
export function signinRoutes(c: ConsoleContext): Route[] {
  const { d, secure, signinName } = c;

  /**
   * Checks a sign-in and, when it holds, the Set-Cookie of its session. The address's token is
   * taken before the password is checked and given back when it is right, so sign-ins sent at
   * once are held to the limit as sent one by one; the name's own count is the store's.
   */
  const signIn = async (addr: string, name: string, password: string): Promise<SignIn> => {
    const token = d.signinFailures.take(addr);
    if (!token) {
      const wait = d.signinFailures.retryAfterS(addr);
      return {
        ok: false,
        status: 429,
        message: `Too many failed sign-ins from here; wait ${wait} s`,
        retryAfterS: wait,
      };
    }
    const r = await d.users.signIn(name, password);
    if (r.ok) token.refund();
    // Who signed in, or which name was tried and refused, from where (never the password). A
    // name no user could have is recorded as "?": it may be a password typed in the wrong box.
    if (r.ok || r.reason !== "busy")
      await d.users.audit.record({
        actorId: r.ok ? r.user.id : null,
        actor: r.ok ? r.user.name : USER_NAME.test(name) ? name : "?",
        address: addr,
        action: r.ok ? "signin" : "signin.failed",
        target: r.ok ? r.user.id : null,
        detail: r.ok ? { with: "password" } : { reason: r.reason },
      });
    if (!r.ok) {
      if (r.reason === "busy") {
        token.refund();
        return {
          ok: false,
          status: 429,
          message: "Too many sign-ins at once; retry in a moment",
          retryAfterS: r.retryAfterS ?? 1,
        };
      }
      // The same words whether or not a user has the name: a name that is nobody's locks too.
      return r.reason === "locked"
        ? {
            ok: false,
            status: 429,
            message: `This name is locked after repeated wrong passwords; try again in ${Math.ceil((r.retryAfterS ?? 60) / 60)} min`,
            retryAfterS: r.retryAfterS ?? 60,
          }
        : { ok: false, status: 401, message: "Wrong user or password", retryAfterS: 0 };
    }
    return {
      ok: true,
      cookie: c.sessionCookie(r.session),
      session: { user: r.user, csrf: r.csrf, expiresAt: Date.now() + SESSION_MS },
    };
  };

  return [
    {
      method: "GET",
      path: "/console/signin",
      handle: ({ res, query }) => {
        const next = query.get("next") ?? "/console";
        c.showSignin(res, isLocalPath(next) ? next : "/console");
      },
    },
    {
      method: "POST",
      path: "/console/signin",
      handle: async ({ req, res }) => {
        const form = await readFormBody(req, FORM_CAP_BYTES);
        if (!form.ok)
          return c.sendPage(res, form.refusal.status, messagePage("Sign in", form.refusal.message));
        const f = form.value;
        const next = f.next && isLocalPath(f.next) ? f.next : "/console";
        if (!sameSecret(f.csrf, parseCookies(req.headers.cookie).get(signinName)))
          return c.showSignin(
            res,
            next,
            403,
            "The form expired or did not come from this page; sign in again",
          );
        const r = await signIn(d.clientOf(req), f.name ?? "", f.password ?? "");
        if (!r.ok) {
          if (r.retryAfterS > 0) res.setHeader("Retry-After", String(r.retryAfterS));
          return c.showSignin(res, next, r.status, r.message);
        }
        c.seeOther(res, next, {
          "Set-Cookie": [
            r.cookie,
            setCookie(signinName, "", { secure, maxAgeS: 0, sameSite: "Strict" }),
          ],
        });
      },
    },
    {
      method: "POST",
      path: "/console/signout",
      handle: async ({ req, res }) => {
        const form = await readFormBody(req, FORM_CAP_BYTES);
        const cookie = parseCookies(req.headers.cookie).get(c.cookieName);
        const s = await c.sessionOf(req);
        if (form.ok && s && cookie && sameSecret(form.value.csrf, s.csrf))
          await d.users.signOut(cookie);
        else if (s)
          return c.sendPage(
            res,
            403,
            messagePage("Sign out", "The form did not come from this console"),
          );
        c.seeOther(res, "/console/signin", { "Set-Cookie": c.clearedSession() });
      },
    },
    {
      method: "POST",
      path: "/v1/console/session",
      handle: async ({ req, res }) => {
        const body = await readJsonBody(req, FORM_CAP_BYTES);
        const b = body.ok ? (body.value as Record<string, unknown> | null) : null;
        if (!b || typeof b.name !== "string" || typeof b.password !== "string")
          return sendError(
            res,
            400,
            "INVALID_INPUT",
            'The body is {"name": "...", "password": "..."} as application/json',
          );
        const r = await signIn(d.clientOf(req), b.name, b.password);
        if (!r.ok)
          return sendError(
            res,
            r.status,
            r.status === 429 ? "BUSY" : "UNAUTHORIZED",
            r.message,
            r.retryAfterS > 0 ? { "Retry-After": String(r.retryAfterS) } : {},
          );
        sendJson(
          res,
          200,
          { user: r.session.user, csrf_token: r.session.csrf, expires_at: r.session.expiresAt },
          { "Set-Cookie": r.cookie },
        );
      },
    },
    {
      method: "GET",
      path: "/v1/console/session",
      // With the user's key ceiling: the most their keys may be given here (null: the server's
      // settings), which the keys page's form offers.
      handle: c.signedIn(async ({ res }, s) =>
        sendJson(res, 200, {
          user: s.user,
          csrf_token: s.csrf,
          expires_at: s.expiresAt,
          key_ceiling: await d.users.keyCeiling(s.user.id),
          // This server's URL as its clients reach it (the new key's snippets name it).
          server_url: d.config.issuer,
          // The policy form's bounds: the server's settings, and the most this user may give.
          limits: await limitsOf(d, s),
        }),
      ),
    },
    {
      method: "DELETE",
      path: "/v1/console/session",
      handle: c.signedIn(async ({ req, res }) => {
        await d.users.signOut(parseCookies(req.headers.cookie).get(c.cookieName)!);
        sendJson(res, 200, { signed_out: true }, { "Set-Cookie": c.clearedSession() });
      }),
    },
  ];
}

/** What a policy gives here, in a key policy's field names (the policy form shows them). */
function effective(p: CallerPolicy) {
  return {
    runtimes: p.call.runtimes,
    networks: p.call.networks,
    egress_allow: p.egressAllow,
    max_timeout_ms: p.call.timeoutMs.max,
    max_memory_mb: p.call.memoryMb.max,
    concurrency: p.quota.maxConcurrent,
    rate_per_minute: p.quota.ratePerMinute,
  };
}

/** The server's settings, and the most this user may give a key (null: an admin, held to none). */
async function limitsOf(d: ConsoleDeps, s: ConsoleSession) {
  return {
    server: effective(d.policyFor(null)),
    yours:
      s.user.role === "admin" ? null : effective(d.policyFor(await d.users.keyCeiling(s.user.id))),
  };
}
