/**
 * The operator's image config: what a team adds to the runtime image without forking the code.
 * One JSON file (SCRATCHRUN_IMAGE_CONFIG or --image-config), one strict schema; every error names
 * the entry it is about. Parsing is pure (`parseImageConfig`); `loadImageConfig` adds the checks
 * that need the filesystem (the files it names exist and are what they must be).
 *
 *   {
 *     "debian": ["jq", "fonts-inter=3.19+ds-2"],          extra Debian packages (bookworm)
 *     "python3.11": ["python3-requests"],                 Debian's python3-* packages for python3.11
 *     "node20": { "packages": { "is-number": "7.0.0" },   npm packages, exact versions,
 *                 "lockfile": "package-lock.json" },      optionally pinned by a lockfile
 *     "python3.12": { "wheelhouse": "wheels" },           or { "index": URL, "requirements": FILE }
 *     "files": { "/usr/local/share/fonts/x.ttf": "fonts/x.ttf" }   image path -> source
 *   }
 *
 * Relative source paths are relative to the config file's directory.
 */
import { createHash } from "node:crypto";
import { dirname, isAbsolute, posix, resolve } from "node:path";
import { z } from "zod";

export const IMAGE_CONFIG_ENV = "SCRATCHRUN_IMAGE_CONFIG";
/** The config file is read whole; nothing a team needs is near this. */
export const MAX_CONFIG_BYTES = 1024 * 1024;
const MAX_ENTRIES = 500;

/** A Debian package, optionally pinned to one version (`name=version`, as apt takes it). */
export interface DebianPackage {
  name: string;
  version: string | null;
}

export type Python312Source =
  { kind: "wheelhouse"; wheelhouse: string } | { kind: "index"; url: string; requirements: string };

export interface ExtraFile {
  /** Absolute, normalised path inside the image. */
  target: string;
  /** Absolute path on the build host (a file or a directory). */
  source: string;
}

/** A parsed config; source paths absolute (resolved against the config's directory). */
export interface ImageConfig {
  /** Absolute path of the config file. */
  path: string;
  /** sha256 of the config file's text as parsed. */
  sha256: string;
  debian: DebianPackage[];
  python311: DebianPackage[];
  npm: { packages: Record<string, string>; lockfile: string | null } | null;
  python312: Python312Source | null;
  files: ExtraFile[];
}

export type ConfigResult = { ok: true; config: ImageConfig } | { ok: false; error: string };

