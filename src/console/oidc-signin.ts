import type { ServerResponse } from "node:http";
import type { Route } from "../http/router.js";
import type { TrustedIssuer } from "../oauth/oidc.js";
import { isLocalPath } from "../oauth/uris.js";
import { sameSecret, type ConsoleContext } from "./context.js";
import { oidcCookieName, parseCookies, setCookie } from "./cookies.js";

/**
 * Sign-in through the trusted issuer (when it has a client ID): the browser's state, nonce and
 * PKCE verifier ride in a short-lived HttpOnly cookie (SameSite=Lax: it must come back on the
 * issuer's top-level redirect), so whichever replica the callback reaches can check it.
 */
export function oidcSigninRoutes(c: ConsoleContext, oidc: TrustedIssuer): Route[] {
  const { d, secure } = c;
  const oidcName = oidcCookieName(secure);
  const callbackUri = `${d.config.issuer}/console/oidc/callback`;

  const start = async (res: ServerResponse, next: string) => {
    let t: Awaited<ReturnType<TrustedIssuer["startSignIn"]>>;
    try {
      t = await oidc.startSignIn(callbackUri);
    } catch (e) {
      return c.showSignin(res, next, 503, e instanceof Error ? e.message : String(e));
    }
    const pending = Buffer.from(
      JSON.stringify({ s: t.state, n: t.nonce, v: t.verifier, next }),
    ).toString("base64url");
    c.seeOther(res, t.to, {
      "Set-Cookie": setCookie(oidcName, pending, { secure, maxAgeS: 600, sameSite: "Lax" }),
    });
  };

  const finish = async (
    res: ServerResponse,
    addr: string,
    cookies: string | undefined,
    query: URLSearchParams,
  ) => {
    const clear = setCookie(oidcName, "", { secure, maxAgeS: 0, sameSite: "Lax" });
    const refuse = (status: number, message: string) => {
      d.signinFailures.recordFailure(addr);
      res.setHeader("Set-Cookie", clear);
      c.showSignin(res, "/console", status, message);
    };
    const wait = d.signinFailures.retryAfterS(addr);
    if (wait > 0) {
      res.setHeader("Retry-After", String(wait));
      return c.showSignin(
        res,
        "/console",
        429,
        `Too many failed sign-ins from here; wait ${wait} s`,
      );
    }
    let pending: { s?: unknown; n?: unknown; v?: unknown; next?: unknown } = {};
    try {
      pending = JSON.parse(
        Buffer.from(parseCookies(cookies).get(oidcName) ?? "", "base64url").toString(),
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
      r = await oidc.finishSignIn(code, callbackUri, v, n);
    } catch (e) {
      return refuse(503, e instanceof Error ? e.message : String(e));
    }
    if (!r.ok) return refuse(401, `Sign-in refused: ${r.reason}`);
    const signed = await d.users.signInSubject(r.subject);
    await d.users.audit.record({
      actorId: signed.ok ? signed.user.id : null,
      actor: signed.ok ? signed.user.name : "?",
      address: addr,
      action: signed.ok ? "signin" : "signin.failed",
      target: signed.ok ? signed.user.id : null,
      detail: { with: "oidc", subject: r.subject, ...(signed.ok ? {} : { reason: signed.reason }) },
    });
    if (!signed.ok)
      return refuse(
        signed.reason === "locked" ? 429 : 403,
        signed.reason === "locked"
          ? "This account is locked; try again later"
          : `No console user is linked to this identity (subject ${r.subject}). An admin links one: scratchrun users create --name NAME --oidc-subject '${r.subject}'`,
      );
    const to = typeof next === "string" && isLocalPath(next) ? next : "/console";
    c.seeOther(res, to, { "Set-Cookie": [c.sessionCookie(signed.session), clear] });
  };

  return [
    {
      method: "GET",
      path: "/console/signin/oidc",
      handle: ({ res, query }) => {
        const next = query.get("next") ?? "/console";
        return start(res, isLocalPath(next) ? next : "/console");
      },
    },
    {
      method: "GET",
      path: "/console/oidc/callback",
      handle: ({ req, res, query }) => finish(res, d.clientOf(req), req.headers.cookie, query),
    },
  ];
}
