import type { IncomingMessage, ServerResponse } from "node:http";
import { readJsonBody } from "../http/body.js";
import { refuse, sendError, sendJson } from "../http/respond.js";
import type { PolicyPatch } from "../policy/key-policy.js";
import type { KeyInfo, KeyStore } from "../store/keys.js";
import type { Grant, OAuthStore } from "../store/oauth.js";
import type { RunStore } from "../store/runs.js";
import type { ConsoleSession } from "../store/users.js";

/**
 * The console's JSON routes behind its pages (openapi.json), after routes.ts has found the
 * session and checked the CSRF token of a write: keys (create, revoke, policy), a key's OAuth
 * grants, run history and usage, the server's health, and a run as one of the user's keys. Each
 * acts only on `visible` keys (an admin: every active key; a member: their own active keys; the
 * history also on `owned`, their revoked ones too); a key another
 * user holds is "not found", never "forbidden", so its id says nothing.
 */
export interface ConsoleApiDeps {
  keys: KeyStore;
  runs: RunStore;
  oauth: OAuthStore;
  /** Runs the request as this key (its policy, quota and records), answering as /v1/exec. */
  execAs(req: IncomingMessage, res: ServerResponse, keyId: string, request: unknown): Promise<void>;
  /** The server's health: readiness, pools, workers (cluster), image and its runtimes. */
  health(): Record<string, unknown>;
  bodyCapBytes: number;
}

const SMALL_BODY = 64 * 1024;
export const RUNS_PAGE_MAX = 200;
export const USAGE_DAYS_MAX = 90;

/** The openapi path of a console API request, or null when it is not one of these routes. */
export function consoleApiLabel(path: string): string | null {
  if (
    [
      "/v1/console/runs",
      "/v1/console/usage",
      "/v1/console/health",
      "/v1/console/exec",
      "/v1/console/keys",
    ].includes(path)
  )
    return path;
  const m = /^\/v1\/console\/keys\/[^/]+(\/policy|\/grants)?$/.exec(path);
  return m ? `/v1/console/keys/{key_id}${m[1] ?? ""}` : null;
}

