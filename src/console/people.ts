import { randomBytes } from "node:crypto";
import type { ServerResponse } from "node:http";
import { readFormBody } from "../http/body.js";
import { sendError, sendJson } from "../http/respond.js";
import type { Route } from "../http/router.js";
import { InviteMakerNotAdmin, type Invite } from "../store/invites.js";
import type { ConsoleSession, Role } from "../store/users.js";
import { audited, FORM_CAP_BYTES, readObject, sameSecret, type ConsoleContext } from "./context.js";
import { parseCookies, setCookie } from "./cookies.js";
import { invitePage, messagePage } from "./pages.js";

/** The path an invite or reset link opens; its token rides in the query. */
export const INVITE_PATH = "/console/invite";

export function inviteLink(serverUrl: string, token: string): string {
  return `${serverUrl.replace(/\/+$/, "")}${INVITE_PATH}?token=${token}`;
}

export function inviteJson(i: Invite) {
  return {
    id: i.id,
    purpose: i.purpose,
    name: i.name,
    role: i.role,
    user_id: i.userId,
    created_by: i.createdBy,
    created_at: i.createdAt,
    expires_at: i.expiresAt,
  };
}

const isRole = (r: unknown): r is Role => r === "admin" || r === "member";

/**
 * People as an admin manages them in the console: invite someone (a one-time link to copy), send
 * a password-reset link, change a role, remove a person; and the page those links open, where the
 * holder chooses a password and is signed in. Every change is in the audit log. A member is
 * refused each admin route (403). An admin does not change their own role or remove themselves,
 * so a console never loses its last admin by a slip: another admin does it, or the CLI.
 */
