import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { ScratchRunError } from "../../errors.js";
import { setting, settingOn, SETTINGS, type Env } from "./read.js";

/**
 * Settings in their final types, parsed here, beside their declaration (table.ts), from one
 * environment: a process composes once (src/compose/, src/cli/) and passes the values down, so
 * nothing below reads a variable or parses one of its own. Each is parsed on its first read and
 * kept: a bad value fails the command that uses it, naming the variable, and no other.
 * test/architecture/setting-calls.unit.test.ts fails on a read anywhere else below the edge.
 */
export interface Settings {
  /** SCRATCHRUN_LOG_LEVEL: pino's level for the service's logs. */
  readonly logLevel: string;
  /** SCRATCHRUN_TASK_AFTER_MS: how long a tasks-capable 2026 call runs before it becomes a task. */
  readonly taskAfterMs: number;
  /** SCRATCHRUN_URL and SCRATCHRUN_API_KEY: the server remote mode sends calls to, or null. */
  readonly remote: Remote | null;
  /** SCRATCHRUN_HOME: the service's state directory (database, lock). */
  readonly home: string;
  /** SCRATCHRUN_DATABASE_URL: a postgres:// URL, or null for SQLite in `home`. */
  readonly databaseUrl: string | null;
  /** SCRATCHRUN_ACCEL: the microVMs' accelerator when forced, or null to detect it. */
  readonly accel: "kvm" | "tcg" | null;
  /** SCRATCHRUN_WORKER_TOKEN, or the file SCRATCHRUN_WORKER_TOKEN_FILE names: the roles' secret. */
  readonly workerToken: string;
  /** SCRATCHRUN_WORKERS_DNS_SERVER: the DNS server that resolves the workers, or null. */
  readonly workersDnsServer: string | null;
  /** SCRATCHRUN_MAX_TIMEOUT_MS, SCRATCHRUN_MAX_MEMORY_MB: whole numbers, still to check against a ceiling. */
  readonly serverMaxima: ServerMaxima;
  /** SCRATCHRUN_DEBUG_JAIL: the namespace jails' stderr goes to the server's. */
  readonly debugJail: boolean;
  /** Where images are built from and kept (the image build and the server that finds them). */
  readonly images: ImageSettings;
}

/** The server-wide maxima as an operator gave them (policy/server-policy.ts checks the range). */
export interface ServerMaxima {
  maxTimeoutMs?: number;
  maxMemoryMb?: number;
}

/**
 * The image settings. A directory is final (its default worked out); a source of the build is
 * the path or URL given, or undefined: images/recipe.ts checks it against the host.
 */
export interface ImageSettings {
  /** SCRATCHRUN_IMAGES: where built images live. */
  readonly dir: string;
  /** SCRATCHRUN_WHEEL_CACHE: the host pip's downloaded wheels; default `wheels` beside `dir`. */
  readonly wheelCache: string;
  /** SCRATCHRUN_VM_CACHE: the microVMs' kernels, initramfs and root disks. */
  readonly vmCache: string;
  /** SCRATCHRUN_IMAGE_CONFIG: the operator's image config file. */
  readonly config: string | undefined;
  /** SCRATCHRUN_PYTHON312, SCRATCHRUN_PYTHON313: the CPython prefix to copy. */
  readonly python312: string | undefined;
  readonly python313: string | undefined;
  /** SCRATCHRUN_NODE20, SCRATCHRUN_NODE24: a Node.js binary instead of the pinned package. */
  readonly node20: string | undefined;
  readonly node24: string | undefined;
  /** SCRATCHRUN_WHEELHOUSE: a directory of wheels for python3.12. */
  readonly wheelhouse: string | undefined;
  /** SCRATCHRUN_PIP_INDEX_URL and SCRATCHRUN_PYTHON312_REQUIREMENTS: an index and its pins. */
  readonly pipIndexUrl: string | undefined;
  readonly python312Requirements: string | undefined;
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
    get home() {
      return once("home", () => homeDir(env));
    },
    get databaseUrl() {
      return once("databaseUrl", () => parseDatabaseUrl(setting("SCRATCHRUN_DATABASE_URL", env)));
    },
    get accel() {
      return once("accel", () => {
        const forced = setting("SCRATCHRUN_ACCEL", env);
        return forced === "kvm" || forced === "tcg" ? forced : null;
      });
    },
    get workerToken() {
      return once("workerToken", () =>
        parseWorkerToken(
          setting("SCRATCHRUN_WORKER_TOKEN_FILE", env),
          setting("SCRATCHRUN_WORKER_TOKEN", env),
          (path) => readFileSync(path, "utf8"),
        ),
      );
    },
    get workersDnsServer() {
      return once("workersDnsServer", () => setting("SCRATCHRUN_WORKERS_DNS_SERVER", env) || null);
    },
    get serverMaxima() {
      return once("serverMaxima", () => {
        const timeout = wholeMaximum("SCRATCHRUN_MAX_TIMEOUT_MS", "--max-timeout-ms", "ms", env);
        const memory = wholeMaximum("SCRATCHRUN_MAX_MEMORY_MB", "--max-memory-mb", "MB", env);
        return {
          ...(timeout !== undefined ? { maxTimeoutMs: timeout } : {}),
          ...(memory !== undefined ? { maxMemoryMb: memory } : {}),
        };
      });
    },
    get debugJail() {
      return once("debugJail", () => settingOn("SCRATCHRUN_DEBUG_JAIL", env));
    },
    get images() {
      return once("images", () => imageSettings(env));
    },
  };
}