export function keyJson(k: KeyInfo) {
  return {
    id: k.id,
    name: k.name,
    owner_id: k.ownerId,
    created_at: k.createdAt,
    last_used_at: k.lastUsedAt,
    policy: k.policy,
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

/** A query parameter as a whole number in [min, max], absent: undefined; else an error text. */
function intParam(
  url: URL,
  name: string,
  min: number,
  max: number,
): number | undefined | { error: string } {
  const raw = url.searchParams.get(name);
  if (raw === null || raw === "") return undefined;
  if (!/^\d{1,16}$/.test(raw) || Number(raw) < min || Number(raw) > max)
    return { error: `${name} must be a whole number from ${min} to ${max}` };
  return Number(raw);
}

const isError = (v: unknown): v is { error: string } =>
  typeof v === "object" && v !== null && "error" in v;

export function consoleApi(d: ConsoleApiDeps) {
  const readBody = async (req: IncomingMessage, res: ServerResponse, cap = SMALL_BODY) => {
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
  };

  return async (
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    method: string,
    s: ConsoleSession,
    visible: () => Promise<KeyInfo[]>,
    owned: () => Promise<KeyInfo[]>,
  ): Promise<boolean> => {
    const url = new URL(req.url ?? "/", "http://x");
    const keyRoute = /^\/v1\/console\/keys\/([^/]+)(\/policy|\/grants)?$/.exec(path);
    const mine = async (id: string) => (await visible()).find((k) => k.id === id) ?? null;
    const noKey = () => sendError(res, 404, "NOT_FOUND", "None of your active keys has this id");

    if (path === "/v1/console/keys" && method === "POST") {
      const b = await readBody(req, res);
      if (!b) return true;
      if (typeof b.name !== "string") {
        sendError(res, 400, "INVALID_INPUT", 'name is required: {"name": "...", "policy": {...}}');
        return true;
      }
      if (b.policy !== undefined && (typeof b.policy !== "object" || Array.isArray(b.policy))) {
        sendError(
          res,
          400,
          "INVALID_INPUT",
          "policy is an object (or null: the server's settings)",
        );
        return true;
      }
      try {
        // The same checks as `scratchrun keys create`: KeyStore.create parses the policy.
        const c = await d.keys.create(
          b.name,
          (b.policy as PolicyPatch | null | undefined) ?? null,
          Date.now(),
          s.user.id,
        );
        sendJson(res, 201, { id: c.id, name: b.name, key: c.key, policy: c.policy });
      } catch (e) {
        if (!(e instanceof TypeError)) throw e;
        sendError(res, 400, "INVALID_INPUT", e.message);
      }
      return true;
    }
    if (keyRoute && !keyRoute[2] && method === "DELETE") {
      const k = await mine(keyRoute[1]!);
      if (!k) noKey();
      else sendJson(res, 200, { id: k.id, revoked: (await d.keys.revoke(k.id)).includes(k.id) });
      return true;
    }
    if (keyRoute && keyRoute[2] === "/policy" && method === "PUT") {
      const k = await mine(keyRoute[1]!);
      if (!k) {
        noKey();
        return true;
      }
      const b = await readBody(req, res);
      if (!b) return true;
      try {
        // The same patch as `scratchrun keys update` (null clears a field), checked as a whole.
        const u = await d.keys.updatePolicy(k.id, b as PolicyPatch);
        if (!u) noKey();
        else sendJson(res, 200, { id: u.id, policy: u.policy });
      } catch (e) {
        if (!(e instanceof TypeError)) throw e;
        sendError(res, 400, "INVALID_INPUT", e.message);
      }
      return true;
    }
    if (keyRoute && keyRoute[2] === "/grants" && method === "GET") {
      const k = await mine(keyRoute[1]!);
      if (!k) noKey();
      else sendJson(res, 200, { grants: (await d.oauth.grantsFor([k.id])).map(grantJson) });
      return true;
    }
    if (path === "/v1/console/runs" && method === "GET") {
      const limit = intParam(url, "limit", 1, RUNS_PAGE_MAX) ?? 50;
      const since = intParam(url, "since", 0, Number.MAX_SAFE_INTEGER);
      const before = intParam(url, "before", 0, Number.MAX_SAFE_INTEGER);
      for (const v of [limit, since, before])
        if (isError(v)) {
          sendError(res, 400, "INVALID_INPUT", v.error);
          return true;
        }
      // A revoked key's runs stay in its owner's history.
      const all = await owned();
      const keys = all.map((k) => k.id);
      const names = new Map(all.map((k) => [k.id, k.name]));
      const keyId = url.searchParams.get("key_id");
      if (keyId !== null && !keys.includes(keyId)) {
        noKey();
        return true;
      }
      const runtime = url.searchParams.get("runtime") || undefined;
      const exitReason = url.searchParams.get("exit_reason") || undefined;
      const runs = await d.runs.history({
        keyIds: keyId !== null ? [keyId] : keys,
        limit: limit as number,
        ...(runtime ? { runtime } : {}),
        ...(exitReason ? { exitReason } : {}),
        ...(since !== undefined ? { since: since as number } : {}),
        ...(before !== undefined ? { before: before as number } : {}),
      });
      const last = runs.at(-1);
      sendJson(res, 200, {
        runs: runs.map((r) => ({ ...r, key_name: names.get(r.key_id) ?? null })),
        next_before: runs.length === limit && last ? last.received_at : null,
      });
      return true;
    }
    if (path === "/v1/console/usage" && method === "GET") {
      const days = intParam(url, "days", 1, USAGE_DAYS_MAX) ?? 30;
      if (isError(days)) {
        sendError(res, 400, "INVALID_INPUT", days.error);
        return true;
      }
      const keys = await owned();
      const today = Math.floor(Date.now() / 86_400_000);
      const since = (today - (days as number) + 1) * 86_400_000;
      sendJson(res, 200, {
        since: new Date(since).toISOString().slice(0, 10),
        days,
        keys: keys.map((k) => ({ id: k.id, name: k.name, revoked_at: k.revokedAt })),
        usage: await d.runs.usage(
          keys.map((k) => k.id),
          since,
        ),
      });
      return true;
    }
    if (path === "/v1/console/health" && method === "GET") {
      sendJson(res, 200, d.health());
      return true;
    }
    if (path === "/v1/console/exec" && method === "POST") {
      const b = await readBody(req, res, d.bodyCapBytes);
      if (!b) return true;
      const { key_id: keyId, ...request } = b;
      if (typeof keyId !== "string") {
        sendError(res, 400, "INVALID_INPUT", "key_id names the key to run as (one of yours)");
        return true;
      }
      if (!(await mine(keyId))) noKey();
      else await d.execAs(req, res, keyId, request);
      return true;
    }
    return false;
  };
}
