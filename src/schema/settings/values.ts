import { ScratchRunError } from "../../errors.js";
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
  /** SCRATCHRUN_URL and SCRATCHRUN_API_KEY: the server remote mode sends calls to, or null. */
  readonly remote: Remote | null;
}

/** A ScratchRun server and the key to call it with (remote mode). */
export interface Remote {
  /** Base URL of a ScratchRun server, e.g. https://scratchrun.example.com */
  url: string;
  apiKey: string;
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
    get remote() {
      return once("remote", () =>
        parseRemote(setting("SCRATCHRUN_URL", env), setting("SCRATCHRUN_API_KEY", env)),
      );
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

/**
 * SCRATCHRUN_URL and SCRATCHRUN_API_KEY, or null when remote mode is off (neither is set).
 * A key without a URL is refused: the product page's config sets only the key, implying a hosted
 * default, and there is none; guessing one would send the key somewhere the user never named,
 * and quietly running sandboxes here instead would not be what the user configured either.
 */
function parseRemote(url: string | undefined, apiKey: string | undefined): Remote | null {
  if (!url) {
    if (apiKey)
      throw new ScratchRunError(
        "NOT_READY",
        "SCRATCHRUN_API_KEY is set but SCRATCHRUN_URL is not, and there is no hosted default",
        {
          fix: "Set SCRATCHRUN_URL to your ScratchRun server (e.g. http://host:8787, started with `scratchrun serve`), or remove SCRATCHRUN_API_KEY to run sandboxes on this machine",
        },
      );
    return null;
  }
  if (!apiKey)
    throw new ScratchRunError("NOT_READY", "SCRATCHRUN_URL is set but SCRATCHRUN_API_KEY is not", {
      fix: "Set SCRATCHRUN_API_KEY to a key from `scratchrun keys create --name N`",
    });
  try {
    const u = new URL(url);
    if (u.protocol !== "https:" && u.protocol !== "http:") throw new Error("scheme");
  } catch {
    throw new ScratchRunError(
      "NOT_READY",
      `SCRATCHRUN_URL=${JSON.stringify(url)} is not an http(s) URL`,
    );
  }
  return { url, apiKey };
}
