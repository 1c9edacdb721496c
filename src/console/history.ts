import { sendError, sendJson } from "../http/respond.js";
import type { Route } from "../http/router.js";
import { noKey, ownedKeys, type ConsoleContext } from "./context.js";

export const RUNS_PAGE_MAX = 200;
export const USAGE_DAYS_MAX = 90;

/** A query parameter as a whole number in [min, max], absent: undefined; else an error text. */
function intParam(
  query: URLSearchParams,
  name: string,
  min: number,
  max: number,
): number | undefined | { error: string } {
  const raw = query.get(name);
  if (raw === null || raw === "") return undefined;
  if (!/^\d{1,16}$/.test(raw) || Number(raw) < min || Number(raw) > max)
    return { error: `${name} must be a whole number from ${min} to ${max}` };
  return Number(raw);
}

const isError = (v: unknown): v is { error: string } =>
  typeof v === "object" && v !== null && "error" in v;

/**
 * The runs and usage pages: a person's run history (newest first, a page at a time, filtered by
 * key, runtime, exit reason and time) and calls per day and key. A revoked key's runs stay in its
 * owner's history.
 */
export function historyRoutes(c: ConsoleContext): Route[] {
  const { d } = c;
  return [
    {
      method: "GET",
      path: "/v1/console/runs",
      handle: c.signedIn(async ({ res, query }, s) => {
        const limit = intParam(query, "limit", 1, RUNS_PAGE_MAX) ?? 50;
        const since = intParam(query, "since", 0, Number.MAX_SAFE_INTEGER);
        const before = intParam(query, "before", 0, Number.MAX_SAFE_INTEGER);
        for (const v of [limit, since, before])
          if (isError(v)) return sendError(res, 400, "INVALID_INPUT", v.error);
        const all = await ownedKeys(d.keys, s);
        const keys = all.map((k) => k.id);
        const names = new Map(all.map((k) => [k.id, k.name]));
        const keyId = query.get("key_id");
        if (keyId !== null && !keys.includes(keyId)) return noKey(res);
        const runtime = query.get("runtime") || undefined;
        const exitReason = query.get("exit_reason") || undefined;
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
      }),
    },
    {
      method: "GET",
      path: "/v1/console/usage",
      handle: c.signedIn(async ({ res, query }, s) => {
        const days = intParam(query, "days", 1, USAGE_DAYS_MAX) ?? 30;
        if (isError(days)) return sendError(res, 400, "INVALID_INPUT", days.error);
        const keys = await ownedKeys(d.keys, s);
        const today = Math.floor(Date.now() / 86_400_000);
        const since = (today - days + 1) * 86_400_000;
        sendJson(res, 200, {
          since: new Date(since).toISOString().slice(0, 10),
          days,
          keys: keys.map((k) => ({ id: k.id, name: k.name, revoked_at: k.revokedAt })),
          usage: await d.runs.usage(
            keys.map((k) => k.id),
            since,
          ),
        });
      }),
    },
  ];
}
