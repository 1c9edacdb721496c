import { readFormBody, readJsonBody } from "../http/body.js";
import { sendError, sendJson } from "../http/respond.js";
import type { Route } from "../http/router.js";
import { withParams } from "../oauth/uris.js";
import type { AuthRequest } from "../store/oauth.js";
import type { ConsoleSession } from "../store/users.js";
import { FORM_CAP_BYTES, sameSecret, visibleKeys, type ConsoleContext } from "./context.js";
import { consentPage, formTargetOf, messagePage } from "./pages.js";

const EXPIRED = "This authorization request expired or was decided already";

type Decision = { ok: true; to: string } | { ok: false; status: number; message: string };

/**
 * The OAuth consent page: a signed-in person approves a client's authorization request for one
 * of the keys they may see (an admin: every key; a member: their own), or denies it; the same as
 * JSON at `/v1/oauth/requests/{id}`. Either way the browser goes back to the client's redirect
 * URI with a code or an error.
 */
export function consentRoutes(c: ConsoleContext): Route[] {
  const { d } = c;
  const back = (r: AuthRequest, params: Record<string, string>) =>
    withParams(r.redirectUri, { ...params, state: r.state, iss: d.config.issuer });

  /** The person's decision on a request: where the browser goes next (code or error). */
  const decide = async (
    s: ConsoleSession,
    requestId: string,
    decision: unknown,
    keyId: unknown,
  ): Promise<Decision> => {
    const pending = await d.oauth.pendingRequest(requestId);
    if (!pending)
      return { ok: false, status: 400, message: `${EXPIRED}; start again from the client` };
    if (decision === "deny") {
      const r = await d.oauth.decide(requestId, { deny: true });
      if (!r) return { ok: false, status: 400, message: EXPIRED };
      const denied = { error: "access_denied", error_description: "the user denied the request" };
      return { ok: true, to: back(r.request, denied) };
    }
    if (decision !== "approve")
      return { ok: false, status: 400, message: "decision is approve or deny" };
    const mine = await visibleKeys(d.keys, s);
    if (typeof keyId !== "string" || !mine.some((k) => k.id === keyId))
      return { ok: false, status: 403, message: "key_id is not one of your active keys" };
    const r = await d.oauth.decide(requestId, { approve: { userId: s.user.id, keyId } });
    if (!r || !r.code) return { ok: false, status: 400, message: EXPIRED };
    return { ok: true, to: back(r.request, { code: r.code }) };
  };

  return [
    {
      method: "GET",
      path: "/oauth/consent",
      handle: async ({ req, res, query }) => {
        const id = query.get("request") ?? "";
        const s = await c.sessionOf(req);
        if (!s)
          return c.seeOther(
            res,
            `/console/signin?next=${encodeURIComponent(`/oauth/consent?request=${id}`)}`,
          );
        const r = await d.oauth.pendingRequest(id);
        if (!r)
          return c.sendPage(
            res,
            400,
            messagePage("Authorization", `${EXPIRED}; start again from the client`),
          );
        const keys = await visibleKeys(d.keys, s);
        const page = consentPage({
          requestId: r.id,
          csrf: s.csrf,
          userName: s.user.name,
          clientName: r.clientName,
          clientId: r.clientId,
          redirectUri: r.redirectUri,
          keys: keys.map((k) => ({ id: k.id, name: k.name })),
        });
        c.sendPage(res, 200, page, [formTargetOf(r.redirectUri)]);
      },
    },
    {
      method: "POST",
      path: "/oauth/consent",
      handle: async ({ req, res }) => {
        const form = await readFormBody(req, FORM_CAP_BYTES);
        const s = await c.sessionOf(req);
        if (!s) return c.sendPage(res, 401, messagePage("Authorization", "Sign in first"));
        if (!form.ok || !sameSecret(form.value.csrf, s.csrf))
          return c.sendPage(
            res,
            403,
            messagePage(
              "Authorization",
              "The form did not come from this console (CSRF token missing or wrong)",
            ),
          );
        const f = form.value;
        const r = await decide(s, f.request ?? "", f.decision, f.key_id);
        if (r.ok) c.seeOther(res, r.to);
        else c.sendPage(res, r.status, messagePage("Authorization", r.message));
      },
    },
    {
      method: "GET",
      path: "/v1/oauth/requests/{request_id}",
      handle: c.signedIn(async ({ res, params }) => {
        const r = await d.oauth.pendingRequest(params.request_id!);
        if (!r)
          return sendError(
            res,
            404,
            "NOT_FOUND",
            "No pending authorization request has this id (expired or decided)",
          );
        sendJson(res, 200, {
          id: r.id,
          client_id: r.clientId,
          client_name: r.clientName,
          redirect_uri: r.redirectUri,
          scope: r.scope,
          resource: r.resource,
          expires_at: r.expiresAt,
        });
      }),
    },
    {
      method: "POST",
      path: "/v1/oauth/requests/{request_id}",
      handle: c.signedIn(async ({ req, res, params }, s) => {
        const body = await readJsonBody(req, FORM_CAP_BYTES);
        const b = body.ok ? (body.value as Record<string, unknown> | null) : null;
        const r = await decide(s, params.request_id!, b?.decision, b?.key_id);
        if (r.ok) sendJson(res, 200, { redirect_to: r.to });
        else sendError(res, r.status, r.status === 403 ? "FORBIDDEN" : "INVALID_INPUT", r.message);
      }),
    },
  ];
}
