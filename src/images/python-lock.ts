/**
 * The Python stack's lock (images/rootfs/python-requirements.lock), as pure functions: the short
 * list of top-level requirements it is made from (python-requirements.in), the lock's rendering
 * from what pip resolved for each target interpreter, and the check that the two still agree.
 * scripts/lock-python.mjs writes the lock; the image build installs exactly it (--require-hashes).
 */
import { createHash } from "node:crypto";

/** A CPython the lock resolves wheels for: its version and its ABI tag. */
export interface LockTarget {
  /** "3.12" */
  python: string;
  /** "cp312" */
  abi: string;
}

/** Interpreters the lock serves (one pin for each package, hashes of every target's wheel). */
export const LOCK_TARGETS: readonly LockTarget[] = [
  { python: "3.12", abi: "cp312" },
  { python: "3.13", abi: "cp313" },
];

/**
 * The image is Debian bookworm (glibc 2.36): a manylinux wheel for glibc 2.17 … 2.36 runs there.
 * pip takes explicit platforms literally (a manylinux_2_X tag is not widened to older ones), so
 * every accepted tag is listed, newest first.
 */
export const IMAGE_GLIBC_MINOR = 36;
export function targetPlatforms(): string[] {
  const tags: string[] = [];
  for (let minor = IMAGE_GLIBC_MINOR; minor >= 17; minor--)
    tags.push(`manylinux_2_${minor}_x86_64`);
  return [...tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"];
}

/** pip's options that select the target's wheels, whatever interpreter runs pip. */
export function pipTargetArgs(t: LockTarget): string[] {
  return [
    "--only-binary=:all:",
    "--python-version",
    t.python,
    "--implementation",
    "cp",
    "--abi",
    t.abi,
    ...targetPlatforms().flatMap((p) => ["--platform", p]),
  ];
}

/** PEP 503 name normalisation. */
export const normaliseName = (name: string): string => name.toLowerCase().replace(/[-_.]+/g, "-");

const NAME = /^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$/;

/** The list's requirements (comments and blanks dropped), each as written. */
export function listRequirements(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((l) => l.replace(/(^|\s)#.*$/, "").trim())
    .filter((l) => l !== "");
}

/** The list's requirement names, normalised; a line that is not a requirement is an error. */
export function listNames(text: string): string[] {
  return listRequirements(text).map((line) => {
    const m = NAME.exec(line);
    if (!m?.[1] || line.startsWith("-"))
      throw new Error(`python-requirements.in: not a requirement: ${line}`);
    return normaliseName(m[1]);
  });
}

export const sha256Hex = (text: string | Buffer): string =>
  createHash("sha256").update(text).digest("hex");

/** One resolved wheel, as pip's installation report gives it (pip install --dry-run --report). */
export interface ResolvedWheel {
  name: string;
  version: string;
  /** The wheel's file name. */
  file: string;
  sha256: string;
}

interface ReportItem {
  metadata?: { name?: unknown; version?: unknown };
  download_info?: { url?: unknown; archive_info?: { hashes?: { sha256?: unknown } } };
}

/** The wheels of a pip installation report (JSON), or an error naming what is missing. */
export function parseReport(json: string): ResolvedWheel[] {
  const report = JSON.parse(json) as { install?: ReportItem[] };
  if (!Array.isArray(report.install)) throw new Error("pip's report has no install list");
  return report.install.map((item) => {
    const name = item.metadata?.name;
    const version = item.metadata?.version;
    const url = item.download_info?.url;
    const sha256 = item.download_info?.archive_info?.hashes?.sha256;
    if (typeof name !== "string" || typeof version !== "string" || typeof url !== "string")
      throw new Error(`pip's report has an entry without name, version or url`);
    const file = decodeURIComponent(url.split("#")[0]!.split("/").pop() ?? "");
    if (!file.endsWith(".whl"))
      throw new Error(`${name} ${version} resolved to ${file}, not a wheel`);
    if (typeof sha256 !== "string" || !/^[0-9a-f]{64}$/.test(sha256))
      throw new Error(`${name} ${version}: pip's report has no sha256 for ${file}`);
    return { name: normaliseName(name), version, file, sha256 };
  });
}

/** A locked package: one version (for the targets of `marker`, all if none) and its hashes. */
export interface LockedPackage {
  name: string;
  version: string;
  /** A PEP 508 marker when this pin holds for some targets only. */
  marker: string | null;
  hashes: string[];
}

export interface Lock {
  /** sha256 of the list the lock was made from. */
  listSha256: string;
  targets: string[];
  /** A small package whose one wheel a build downloads first to ask pip whether an index is there. */
  probe: string;
  packages: LockedPackage[];
}

/**
 * Merges each target's resolution into one lock: a package every target resolved to the same
 * version is one pin with all their hashes; otherwise one pin per version, marked for its targets.
 */
export function mergeResolutions(
  listText: string,
  resolved: ReadonlyMap<LockTarget, readonly ResolvedWheel[]>,
): Lock {
  const byName = new Map<string, Map<string, { targets: string[]; hashes: Set<string> }>>();
  for (const [target, wheels] of resolved) {
    for (const w of wheels) {
      const versions = byName.get(w.name) ?? new Map();
      byName.set(w.name, versions);
      const entry = versions.get(w.version) ?? { targets: [], hashes: new Set<string>() };
      versions.set(w.version, entry);
      entry.targets.push(target.python);
      entry.hashes.add(w.sha256);
    }
  }
  const all = [...resolved.keys()].map((t) => t.python);
  const packages: LockedPackage[] = [];
  for (const name of [...byName.keys()].sort()) {
    for (const [version, e] of byName.get(name)!) {
      const marker =
        e.targets.length === all.length
          ? null
          : e.targets.map((p) => `python_version == "${p}"`).join(" or ");
      packages.push({ name, version, marker, hashes: [...e.hashes].sort() });
    }
  }
  // The probe: a pure-Python wheel (one file for every target), the first by name.
  const pure = [...resolved.values()]
    .flat()
    .filter((w) => /-py3-none-any\.whl$|-py2\.py3-none-any\.whl$/.test(w.file))
    .map((w) => w.name)
    .sort();
  const probe = pure[0] ?? packages[0]?.name;
  if (!probe) throw new Error("nothing was resolved");
  return { listSha256: sha256Hex(listText), targets: all, probe, packages };
}

/** The lock file's text. */
export function renderLock(lock: Lock): string {
  const lines = [
    "# Generated by scripts/lock-python.mjs from python-requirements.in: do not edit, run it again.",
    `# list-sha256: ${lock.listSha256}`,
    `# targets: ${lock.targets.join(" ")}`,
    `# probe: ${lock.probe}`,
  ];
  for (const p of lock.packages) {
    const head = `${p.name}==${p.version}${p.marker ? ` ; ${p.marker}` : ""}`;
    lines.push([head, ...p.hashes.map((h) => `    --hash=sha256:${h}`)].join(" \\\n"));
  }
  return `${lines.join("\n")}\n`;
}

/** Parses a lock file (as renderLock writes it); throws naming the first line it cannot read. */
export function parseLock(text: string): Lock {
  const header = (key: string): string => {
    const m = new RegExp(`^# ${key}: (.+)$`, "m").exec(text);
    if (!m?.[1]) throw new Error(`python-requirements.lock: no "# ${key}:" line`);
    return m[1].trim();
  };
  const packages: LockedPackage[] = [];
  const logical = text
    .replace(/\\\r?\n/g, " ")
    .split(/\r?\n/)
    .filter((l) => l.trim() !== "" && !l.startsWith("#"));
  for (const line of logical) {
    const m = /^([a-z0-9-]+)==(\S+)(?: ; (.+?))?((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*$/.exec(
      line,
    );
    if (!m?.[1] || !m[2] || !m[4])
      throw new Error(`python-requirements.lock: cannot read: ${line.slice(0, 120)}`);
    const hashes = [...m[4].matchAll(/sha256:([0-9a-f]{64})/g)].map((h) => h[1]!);
    packages.push({ name: m[1], version: m[2], marker: m[3] ?? null, hashes });
  }
  return {
    listSha256: header("list-sha256"),
    targets: header("targets").split(/\s+/),
    probe: header("probe"),
    packages,
  };
}

/**
 * Where the list and the lock disagree, one line each (empty: they agree): the list changed since
 * the lock was made, a listed name is not locked, or the lock misses a target.
 */
export function lockDisagreements(listText: string, lockText: string): string[] {
  const lock = parseLock(lockText);
  const out: string[] = [];
  if (lock.listSha256 !== sha256Hex(listText))
    out.push("python-requirements.in changed since the lock was made (its sha256 differs)");
  const locked = new Set(lock.packages.map((p) => p.name));
  for (const name of listNames(listText))
    if (!locked.has(name)) out.push(`${name} is listed but not locked`);
  for (const t of LOCK_TARGETS)
    if (!lock.targets.includes(t.python)) out.push(`the lock has no wheels for python ${t.python}`);
  if (!locked.has(lock.probe)) out.push(`the probe ${lock.probe} is not locked`);
  return out;
}

/** The lock's one line for `name` (all its versions), as a requirements file pip reads. */
export function lockLinesFor(lock: Lock, name: string): string {
  return `${lock.packages
    .filter((p) => p.name === name)
    .map(
      (p) =>
        `${p.name}==${p.version}${p.marker ? ` ; ${p.marker}` : ""} ${p.hashes.map((h) => `--hash=sha256:${h}`).join(" ")}`,
    )
    .join("\n")}\n`;
}