const DEB_NAME = /^[a-z0-9][a-z0-9+.-]+$/;
/** Debian policy 5.6.12: [epoch:]upstream[-revision], upstream starting with a digit. */
const DEB_VERSION = /^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$/;
/** npm's rules for new package names: lowercase, URL-safe, optionally scoped. */
const NPM_NAME = /^(@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*$/;
/** An exact semver version: no range, tag or prefix. */
const EXACT_SEMVER =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$/;

/**
 * Image paths a sandbox never sees: each is mounted over at run time (both backends; the microVM's
 * init also copies its agent to /run/scratchrun-agent), so a file put there would silently vanish.
 */
export const HIDDEN_AT_RUN_TIME = [
  "/proc",
  "/sys",
  "/dev",
  "/tmp",
  "/home/user",
  "/run/scratchrun",
  "/opt/scratchrun",
  "/etc/resolv.conf",
  "/run/scratchrun-agent",
] as const;

const TOP_KEYS = ["debian", "python3.11", "node20", "python3.12", "files"] as const;

const schema = z
  .object({
    debian: z.array(z.string()).max(MAX_ENTRIES).optional(),
    "python3.11": z.array(z.string()).max(MAX_ENTRIES).optional(),
    node20: z
      .object({
        packages: z.record(z.string(), z.string()),
        lockfile: z.string().min(1).optional(),
      })
      .strict()
      .optional(),
    "python3.12": z
      .union([
        z.object({ wheelhouse: z.string().min(1) }).strict(),
        z.object({ index: z.string().min(1), requirements: z.string().min(1) }).strict(),
      ])
      .optional(),
    files: z.record(z.string(), z.string().min(1)).optional(),
  })
  .strict();

/** A zod issue path as the operator wrote it: `node20.packages["left-pad"]`, `debian[2]`. */
function where(path: readonly PropertyKey[]): string {
  let out = "";
  for (const p of path) {
    if (typeof p === "number") out += `[${p}]`;
    else if (typeof p === "string" && /^[A-Za-z_][A-Za-z0-9_]*$/.test(p)) out += out ? `.${p}` : p;
    else out += out || typeof p !== "string" ? `[${JSON.stringify(String(p))}]` : p;
  }
  return out || "the config";
}

function issueText(issue: z.core.$ZodIssue): string {
  if (issue.path[0] === "python3.12")
    return `python3.12: give either {"wheelhouse": DIR} or {"index": URL, "requirements": FILE}`;
  if (issue.code === "unrecognized_keys") {
    const at = issue.path.length ? ` in ${where(issue.path)}` : "";
    const allowed =
      issue.path.length === 0
        ? ` (allowed: ${TOP_KEYS.join(", ")})`
        : issue.path[0] === "node20"
          ? " (allowed: packages, lockfile)"
          : "";
    return `unknown key ${issue.keys.map((k) => JSON.stringify(k)).join(", ")}${at}${allowed}`;
  }
  return `${where(issue.path)}: ${issue.message}`;
}

function debianEntry(
  entry: string,
  at: string,
  errors: string[],
  python3Only: boolean,
): DebianPackage | null {
  const eq = entry.indexOf("=");
  const name = eq === -1 ? entry : entry.slice(0, eq);
  const version = eq === -1 ? null : entry.slice(eq + 1);
  if (!DEB_NAME.test(name)) {
    errors.push(
      `${at}: ${JSON.stringify(entry)} is not a Debian package name (lowercase letters, digits, "+", "-", "."; optionally "=version")`,
    );
    return null;
  }
  if (version !== null && !DEB_VERSION.test(version)) {
    errors.push(
      `${at}: ${JSON.stringify(version)} is not a Debian version for ${name} (e.g. "1.6-2.1", as apt-cache policy ${name} shows it)`,
    );
    return null;
  }
  if (python3Only && !name.startsWith("python3-")) {
    errors.push(
      `${at}: ${JSON.stringify(name)} is not a python3-* package; python3.11 takes Debian's python3-* packages (other Debian packages go in "debian")`,
    );
    return null;
  }
  return { name, version };
}

/** Why `target` cannot be an extra file's path in the image, or null if it can. */
export function imagePathProblem(target: string): string | null {
  if (!target.startsWith("/")) return "is not an absolute path in the image";
  if (/\p{Cc}/u.test(target)) return "contains a control character";
  const parts = target.split("/").slice(1);
  if (parts.includes("..")) return "leads outside the image (..)";
  if (target === "/" || posix.normalize(target) !== target || target.endsWith("/"))
    return `is not a normalised file path (write ${JSON.stringify(posix.normalize(target).replace(/\/+$/, "") || "/")})`;
  for (const hidden of HIDDEN_AT_RUN_TIME)
    if (target === hidden || target.startsWith(`${hidden}/`))
      return `is under ${hidden}, which every sandbox mounts over at run time (the file would never be seen)`;
  return null;
}

/**
 * Parses the config text. Pure: source paths are resolved against `baseDir` but not read.
 * Every problem is reported, each naming its entry.
 */
export function parseImageConfig(text: string, path: string): ConfigResult {
  const fail = (errors: string[]): ConfigResult => ({
    ok: false,
    error: `image config ${path}: ${errors.join("; ")}`,
  });
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return fail([`not valid JSON (${(e as Error).message})`]);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    return fail(["must be a JSON object with any of: " + TOP_KEYS.join(", ")]);
  const parsed = schema.safeParse(raw);
  if (!parsed.success) return fail(parsed.error.issues.map(issueText));
  const c = parsed.data;
  const baseDir = dirname(path);
  const abs = (p: string) => (isAbsolute(p) ? resolve(p) : resolve(baseDir, p));
  const errors: string[] = [];

  const debian = (c.debian ?? []).flatMap(
    (e, i) => debianEntry(e, `debian[${i}]`, errors, false) ?? [],
  );
  const python311 = (c["python3.11"] ?? []).flatMap(
    (e, i) => debianEntry(e, `python3.11[${i}]`, errors, true) ?? [],
  );
  const seen = new Map<string, string>();
  for (const [list, at] of [
    [debian, "debian"],
    [python311, "python3.11"],
  ] as const)
    for (const p of list) {
      const before = seen.get(p.name);
      if (before) errors.push(`${at}: ${p.name} is listed twice (also in ${before})`);
      seen.set(p.name, at);
    }

  let npm: ImageConfig["npm"] = null;
  if (c.node20) {
    const entries = Object.entries(c.node20.packages);
    if (entries.length === 0) errors.push("node20.packages: lists no package");
    if (entries.length > MAX_ENTRIES) errors.push(`node20.packages: more than ${MAX_ENTRIES}`);
    for (const [name, version] of entries) {
      const at = `node20.packages[${JSON.stringify(name)}]`;
      if (!NPM_NAME.test(name) || name.length > 214)
        errors.push(`${at}: ${JSON.stringify(name)} is not an npm package name`);
      else if (!EXACT_SEMVER.test(version))
        errors.push(
          `${at}: ${JSON.stringify(version)} is not an exact version (x.y.z: no range, tag or "^"/"~", so two builds install the same code)`,
        );
    }
    npm = {
      packages: Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
      lockfile: c.node20.lockfile ? abs(c.node20.lockfile) : null,
    };
  }

  let python312: Python312Source | null = null;
  const py = c["python3.12"];
  if (py && "wheelhouse" in py) python312 = { kind: "wheelhouse", wheelhouse: abs(py.wheelhouse) };
  else if (py) {
    let okUrl = false;
    try {
      const u = new URL(py.index);
      okUrl = u.protocol === "http:" || u.protocol === "https:";
    } catch {
      okUrl = false;
    }
    if (!okUrl) errors.push(`python3.12.index: ${JSON.stringify(py.index)} is not an http(s) URL`);
    python312 = { kind: "index", url: py.index, requirements: abs(py.requirements) };
  }

  const files: ExtraFile[] = [];
  const fileEntries = Object.entries(c.files ?? {});
  if (fileEntries.length > MAX_ENTRIES) errors.push(`files: more than ${MAX_ENTRIES} entries`);
  for (const [target, source] of fileEntries) {
    const problem = imagePathProblem(target);
    if (problem) errors.push(`files[${JSON.stringify(target)}]: ${problem}`);
    else files.push({ target, source: abs(source) });
  }
  files.sort((a, b) => (a.target < b.target ? -1 : 1));
  for (let i = 1; i < files.length; i++) {
    const [a, b] = [files[i - 1]!, files[i]!];
    if (b.target.startsWith(`${a.target}/`))
      errors.push(`files[${JSON.stringify(b.target)}]: lies inside another entry, ${a.target}`);
  }

  if (errors.length > 0) return fail(errors);
  const sha256 = createHash("sha256").update(text).digest("hex");
  return { ok: true, config: { path, sha256, debian, python311, npm, python312, files } };
}

/** Every Debian package the config adds (both lists), as mmdebstrap's --include takes them. */
export function debianIncludes(config: ImageConfig | null): string[] {
  if (!config) return [];
  return [...config.debian, ...config.python311].map((p) =>
    p.version ? `${p.name}=${p.version}` : p.name,
  );
}
