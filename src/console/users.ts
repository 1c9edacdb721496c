import { sendError, sendJson } from "../http/respond.js";
import type { Route } from "../http/router.js";
import type { KeyPolicy, PolicyPatch } from "../policy/key-policy.js";
import { AUDIT_PAGE_MAX } from "../store/audit.js";
import { audited, readObject, type ConsoleContext } from "./context.js";

/**
 * Console users as an admin manages them: the list, and each user's key ceiling (the most a member
 * may give the keys they make and change; src/policy/ceiling.ts). A member is refused (403): the
 * list says who else uses the console. A member reads their own ceiling from their session
 * (GET /v1/console/session).
 */
export function userRoutes(c: ConsoleContext): Route[] {
  const { d } = c;
  const ceilingJson = (id: string, keyCeiling: KeyPolicy | null) => ({
    id,
    key_ceiling: keyCeiling,
  });
  const adminOnly = (res: Parameters<Route["handle"]>[0]["res"]) =>
    sendError(res, 403, "FORBIDDEN", "Only a console admin manages users");
  return [
    {
      // The audit log, newest first: an admin's to read; nothing here changes or removes an entry.
      method: "GET",
      path: "/v1/console/audit",
      handle: c.signedIn(async ({ res, query }, s) => {
        if (s.user.role !== "admin")
          return sendError(res, 403, "FORBIDDEN", "Only a console admin reads the audit log");
        const limit = Number(query.get("limit") ?? 50);
        const before = query.get("before");
        if (!Number.isInteger(limit) || limit < 1 || limit > AUDIT_PAGE_MAX)
          return sendError(res, 400, "INVALID_INPUT", `limit is 1 to ${AUDIT_PAGE_MAX}`);
        if (before !== null && !/^\d{1,16}$/.test(before))
          return sendError(res, 400, "INVALID_INPUT", "before is a time in ms");
        const entries = await d.users.audit.list(
          limit,
          before === null ? undefined : Number(before),
        );
        sendJson(res, 200, {
          entries: entries.map((e) => ({
            id: e.id,
            at: e.at,
            actor_id: e.actorId,
            actor: e.actor,
            address: e.address,
            action: e.action,
            target: e.target,
            detail: e.detail,
          })),
          next_before: entries.length === limit ? entries.at(-1)!.at : null,
        });
      }),
    },
    {
      method: "GET",
      path: "/v1/console/users",
      handle: c.signedIn(async ({ res }, s) => {
        if (s.user.role !== "admin") return adminOnly(res);
        const users = await d.users.listWithCeilings();
        sendJson(res, 200, {
          users: users.map((u) => ({
            id: u.id,
            name: u.name,
            role: u.role,
            key_ceiling: u.keyCeiling,
          })),
        });
      }),
    },
    {
      method: "PUT",
      path: "/v1/console/users/{user_id}/key-ceiling",
      handle: c.signedIn(async (x, s) => {
        if (s.user.role !== "admin") return adminOnly(x.res);
        const b = await readObject(x);
        if (!b) return;
        try {
          // A key policy's patch (null clears a field back to the server's setting).
          const ceiling = await d.users.setKeyCeiling(x.params.user_id!, b as PolicyPatch);
          if (ceiling === undefined)
            return sendError(x.res, 404, "NOT_FOUND", "No console user has this id");
          await audited(d, x, s, "user.ceiling", x.params.user_id!, { patch: b, ceiling });
          sendJson(x.res, 200, ceilingJson(x.params.user_id!, ceiling));
        } catch (e) {
          if (!(e instanceof TypeError)) throw e;
          sendError(x.res, 400, "INVALID_INPUT", e.message.replace(/^key policy/, "key ceiling"));
        }
      }),
    },
  ];
}
