import { setting, SETTINGS, type Env } from "./read.js";

/**
 * Settings in their final types, parsed here, beside their declaration (table.ts), from one
 * environment: a process composes once (src/compose/, src/cli/) and passes the values down, so
 * nothing below reads a variable or parses one of its own. Each is parsed on its first read and
 * kept: a bad value fails the command that uses it, naming the variable, and no other.
 * Issue 54 moves the remaining readers here (test/architecture/setting-calls.unit.test.ts lists
 * them).
 */
export interface Settings {
  /** SCRATCHRUN_LOG_LEVEL: pino's level for the service's logs. */
  readonly logLevel: string;
  /** SCRATCHRUN_TASK_AFTER_MS: how long a tasks-capable 2026 call runs before it becomes a task. */
  readonly taskAfterMs: number;
}

/** The settings `env` gives, each parsed once, when first read. */
export function settingsFrom(env: Env): Settings {
  const parsed = new Map<keyof Settings, unknown>();
  const once = <K extends keyof Settings>(key: K, parse: () => Settings[K]): Settings[K] => {
    if (!parsed.has(key)) parsed.set(key, parse());
    return parsed.get(key) as Settings[K];
  };
  return {
    get logLevel() {
      return once("logLevel", () => setting("SCRATCHRUN_LOG_LEVEL", env));
    },
    get taskAfterMs() {
      return once("taskAfterMs", () => parseTaskAfterMs(setting("SCRATCHRUN_TASK_AFTER_MS", env)));
    },
  };
}

/** The settings of an empty environment: every default. */
export const DEFAULT_SETTINGS: Settings = settingsFrom({});

/** A whole number of milliseconds, 0 or more; unset, the table's fallback. */
function parseTaskAfterMs(raw: string | undefined): number {
  if (raw === undefined) return Number(SETTINGS.SCRATCHRUN_TASK_AFTER_MS.fallback);
  const n = Number(raw);
  if (raw.trim() === "" || !Number.isInteger(n) || n < 0)
    throw new Error(
      `SCRATCHRUN_TASK_AFTER_MS must be a whole number of milliseconds >= 0, not "${raw}"`,
    );
  return n;
}
