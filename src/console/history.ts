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
 * key, runtime, exit reason, session and time), one run's page (everything recorded about it: no
 * code or output, which are never stored), and calls per day and key. A revoked key's runs stay
 * in its owner's history.
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
        const session = query.get("session") || undefined;
        const runs = await d.runs.history({
          keyIds: keyId !== null ? [keyId] : keys,
          limit: limit as number,
          ...(runtime ? { runtime } : {}),
          ...(exitReason ? { exitReason } : {}),
          ...(session ? { session } : {}),
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
      path: "/v1/console/runs/{run_id}",
      handle: c.signedIn(async ({ res, params }, s) => {
        const all = await ownedKeys(d.keys, s);
        const found = await d.runs.one(
          all.map((k) => k.id),
          params.run_id!,
        );
        if (!found)
          return sendError(res, 404, "NOT_FOUND", "None of your keys has a run with this id");
        const key = all.find((k) => k.id === found.run.key_id);
        sendJson(res, 200, { ...found, key_name: key?.name ?? null });
      }),
    },
    {
      method: "GET",
      path: "/v1/console/usage",
      handle: c.signedIn(async ({ res, query }, s) => {
        const period = usagePeriod(query, Date.now());
        if ("error" in period) return sendError(res, 400, "INVALID_INPUT", period.error);
        const keys = await ownedKeys(d.keys, s);
        const keyIds = keys.map((k) => k.id);
        const { since, until, days } = period;
        sendJson(res, 200, {
          since: new Date(since).toISOString().slice(0, 10),
          until: new Date(until - DAY_MS).toISOString().slice(0, 10),
          days,
          keys: keys.map((k) => ({ id: k.id, name: k.name, revoked_at: k.revokedAt })),
          usage: await d.runs.usage(keyIds, since, until),
          ...(await d.runs.report({ keyIds, since, until, now: Date.now() })),
        });
      }),
    },
  ];
}

const DAY_MS = 86_400_000;
const DATE = /^\d{4}-\d\d-\d\d$/;

/**
 * The usage page's period, whole UTC days: `from` and `to` (YYYY-MM-DD, both included), or the
 * last `days` days to `to` (today when absent); at most USAGE_DAYS_MAX days.
 */
export function usagePeriod(
  query: URLSearchParams,
  now: number,
): { since: number; until: number; days: number } | { error: string } {
  const day = (name: string): number | undefined | { error: string } => {
    const raw = query.get(name);
    if (raw === null || raw === "") return undefined;
    const ms = DATE.test(raw) ? Date.parse(`${raw}T00:00:00Z`) : NaN;
    if (!Number.isFinite(ms) || new Date(ms).toISOString().slice(0, 10) !== raw)
      return { error: `${name} must be a date, YYYY-MM-DD (UTC)` };
    return ms;
  };
  const from = day("from");
  const to = day("to");
  const n = intParam(query, "days", 1, USAGE_DAYS_MAX);
  for (const v of [from, to, n]) if (isError(v)) return v;
  const last = (to as number | undefined) ?? Math.floor(now / DAY_MS) * DAY_MS;
  const first =
    (from as number | undefined) ?? last - (((n as number | undefined) ?? 30) - 1) * DAY_MS;
  const days = (last - first) / DAY_MS + 1;
  if (days < 1) return { error: "from must be on or before to" };
  if (days > USAGE_DAYS_MAX) return { error: `A period is at most ${USAGE_DAYS_MAX} days` };
  return { since: first, until: last + DAY_MS, days };
}
