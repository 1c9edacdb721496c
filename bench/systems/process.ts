import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Workload } from "../workloads.js";
import { CODE_FILE } from "../workloads.js";
import type { CallResult } from "./types.js";

export interface ProcessOutcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs argv to completion (killed at timeoutMs), collecting at most 1 MiB of each stream. */
export function runProcess(
  argv: readonly string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<ProcessOutcome> {
  const [cmd, ...args] = argv;
  if (!cmd) return Promise.resolve({ code: null, stdout: "", stderr: "empty argv" });
  return new Promise((resolve) => {
    const child = spawn(cmd, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    const cap = 1 << 20;
    child.stdout.on("data", (d: Buffer) => {
      if (stdout.length < cap) stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      if (stderr.length < cap) stderr += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ code: null, stdout, stderr: stderr + String(e) });
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * A fresh host directory holding the code file and the call's files, as every per-call system
 * gets it. The floors mount it as the call's working directory and as its /tmp, so a return file
 * under /tmp is found there too.
 */
export function makeWorkDir(parent: string, workload: Workload): string {
  const dir = mkdtempSync(join(parent, "scratchrun-bench-"));
  writeFileSync(join(dir, CODE_FILE[workload.runtime]), workload.code);
  for (const [name, content] of Object.entries(workload.files ?? {}))
    writeFileSync(join(dir, name), content);
  return dir;
}

/** Sizes of the requested files the code left in dir (missing ones are absent). */
export function fileSizes(dir: string, names: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const n of names) {
    try {
      const st = statSync(join(dir, n.replace(/^\/tmp\//, "")));
      if (st.isFile()) out[n] = st.size;
    } catch {
      // missing: the check fails
    }
  }
  return out;
}

/** Checks a finished process against its workload and removes the work dir. */
export function judge(workload: Workload, r: ProcessOutcome, dir: string): CallResult {
  try {
    const files = fileSizes(dir, workload.returnFiles);
    if (r.code === 0 && workload.check(r.stdout, files)) return { ok: true };
    return { ok: false, error: `exit ${r.code}: ${(r.stderr || r.stdout).slice(-300)}` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function listLeftovers(parent: string): string[] {
  return readdirSync(parent).filter((n) => n.startsWith("scratchrun-bench-"));
}
