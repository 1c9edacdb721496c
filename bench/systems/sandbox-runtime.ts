import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { RuntimeName } from "../../src/schema/exec.js";
import { findPeerFile } from "../peers.js";
import { CODE_FILE, type Workload } from "../workloads.js";
import { judge, makeWorkDir, runProcess } from "./process.js";
import type { BenchSystem, CallResult } from "./types.js";

/** sandbox-runtime wraps host binaries (it has no image), so it runs the host's interpreters. */
export const HOST_INTERPRETERS: Partial<Record<RuntimeName, string>> = {
  "python3.12": "/root/.pyenv/versions/3.12.1/bin/python3.12",
  "python3.13": "/root/.pyenv/versions/3.13.0/bin/python3.13",
  "python3.11": "/usr/bin/python3.11",
  node20: process.execPath,
  bash: "/bin/bash",
};

const PKG = "@anthropic-ai/sandbox-runtime";

/**
 * The code file run by the host's interpreter. PATH is the system's own (as in the image): the
 * time-to-interactive commands (`node -v`, `python3 -c`) then find /usr/bin's node and python3,
 * not a version manager's shim that would add its own start-up to every call.
 */
function shellCommand(dir: string, workload: Workload): string {
  return `cd '${dir}' && PATH=/usr/bin:/bin exec ${HOST_INTERPRETERS[workload.runtime] ?? "false"} ${CODE_FILE[workload.runtime]}`;
}

function unsupportedOnHost(workload: Workload): string | null {
  if (!HOST_INTERPRETERS[workload.runtime])
    return `sandbox-runtime runs host binaries and this host has no ${workload.runtime}`;
  if (workload.needs?.length && workload.runtime.startsWith("python"))
    return `sandbox-runtime runs host binaries and this host's ${workload.runtime} has no ${workload.needs.join("/")}`;
  return null;
}

function config(workParent: string) {
  return {
    network: { allowedDomains: [] as string[], deniedDomains: [] as string[] },
    filesystem: { denyRead: [] as string[], allowWrite: [workParent], denyWrite: [] as string[] },
  };
}

/** `srt -c '<command>'`: a new Node process, its proxies and a bubblewrap per call. */
export function srtCli(workParent: string): BenchSystem {
  const bin = findPeerFile(PKG, "dist/cli.js");
  const settings = join(workParent, "srt-settings.json");
  return {
    id: "srt-cli",
    label: "sandbox-runtime CLI (srt)",
    kind: "peer",
    unsupported: (w) =>
      bin ? unsupportedOnHost(w) : `${PKG} is not installed (npm install ${PKG}@0.0.83)`,
    async start() {
      mkdirSync(workParent, { recursive: true });
      writeFileSync(settings, JSON.stringify(config(workParent)));
    },
    async call(workload: Workload): Promise<CallResult> {
      const dir = makeWorkDir(workParent, workload);
      const r = await runProcess([
        process.execPath,
        bin ?? "",
        "-s",
        settings,
        "-c",
        shellCommand(dir, workload),
      ]);
      return judge(workload, r, dir);
    },
    rootPids: () => [],
    close: async () => {},
  };
}

interface SandboxManagerLike {
  initialize(config: unknown): Promise<void>;
  wrapWithSandbox(command: string): Promise<string>;
  reset(): Promise<void>;
}

/** The library: SandboxManager initialised once in this process, one wrapped command per call. */
export function srtLibrary(workParent: string): BenchSystem {
  const entry = findPeerFile(PKG, "dist/index.js");
  let manager: SandboxManagerLike | null = null;
  return {
    id: "srt-lib",
    label: "sandbox-runtime library",
    kind: "peer",
    unsupported: (w) =>
      entry ? unsupportedOnHost(w) : `${PKG} is not installed (npm install ${PKG}@0.0.83)`,
    async start() {
      if (!entry) return;
      mkdirSync(workParent, { recursive: true });
      const mod = (await import(pathToFileURL(entry).href)) as {
        SandboxManager: SandboxManagerLike;
      };
      manager = mod.SandboxManager;
      await manager.initialize(config(workParent));
    },
    async call(workload: Workload): Promise<CallResult> {
      if (!manager) return { ok: false, error: "not started" };
      const dir = makeWorkDir(workParent, workload);
      const wrapped = await manager.wrapWithSandbox(shellCommand(dir, workload));
      const r = await runProcess(["/bin/sh", "-c", wrapped]);
      return judge(workload, r, dir);
    },
    rootPids: () => [],
    async close() {
      await manager?.reset();
      manager = null;
    },
  };
}
