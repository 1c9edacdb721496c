import { sendError, sendJson } from "../http/respond.js";
import type { Route } from "../http/router.js";
import type { KeyPolicy, PolicyPatch } from "../policy/key-policy.js";
import { readObject, type ConsoleContext } from "./context.js";

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
          sendJson(x.res, 200, ceilingJson(x.params.user_id!, ceiling));
        } catch (e) {
          if (!(e instanceof TypeError)) throw e;
          sendError(x.res, 400, "INVALID_INPUT", e.message.replace(/^key policy/, "key ceiling"));
        }
      }),
    },
  ];
}
