import type { ServerResponse } from "node:http";
import { sendError, sendJson } from "../http/respond.js";
import type { Route } from "../http/router.js";
import { refusedFields, beyondCeiling } from "../policy/ceiling.js";
import { applyPatch, type KeyPolicy, type PolicyPatch } from "../policy/key-policy.js";
import type { KeyInfo } from "../store/keys.js";
import type { Grant } from "../store/oauth.js";
import type { ConsoleSession } from "../store/users.js";
import {
  audited,
  noKey,
  ownedKeys,
  readObject,
  visibleKeys,
  type ConsoleContext,
} from "./context.js";

export function keyJson(k: KeyInfo) {
  return {
    id: k.id,
    name: k.name,
    owner_id: k.ownerId,
    created_at: k.createdAt,
    last_used_at: k.lastUsedAt,
    policy: k.policy,
    revoked_at: k.revokedAt,
    expires_at: k.expiresAt,
  };
}

/** A grant as the console's routes answer it (the key's page and the grants list). */
export function grantJson(g: Grant) {
  return {
    id: g.id,
    key_id: g.keyId,
    client_id: g.clientId,
    client_name: g.clientName,
    resource: g.resource,
    scope: g.scope,
    created_at: g.createdAt,
    revoked_at: g.revokedAt,
    revoked_reason: g.revokedReason,
  };
}

/** A member's key policy beyond their ceiling: refused with every field that is (403). */
class BeyondCeiling extends Error {}

/**
 * The keys page: the keys a person may see (create, revoke, change a policy) and the OAuth
 * grants of those keys (list, revoke). A key another user holds is "not found", never
 * "forbidden", so its id says nothing. A member's new key, and each field a member's change
 * names, must stay within the key ceiling an admin gave that member (src/policy/ceiling.ts;
 * unset: the server's settings); an admin's writes are not held to one.
 */
