/**
 * A runtime's first calls back to back on a fresh server (issue 30): an agent or a test suite
 * starts the server and calls one runtime three times in a row, each call as soon as the last
 * answered. On the microVM backend nothing of a runtime exists before its first call (its template
 * is built then), so these calls show what the template's build costs the calls around it.
 * Each system is started fresh per round; per call index (1st, 2nd, 3rd) the median over the
 * runtimes and rounds, and the median of each runtime's three calls together.
 */
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { summarize, type Summary } from "./stats.js";
import type { McpSystem } from "./systems/scratchrun.js";
import { printWorkload } from "./workloads.js";
import type { RuntimeName } from "../src/schema/exec.js";

export interface FirstCallsPlan {
  runtimes: readonly RuntimeName[];
  /** Calls per runtime, back to back. */
  calls: number;
  /** Fresh servers per system. */
  rounds: number;
}

export interface FirstCallsSystem {
  system: string;
  /** byCall[i]: the (i+1)th call of a runtime, over runtimes and rounds (ms). */
  byCall: (Summary | null)[];
  /** A runtime's calls together, first to last answer (ms). */
  together: Summary | null;
  errors: number;
  firstError?: string;
  unsupported?: string;
}

export interface FirstCallsResults {
  plan: FirstCallsPlan;
  systems: FirstCallsSystem[];
}

async function roundOf(
  system: McpSystem,
  plan: FirstCallsPlan,
  byCall: number[][],
  together: number[],
  onError: (e: string) => void,
): Promise<void> {
  await system.start();
  try {
    for (const rt of plan.runtimes) {
      const begin = performance.now();
      let ok = true;
      for (let i = 0; i < plan.calls; i++) {
        const t = performance.now();
        const r = await system.call(printWorkload(rt));
        if (!r.ok) {
          ok = false;
          onError(`${rt} call ${i + 1}: ${r.error}`);
          continue;
        }
        byCall[i]!.push(performance.now() - t);
      }
      if (ok) together.push(performance.now() - begin);
    }
  } finally {
    await system.close();
  }
}

/** The phase: the systems take turns round by round, so a drift of the host hits them alike. */
export async function benchFirstCalls(
  systems: readonly McpSystem[],
  plan: FirstCallsPlan,
  log: (m: string) => void,
): Promise<FirstCallsResults> {
  const state = systems.map(() => ({
    byCall: Array.from({ length: plan.calls }, () => [] as number[]),
    together: [] as number[],
    errors: 0,
    firstError: undefined as string | undefined,
    failed: undefined as string | undefined,
  }));
  for (let round = 0; round < plan.rounds; round++)
    for (const [i, system] of systems.entries()) {
      const s = state[i]!;
      if (s.failed) continue;
      log(`first-calls ${system.id}: round ${round + 1}/${plan.rounds}`);
      try {
        await roundOf(system, plan, s.byCall, s.together, (e) => {
          s.errors++;
          s.firstError ??= e.slice(0, 300);
        });
      } catch (e) {
        s.failed = `failed: ${e instanceof Error ? e.message : String(e)}`;
        log(`first-calls ${system.id}: ${s.failed}`);
      }
    }
  const out = systems.map((system, i): FirstCallsSystem => {
    const s = state[i]!;
    const row: FirstCallsSystem = {
      system: system.id,
      byCall: s.byCall.map((ms) => summarize(ms)),
      together: summarize(s.together),
      errors: s.errors,
      ...(s.firstError ? { firstError: s.firstError } : {}),
      ...(s.failed ? { unsupported: s.failed } : {}),
    };
    log(
      `first-calls ${system.id}: ${row.byCall.map((c, k) => `call ${k + 1} p50 ${c?.p50 ?? "-"}`).join(", ")}; together p50 ${row.together?.p50 ?? "-"} ms; errors ${row.errors}`,
    );
    return row;
  });
  return { plan, systems: out };
}

/**
 * Makes a system's kept templates: one untimed start that calls each runtime once, then waits
 * until the template directory has stopped changing for `quietMs` (the pools' templates built
 * and saved in the background), at most `boundMs`.
 */
export async function primeTemplates(
  system: McpSystem,
  runtimes: readonly RuntimeName[],
  dir: string,
  log: (m: string) => void,
  quietMs = 15_000,
  boundMs = 300_000,
): Promise<number> {
  await system.start();
  try {
    for (const rt of runtimes) await system.call(printWorkload(rt));
    const t0 = Date.now();
    let last = "";
    let since = Date.now();
    while (Date.now() - t0 < boundMs) {
      const now = listing(dir);
      if (now !== last) [last, since] = [now, Date.now()];
      else if (Date.now() - since >= quietMs && now.includes(".template")) break;
      await new Promise((r) => setTimeout(r, 1000));
    }
  } finally {
    await system.close();
  }
  const n = readdirSync(dir).filter((f) => f.endsWith(".template")).length;
  log(`first-calls ${system.id}: ${n} templates kept in ${dir}`);
  return n;
}

const listing = (dir: string) => {
  try {
    return readdirSync(dir)
      .map((f) => `${f}:${statSync(join(dir, f)).size}`)
      .sort()
      .join(",");
  } catch {
    return "";
  }
};
