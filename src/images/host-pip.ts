/**
 * The host's pip, run as the host user runs it: its config files and PIP_* environment choose the
 * index, certificates and proxy (nothing here names an index). It resolves the lock
 * (scripts/lock-python.mjs) and downloads the locked wheels for a target interpreter into the
 * build's cache; what goes into the image is then installed offline from that cache.
 */
import { spawn } from "node:child_process";
import { pipTargetArgs, type LockTarget } from "./python-lock.js";

export interface PipRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface HostPip {
  /** A host interpreter with pip (the CPython prefix the image copies). */
  python: string;
  /** The environment pip runs with (PIP_* included); default process.env. */
  env?: NodeJS.ProcessEnv;
  onLine?: (line: string) => void;
}

/** Runs `python -m pip ARGS` on the host; never throws for pip's own failure. */
export function runHostPip(pip: HostPip, args: string[], timeoutMs: number): Promise<PipRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(pip.python, ["-m", "pip", ...args], {
      env: { ...(pip.env ?? process.env), PIP_DISABLE_PIP_VERSION_CHECK: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      timeout: timeoutMs,
      killSignal: "SIGKILL",
    });
    let stdout = "";
    let stderr = "";
    // pip writes its progress ("Collecting", "Saved") to stdout and its errors to stderr.
    const lines = () => {
      let partial = "";
      return (s: string) => {
        partial += s;
        const done = partial.split("\n");
        partial = done.pop() ?? "";
        for (const l of done) if (l.trim()) pip.onLine?.(l);
      };
    };
    const outLines = lines();
    const errLines = lines();
    child.stdout.setEncoding("utf8").on("data", (s: string) => {
      stdout += s;
      outLines(s);
    });
    child.stderr.setEncoding("utf8").on("data", (s: string) => {
      stderr += s;
      errLines(s);
    });
    child.on("error", reject);
    child.on("close", (code, signal) =>
      resolve({
        code: signal ? null : code,
        stdout,
        stderr: signal ? `${stderr}\npip was stopped after ${timeoutMs / 1000} s` : stderr,
      }),
    );
  });
}

/** `pip download` of a hash-pinned requirements file's wheels for `target`, into `dest`. */
export function downloadArgs(
  target: LockTarget,
  requirements: string,
  dest: string,
  opts: { noDeps?: boolean } = {},
): string[] {
  return [
    "download",
    ...pipTargetArgs(target),
    "--require-hashes",
    ...(opts.noDeps ? ["--no-deps"] : []),
    "--progress-bar",
    "off",
    "--dest",
    dest,
    "-r",
    requirements,
  ];
}

/** pip's resolution of `list` for `target`, as an installation report (nothing installed). */
export function resolveArgs(target: LockTarget, list: string, report: string, target_dir: string) {
  return [
    "install",
    "--dry-run",
    "--ignore-installed",
    ...pipTargetArgs(target),
    "--target",
    target_dir,
    "--report",
    report,
    "--quiet",
    "-r",
    list,
  ];
}

/** Why a pip download failed: the index did not answer, or it answered with the wrong thing. */
export interface PipFailure {
  /** `unreachable`: no index answered (the only failure a build may treat as "no index"). */
  kind: "unreachable" | "hash" | "no-wheel" | "other";
  /** One line, naming the package where pip said which. */
  message: string;
}

const UNREACHABLE =
  /(NewConnectionError|ConnectTimeoutError|ReadTimeoutError|Max retries exceeded|Connection refused|Connection reset|timed out|Temporary failure in name resolution|Name or service not known|Network is unreachable|No route to host|ProxyError|SSLError|CERTIFICATE_VERIFY_FAILED|pip was stopped after)/i;

/** Reads pip's stderr: a hash that does not match, no wheel for the platform, or no index. */
export function classifyPipFailure(stderr: string): PipFailure {
  const text = stderr.replace(/\r/g, "");
  if (/DO NOT MATCH THE HASHES/.test(text)) {
    const pkg = /^\s+([A-Za-z0-9._-]+==[^\s;]+).*\n\s+Expected sha256/m.exec(text)?.[1];
    return {
      kind: "hash",
      message: `a downloaded wheel fails its pinned hash${pkg ? `: ${pkg}` : ""} (the index served a different file than the lock names)`,
    };
  }
  const none = /No matching distribution found for (\S+)/.exec(text)?.[1];
  if (none && UNREACHABLE.test(text))
    return {
      kind: "unreachable",
      message: `the package index did not answer while fetching ${none}: ${unreachableDetail(text)}`,
    };
  if (none) {
    const had =
      /Could not find a version that satisfies the requirement \S+ \(from versions: ([^)]*)\)/.exec(
        text,
      )?.[1];
    return {
      kind: "no-wheel",
      message: `no wheel of ${none} for the image's platform (CPython, manylinux x86_64, glibc ≤ 2.36)${had !== undefined ? `; the index has: ${had || "nothing"}` : ""}`,
    };
  }
  if (UNREACHABLE.test(text))
    return {
      kind: "unreachable",
      message: `the package index did not answer: ${unreachableDetail(text)}`,
    };
  const last = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l.startsWith("ERROR:") || l.includes("Error"))
    .pop();
  return {
    kind: "other",
    message: last ?? (text.trim().split("\n").pop() || "pip failed without a message"),
  };
}

/** The first connection error pip reported, short. */
function unreachableDetail(text: string): string {
  const m = UNREACHABLE.exec(text);
  return m?.[1] ?? "no answer";
}

/** One line for why a pip download failed (classifyPipFailure's message). */
export function explainPipFailure(stderr: string): string {
  return classifyPipFailure(stderr).message;
}