export function peopleRoutes(c: ConsoleContext): Route[] {
  const { d, secure, signinName } = c;
  const adminOnly = (res: ServerResponse, s: ConsoleSession) => {
    if (s.user.role === "admin") return false;
    sendError(res, 403, "FORBIDDEN", "Only a console admin manages people");
    return true;
  };
  /** A link refused by the store: its maker was made a member after their request's check. */
  const notAdminNow = (res: ServerResponse, e: unknown) => {
    if (!(e instanceof InviteMakerNotAdmin)) return false;
    sendError(res, 403, "FORBIDDEN", "Only a console admin manages people");
    return true;
  };
  const notFound = (res: ServerResponse) =>
    sendError(res, 404, "NOT_FOUND", "No console user has this id");
  const notSelf = (res: ServerResponse, s: ConsoleSession, id: string) => {
    if (s.user.id !== id) return false;
    sendError(res, 400, "INVALID_INPUT", "Not on yourself: ask another admin (or use the CLI)");
    return true;
  };

  /** The invite page with a fresh CSRF token in its form and its own cookie (double submit). */
  const showInvite = (
    res: ServerResponse,
    token: string,
    i: Invite,
    status = 200,
    error?: string,
  ) => {
    const csrf = randomBytes(24).toString("base64url");
    res.setHeader(
      "Set-Cookie",
      setCookie(signinName, csrf, { secure, maxAgeS: 600, sameSite: "Strict" }),
    );
    c.sendPage(
      res,
      status,
      invitePage({
        csrf,
        token,
        name: i.name,
        purpose: i.purpose,
        role: i.role,
        ...(error ? { error } : {}),
      }),
    );
  };
  const deadLink = (res: ServerResponse) =>
    c.sendPage(
      res,
      410,
      messagePage(
        "This link does not work",
        "It was used already, it expired (links last 24 hours), it was cancelled, or it was never made here. Ask an admin for a new one.",
      ),
    );

  return [
    {
      method: "GET",
      path: INVITE_PATH,
      handle: async ({ res, query }) => {
        const token = query.get("token") ?? "";
        const i = await d.users.invites.peek(token);
        if (!i) return deadLink(res);
        showInvite(res, token, i);
      },
    },
    {
      method: "POST",
      path: INVITE_PATH,
      handle: async ({ req, res }) => {
        const form = await readFormBody(req, FORM_CAP_BYTES);
        if (!form.ok)
          return c.sendPage(res, form.refusal.status, messagePage("Join", form.refusal.message));
        const f = form.value;
        const token = f.token ?? "";
        const addr = d.clientOf(req);
        // Failed tries count against the address as failed sign-ins do.
        const turn = d.signinFailures.take(addr);
        if (!turn) {
          res.setHeader("Retry-After", String(d.signinFailures.retryAfterS(addr)));
          return c.sendPage(res, 429, messagePage("Join", "Too many failed tries from here; wait"));
        }
        const i = await d.users.invites.peek(token);
        if (!i) return deadLink(res);
        if (!sameSecret(f.csrf, parseCookies(req.headers.cookie).get(signinName)))
          return showInvite(
            res,
            token,
            i,
            403,
            "The form expired or did not come from this page; try again",
          );
        turn.refund();
        if ((f.password ?? "") !== (f.password2 ?? ""))
          return showInvite(res, token, i, 400, "The two passwords differ");
        let r;
        try {
          r = await d.users.acceptInvite(token, f.password ?? "");
        } catch (e) {
          if (!(e instanceof TypeError)) throw e;
          return showInvite(res, token, i, 400, e.message.replace(/^a password/, "A password"));
        }
        if (!r.ok) return deadLink(res);
        await d.users.audit.record({
          actorId: r.user.id,
          actor: r.user.name,
          address: addr,
          action: r.invite.purpose === "join" ? "user.join" : "user.password",
          target: r.user.id,
          detail: { invite_id: r.invite.id, role: r.user.role },
        });
        c.seeOther(res, "/console", {
          "Set-Cookie": [
            c.sessionCookie(r.session),
            setCookie(signinName, "", { secure, maxAgeS: 0, sameSite: "Strict" }),
          ],
        });
      },
    },
    {
      method: "GET",
      path: "/v1/console/invites",
      handle: c.signedIn(async ({ res }, s) => {
        if (adminOnly(res, s)) return;
        sendJson(res, 200, { invites: (await d.users.invites.pending()).map(inviteJson) });
      }),
    },
    {
      method: "POST",
      path: "/v1/console/invites",
      handle: c.signedIn(async (x, s) => {
        if (adminOnly(x.res, s)) return;
        const b = await readObject(x);
        if (!b) return;
        const role = b.role ?? "member";
        if (typeof b.name !== "string" || !isRole(role))
          return sendError(
            x.res,
            400,
            "INVALID_INPUT",
            'The body is {"name": "...", "role": "member" or "admin"}',
          );
        try {
          const { invite, token } = await d.users.invite(b.name, role, s.user.id);
          await audited(d, x, s, "user.invite", invite.id, {
            name: invite.name,
            role: invite.role,
            expires_at: invite.expiresAt,
          });
          sendJson(x.res, 201, { ...inviteJson(invite), link: inviteLink(d.config.issuer, token) });
        } catch (e) {
          if (notAdminNow(x.res, e)) return;
          if (!(e instanceof TypeError)) throw e;
          sendError(x.res, 400, "INVALID_INPUT", e.message);
        }
      }),
    },
    {
      method: "DELETE",
      path: "/v1/console/invites/{invite_id}",
      handle: c.signedIn(async (x, s) => {
        if (adminOnly(x.res, s)) return;
        const id = x.params.invite_id!;
        if (!(await d.users.invites.cancel(id)))
          return sendError(x.res, 404, "NOT_FOUND", "No open invite has this id");
        await audited(d, x, s, "invite.cancel", id);
        sendJson(x.res, 200, { id, cancelled: true });
      }),
    },
    {
      method: "POST",
      path: "/v1/console/users/{user_id}/reset-link",
      handle: c.signedIn(async (x, s) => {
        if (adminOnly(x.res, s)) return;
        let made;
        try {
          made = await d.users.resetLink(x.params.user_id!, s.user.id);
        } catch (e) {
          if (notAdminNow(x.res, e)) return;
          throw e;
        }
        if (!made) return notFound(x.res);
        await audited(d, x, s, "user.reset", made.invite.userId, {
          name: made.invite.name,
          invite_id: made.invite.id,
          expires_at: made.invite.expiresAt,
        });
        sendJson(x.res, 201, {
          ...inviteJson(made.invite),
          link: inviteLink(d.config.issuer, made.token),
        });
      }),
    },
    {
      method: "PUT",
      path: "/v1/console/users/{user_id}/role",
      handle: c.signedIn(async (x, s) => {
        if (adminOnly(x.res, s)) return;
        const id = x.params.user_id!;
        const b = await readObject(x);
        if (!b) return;
        if (!isRole(b.role))
          return sendError(
            x.res,
            400,
            "INVALID_INPUT",
            'The body is {"role": "admin" or "member"}',
          );
        if (notSelf(x.res, s, id)) return;
        const user = await d.users.byId(id);
        if (!user) return notFound(x.res);
        const u = await d.users.setRole(user.name, b.role);
        if (!u) return notFound(x.res);
        await audited(d, x, s, "user.role", u.id, { name: u.name, from: user.role, role: u.role });
        sendJson(x.res, 200, { id: u.id, name: u.name, role: u.role });
      }),
    },
    {
      method: "DELETE",
      path: "/v1/console/users/{user_id}",
      handle: c.signedIn(async (x, s) => {
        if (adminOnly(x.res, s)) return;
        const id = x.params.user_id!;
        if (notSelf(x.res, s, id)) return;
        const user = await d.users.byId(id);
        if (!user) return notFound(x.res);
        const r = await d.users.remove(user.name);
        if (!r) return notFound(x.res);
        for (const k of r.revoked) d.keyChanged?.(k);
        await audited(d, x, s, "user.remove", id, { name: user.name, revoked_keys: r.revoked });
        sendJson(x.res, 200, { id, removed: true, revoked_keys: r.revoked });
      }),
    },
  ];
}
