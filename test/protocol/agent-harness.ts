/**
 * Runs the real agent binary (build/guest/agent) inside bubblewrap with its own pid namespace, so
 * the agent's kill(-1, SIGKILL) can only ever reach the sandbox. Never start the agent outside a
 * pid namespace (it refuses anyway).
 */
import { dirname } from "node:path";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { runAgentSession, type AgentSessionOptions } from "../../src/protocol/session.js";
import type { AgentOutcome, AgentRequest } from "../../src/protocol/types.js";

export const AGENT = fileURLToPath(new URL("../../../build/guest/agent", import.meta.url));

export interface JailOptions {
  /** bwrap --as-pid-1: the agent itself is init of the pid namespace (like a VM's init). */
  asPid1?: boolean;
  /** No user namespace (host root keeps real root inside), so the agent can setresuid. */
  realRoot?: boolean;
  /** Extra bwrap arguments placed before the command (e.g. --symlink). */
  extra?: string[];
  /** Arguments for the agent itself (e.g. --seccomp PATH). */
  agentArgs?: string[];
}

export function bwrapArgs(o: JailOptions = {}): string[] {
  const ns = o.realRoot
    ? ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts"]
    : ["--unshare-all"];
  return [
    ...ns,
    "--die-with-parent",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--perms",
    "1777",
    "--tmpfs",
    "/tmp",
    // The checkout may itself live under /tmp (CI clones anywhere): keep the agent visible.
    "--ro-bind",
    dirname(AGENT),
    dirname(AGENT),
    ...(o.asPid1 ? ["--as-pid-1"] : []),
    ...(o.extra ?? []),
    "--",
    AGENT,
    ...(o.agentArgs ?? []),
  ];
}

const live = new Set<ChildProcess>();

export function spawnJailedAgent(o: JailOptions = {}): {
  child: ChildProcess;
  closed: Promise<number | null>;
} {
  assert.ok(existsSync(AGENT), `${AGENT} is missing: run npm run build`);
  const child = spawn("bwrap", bwrapArgs(o), { stdio: ["pipe", "pipe", "pipe"] });
  live.add(child);
  const closed = new Promise<number | null>((resolve) =>
    child.once("close", (code) => {
      live.delete(child);
      resolve(code);
    }),
  );
  child.stderr!.resume();
  return { child, closed };
}

/** Kills whatever a failed test left running; every test also awaits its own process. */
export function killLeftovers(): void {
  for (const c of live) c.kill("SIGKILL");
}

export interface RunResult extends AgentOutcome {
  text: { stdout: string; stderr: string };
  agentExitCode: number | null;
}

/** Runs one request on a fresh jailed agent and waits until the jail process is gone. */
export async function runJailed(
  request: AgentRequest,
  o: JailOptions & Partial<AgentSessionOptions> = {},
): Promise<RunResult> {
  const { child, closed } = spawnJailedAgent(o);
  const outcome = await runAgentSession({ input: child.stdout!, output: child.stdin! }, request, {
    signal: o.signal ?? new AbortController().signal,
    hardDeadlineMs: o.hardDeadlineMs ?? request.timeoutMs + 20_000,
    ...(o.onEvent ? { onEvent: o.onEvent } : {}),
  });
  child.stdin!.end();
  const agentExitCode = await closed;
  return {
    ...outcome,
    text: {
      stdout: Buffer.from(outcome.stdout).toString(),
      stderr: Buffer.from(outcome.stderr).toString(),
    },
    agentExitCode,
  };
}

export function request(argv: string[], over: Partial<AgentRequest> = {}): AgentRequest {
  return {
    timeoutMs: 20_000,
    maxStdoutBytes: 1024 * 1024,
    maxStderrBytes: 1024 * 1024,
    maxFileBytes: 1024 * 1024,
    maxTotalFileBytes: 2 * 1024 * 1024,
    uid: null,
    gid: null,
    cwd: "/tmp",
    argv,
    env: { PATH: "/usr/bin:/bin" },
    files: [],
    returnFiles: [],
    ...over,
  };
}

export const sh = (script: string, over: Partial<AgentRequest> = {}) =>
  request(["/bin/sh", "-c", script], over);

/** Host pids with `marker` as one whole argument (host /proc, outside every jail). */
export function hostPidsWith(marker: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0");
      if (argv.includes(marker)) pids.push(Number(name));
    } catch {
      // exited while we looked
    }
  }
  return pids;
}

/** A sleep duration no other process on the machine uses, to find it in /proc. */
export function uniqueSleepArg(): string {
  return `${900000 + Math.floor(Math.random() * 90000)}.${process.pid}`;
}
