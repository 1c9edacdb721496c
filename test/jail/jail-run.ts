/**
 * Runs a program inside a real bubblewrap jail for the jail tests: all namespaces unshared, the
 * host root read-only, optionally a seccomp program on fd 3 and cgroups entered by the wrapper
 * shell before it execs bwrap (the same order the namespace backend uses).
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";

export const PYTHON311 = "/usr/bin/python3.11";
export const BWRAP = "/usr/bin/bwrap";

export interface JailRun {
  argv: string[];
  seccomp?: Buffer;
  procsFiles?: string[];
  /** Extra bwrap options placed before the program (e.g. a tmpfs). */
  bwrapExtra?: string[];
  /** Called once the wrapper is spawned; lets a test stop a hostile program from outside. */
  onSpawn?: (pid: number) => void;
  /** SIGKILL the wrapper's process group after this long (a safety net, never an assertion). */
  killAfterMs?: number;
  stdin?: string;
}

export interface JailResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function hostCanJail(): string | undefined {
  if (!existsSync(BWRAP)) return `${BWRAP} missing (apt-get install bubblewrap)`;
  if (!existsSync(PYTHON311)) return `${PYTHON311} missing (apt-get install python3.11)`;
  return undefined;
}

export function runJailed(run: JailRun): Promise<JailResult> {
  const procs = run.procsFiles ?? [];
  const n = procs.length;
  // Positional arguments only: nothing is interpolated into the script.
  const script = `i=0; for f; do [ "$i" -ge ${n} ] && break; echo $$ > "$f" || exit 125; i=$((i+1)); done; shift ${n}; exec "$@"`;
  const bwrap = [
    BWRAP,
    "--unshare-all",
    "--die-with-parent",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--tmpfs",
    "/tmp",
    ...(run.seccomp ? ["--seccomp", "3"] : []),
    ...(run.bwrapExtra ?? []),
    "--",
    ...run.argv,
  ];
  const child = spawn("/bin/sh", ["-c", script, "sh", ...procs, ...bwrap], {
    stdio: ["pipe", "pipe", "pipe", "pipe"],
    detached: true,
    env: { PATH: "/usr/local/bin:/usr/bin:/bin", LANG: "C.UTF-8" },
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  const fd3 = child.stdio[3] as NodeJS.WritableStream;
  fd3.on("error", () => {});
  child.stdin.on("error", () => {});
  fd3.end(run.seccomp ?? Buffer.alloc(0));
  child.stdin.end(run.stdin ?? "");
  if (child.pid !== undefined) run.onSpawn?.(child.pid);
  const timer =
    run.killAfterMs === undefined
      ? undefined
      : setTimeout(() => {
          try {
            if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
          } catch {
            // already gone
          }
        }, run.killAfterMs);
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** Pids of live processes whose command line contains `marker` (leak check). */
export async function processesWith(marker: string): Promise<number[]> {
  const { readdir, readFile } = await import("node:fs/promises");
  const out: number[] = [];
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    try {
      const cmd = (await readFile(`/proc/${pid}/cmdline`, "utf8")).replace(/\0/g, " ");
      if (cmd.includes(marker)) out.push(Number(pid));
    } catch {
      // exited while we looked
    }
  }
  return out;
}