export function keyRoutes(c: ConsoleContext): Route[] {
  const { d } = c;
  const mine = async (s: ConsoleSession, id: string) =>
    (await visibleKeys(d.keys, s)).find((k) => k.id === id) ?? null;
  /** The same checks as `scratchrun keys`: the store parses a policy and throws a TypeError. */
  const asInput = (res: ServerResponse, e: unknown) => {
    if (e instanceof BeyondCeiling) return sendError(res, 403, "FORBIDDEN", e.message);
    if (!(e instanceof TypeError)) throw e;
    sendError(res, 400, "INVALID_INPUT", e.message);
  };
  /** For a member: throws BeyondCeiling when `policy` leaves a `named` field beyond theirs. */
  const withinCeiling = async (s: ConsoleSession, named: readonly string[] | "all") => {
    if (s.user.role === "admin") return () => {};
    const ceiling = d.policyFor(await d.users.keyCeiling(s.user.id));
    return (policy: KeyPolicy | null) => {
      const refused = refusedFields(beyondCeiling(d.policyFor(policy), ceiling), named);
      if (refused.length)
        throw new BeyondCeiling(
          `Beyond the most an admin lets you give your keys: ${refused.map((b) => b.message).join("; ")}`,
        );
    };
  };
  return [
    {
      method: "GET",
      path: "/v1/console/keys",
      // state=all: the revoked and expired keys too, which the keys page lists as such.
      handle: c.signedIn(async ({ res, query }, s) => {
        const all = query.get("state") === "all";
        const keys = all ? await ownedKeys(d.keys, s) : await visibleKeys(d.keys, s);
        sendJson(res, 200, { keys: keys.map(keyJson) });
      }),
    },
    {
      method: "POST",
      path: "/v1/console/keys",
      handle: c.signedIn(async (x, s) => {
        const b = await readObject(x);
        if (!b) return;
        if (typeof b.name !== "string")
          return sendError(
            x.res,
            400,
            "INVALID_INPUT",
            'name is required: {"name": "...", "policy": {...}}',
          );
        if (b.policy !== undefined && (typeof b.policy !== "object" || Array.isArray(b.policy)))
          return sendError(
            x.res,
            400,
            "INVALID_INPUT",
            "policy is an object (or null: the server's settings)",
          );
        const expiresAt = b.expires_at ?? null;
        if (expiresAt !== null && typeof expiresAt !== "number")
          return sendError(
            x.res,
            400,
            "INVALID_INPUT",
            "expires_at is a time in ms since the epoch (or null: never)",
          );
        try {
          const policy = (b.policy as PolicyPatch | null | undefined) ?? null;
          (await withinCeiling(s, "all"))(policy ? applyPatch(null, policy) : null);
          const k = await d.keys.create(b.name, policy, Date.now(), s.user.id, null, expiresAt);
          await audited(d, x, s, "key.create", k.id, {
            name: b.name,
            policy: k.policy,
            expires_at: k.expiresAt,
          });
          sendJson(x.res, 201, {
            id: k.id,
            name: b.name,
            key: k.key,
            policy: k.policy,
            expires_at: k.expiresAt,
          });
        } catch (e) {
          asInput(x.res, e);
        }
      }),
    },
    {
      method: "DELETE",
      path: "/v1/console/keys/{key_id}",
      handle: c.signedIn(async (x, s) => {
        const { res, params } = x;
        const k = await mine(s, params.key_id!);
        if (!k) return noKey(res);
        const revoked = (await d.keys.revoke(k.id)).includes(k.id);
        if (revoked) await audited(d, x, s, "key.revoke", k.id, { name: k.name });
        d.keyChanged?.(k.id);
        sendJson(res, 200, { id: k.id, revoked });
      }),
    },
    {
      method: "PUT",
      path: "/v1/console/keys/{key_id}/policy",
      handle: c.signedIn(async (x, s) => {
        const k = await mine(s, x.params.key_id!);
        if (!k) return noKey(x.res);
        const b = await readObject(x);
        if (!b) return;
        try {
          // The same patch as `scratchrun keys update` (null clears a field), checked as a whole.
          const admit = await withinCeiling(s, Object.keys(b));
          const u = await d.keys.updatePolicy(k.id, b as PolicyPatch, admit);
          if (!u) return noKey(x.res);
          await audited(d, x, s, "key.policy", u.id, { patch: b, policy: u.policy });
          d.keyChanged?.(u.id);
          sendJson(x.res, 200, { id: u.id, policy: u.policy });
        } catch (e) {
          asInput(x.res, e);
        }
      }),
    },
    {
      method: "GET",
      path: "/v1/console/keys/{key_id}/grants",
      handle: c.signedIn(async ({ res, params }, s) => {
        const k = await mine(s, params.key_id!);
        if (!k) return noKey(res);
        sendJson(res, 200, { grants: (await d.oauth.grantsFor([k.id])).map(grantJson) });
      }),
    },
    {
      method: "GET",
      path: "/v1/console/grants",
      handle: c.signedIn(async ({ res }, s) => {
        const keys = await visibleKeys(d.keys, s);
        const grants = await d.oauth.grantsFor(keys.map((k) => k.id));
        sendJson(res, 200, { grants: grants.map(grantJson) });
      }),
    },
    {
      method: "DELETE",
      path: "/v1/console/grants/{grant_id}",
      handle: c.signedIn(async (x, s) => {
        const { res, params } = x;
        const g = await d.oauth.grant(params.grant_id!);
        const keys = await visibleKeys(d.keys, s);
        if (!g || !keys.some((k) => k.id === g.keyId))
          return sendError(res, 404, "NOT_FOUND", "No grant of your keys has this id");
        const revoked = await d.oauth.revokeGrant(g.id, `revoked by ${s.user.name}`);
        if (revoked)
          await audited(d, x, s, "grant.revoke", g.id, {
            key_id: g.keyId,
            client_name: g.clientName,
          });
        sendJson(res, 200, { id: g.id, revoked });
      }),
    },
  ];
}
