import type { Env } from "./read.js";
import { SETTINGS, SETTING_NAMES, type SettingName } from "./table.js";

/**
 * What start-up says about `SCRATCHRUN_*` variables the schema does not know: a typo
 * (`SCRATCHRUN_POOLSIZE`) would otherwise be ignored without a word. It warns and never fails:
 * an unknown name may be an older or newer ScratchRun's. Only names are read and said, never
 * values (a value may be a secret).
 */

const PREFIX = "SCRATCHRUN_";

/**
 * Edits between two strings: insertions, deletions, substitutions and swaps of two neighbours
 * (optimal string alignment), each 1.
 */
export function editDistance(a: string, b: string): number {
  // d[i][j]: edits between a's first i and b's first j characters; rows i-2, i-1 and i kept.
  let back2: number[] = [];
  let back = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(back[j]! + 1, row[j - 1]! + 1, back[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, back2[j - 2]! + 1);
      row.push(d);
    }
    back2 = back;
    back = row;
  }
  return back[b.length]!;
}

/**
 * The known name `name` most likely meant, compared past the prefix and case aside: the nearest
 * within a quarter of its length in edits (at least 1), the earlier of a tie; else the one
 * known name that contains it (`SCRATCHRUN_TIMEOUT_MS` → `SCRATCHRUN_MAX_TIMEOUT_MS`); else null.
 */
export function nearestSetting(name: string): SettingName | null {
  const tail = name.slice(PREFIX.length).toUpperCase();
  if (tail === "") return null;
  const within = Math.max(1, Math.floor(tail.length / 4));
  let best: SettingName | null = null;
  let bestDistance = within + 1;
  for (const known of SETTING_NAMES) {
    const d = editDistance(tail, known.slice(PREFIX.length));
    if (d < bestDistance) [best, bestDistance] = [known, d];
  }
  if (best) return best;
  const containing = SETTING_NAMES.filter((known) => known.slice(PREFIX.length).includes(tail));
  return tail.length >= 4 && containing.length === 1 ? containing[0]! : null;
}

export interface UnknownSetting {
  name: string;
  /** The known name it may be a slip for, or null. */
  suggestion: SettingName | null;
}

/** The variables of `env` named `SCRATCHRUN_…` (in any case) that the schema does not know, sorted. */
export function unknownSettings(env: Env): UnknownSetting[] {
  return Object.keys(env)
    .filter((name) => env[name] !== undefined)
    .filter((name) => name.toUpperCase().startsWith(PREFIX) && !Object.hasOwn(SETTINGS, name))
    .sort()
    .map((name) => ({ name, suggestion: nearestSetting(name) }));
}

/**
 * One line per unknown setting, for stderr at start (never stdout: the stdio MCP server's stdout
 * is JSON-RPC): `scratchrun: unknown setting SCRATCHRUN_POOLSIZE (did you mean
 * SCRATCHRUN_POOL_SIZE?)`.
 */
export function unknownSettingWarnings(env: Env, program: string): string[] {
  return unknownSettings(env).map(
    ({ name, suggestion }) =>
      `${program}: unknown setting ${name}${suggestion ? ` (did you mean ${suggestion}?)` : ""}`,
  );
}
