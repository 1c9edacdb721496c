import type { Engine } from "../../src/engine/engine.js";
import { createEngineFromEnv } from "../../src/setup/engine-factory.js";
import type { Workload } from "../workloads.js";
import type { BenchSystem, CallResult } from "./types.js";

/**
 * The namespace engine called in this process, no MCP and no stdio: the difference to the MCP
 * system is what the protocol layer and the client cost; the difference to raw bubblewrap is
 * what the jail (cgroups, seccomp, uid), the agent protocol and the engine cost.
 */
export function engineInProcess(env: Record<string, string>): BenchSystem {
  let engine: Engine | null = null;
  return {
    id: "engine",
    label: "ScratchRun namespace engine, in-process (no MCP)",
    kind: "ours",
    unsupported: () => null,
    async start() {
      engine = await createEngineFromEnv({ ...process.env, ...env });
    },
    async call(w: Workload): Promise<CallResult> {
      if (!engine) return { ok: false, error: "not started" };
      try {
        const out = await engine.executeInput({
          runtime: w.runtime,
          code: w.code,
          network: "none",
          return_files: w.returnFiles,
        });
        const files: Record<string, number> = {};
        for (const f of out.result.files ?? [])
          if (f.status === "ok") files[f.path.replace(/^\/home\/user\//, "")] = f.size_bytes;
        return w.check(out.result.stdout, files)
          ? { ok: true, serverMs: out.result.duration_ms }
          : { ok: false, error: out.result.stdout.slice(0, 300) };
      } catch (e) {
        return { ok: false, error: e instanceof Error ? e.message : String(e) };
      }
    },
    rootPids: () => [],
    async close() {
      await engine?.close();
      engine = null;
    },
  };
}