/** SCRATCHRUN_HOME, else /var/lib/scratchrun for root, else the per-user data directory. */
function homeDir(env: Env): string {
  const set = setting("SCRATCHRUN_HOME", env);
  if (set) return set;
  if (process.getuid?.() === 0) return "/var/lib/scratchrun";
  const data = env.XDG_DATA_HOME || join(env.HOME || homedir(), ".local", "share");
  return join(data, "scratchrun");
}

/** SCRATCHRUN_DATABASE_URL when set (it must be a postgres:// URL), else null. */
function parseDatabaseUrl(url: string | undefined): string | null {
  if (!url) return null;
  if (!/^postgres(ql)?:\/\//.test(url))
    throw new ScratchRunError("NOT_READY", "SCRATCHRUN_DATABASE_URL is not a postgres:// URL", {
      fix: "Set it to postgres://user:password@host:5432/database, or unset it for SQLite",
    });
  return url;
}

/** The shared secret: the token, or what the file holds (`read` reads it); 16 characters or more. */
export function parseWorkerToken(
  file: string | undefined,
  token: string | undefined,
  read: (path: string) => string,
): string {
  const secret = (file ? read(file) : (token ?? "")).trim();
  if (secret.length < 16)
    throw new Error(
      "the API and worker roles need a shared secret of at least 16 characters: set SCRATCHRUN_WORKER_TOKEN (or SCRATCHRUN_WORKER_TOKEN_FILE)",
    );
  return secret;
}

/** A server-wide maximum: unset or empty is none; else a whole number (its range is policy's). */
function wholeMaximum(
  name: "SCRATCHRUN_MAX_TIMEOUT_MS" | "SCRATCHRUN_MAX_MEMORY_MB",
  flag: string,
  unit: string,
  env: Env,
): number | undefined {
  const raw = setting(name, env);
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw))
    throw new ScratchRunError(
      "NOT_READY",
      `${name} (${flag}) = ${JSON.stringify(raw)}: not a whole number`,
      { fix: `Give a whole number of ${unit}` },
    );
  return Number(raw);
}

/** The image settings of `env`; the directories' defaults depend on the user (root or not). */
function imageSettings(env: Env): ImageSettings {
  const cache = env.XDG_CACHE_HOME ? resolve(env.XDG_CACHE_HOME) : join(homedir(), ".cache");
  const root = process.getuid?.() === 0;
  const imagesSet = setting("SCRATCHRUN_IMAGES", env);
  // Root's caches are under /var/cache: the jails' and QEMU's unprivileged uids must traverse to
  // them, and root's home is 0700.
  const dir = imagesSet
    ? resolve(imagesSet)
    : root
      ? "/var/cache/scratchrun/images"
      : join(cache, "scratchrun", "images");
  const wheelCache = setting("SCRATCHRUN_WHEEL_CACHE", env);
  const vmCache = setting("SCRATCHRUN_VM_CACHE", env);
  return {
    dir,
    wheelCache: wheelCache ? resolve(wheelCache) : join(dirname(dir), "wheels"),
    vmCache:
      vmCache ||
      (root
        ? "/var/cache/scratchrun/vm"
        : join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "scratchrun", "vm")),
    config: setting("SCRATCHRUN_IMAGE_CONFIG", env) || undefined,
    python312: setting("SCRATCHRUN_PYTHON312", env) || undefined,
    python313: setting("SCRATCHRUN_PYTHON313", env) || undefined,
    node20: setting("SCRATCHRUN_NODE20", env) || undefined,
    node24: setting("SCRATCHRUN_NODE24", env) || undefined,
    wheelhouse: setting("SCRATCHRUN_WHEELHOUSE", env) || undefined,
    pipIndexUrl: setting("SCRATCHRUN_PIP_INDEX_URL", env) || undefined,
    python312Requirements: setting("SCRATCHRUN_PYTHON312_REQUIREMENTS", env),
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
