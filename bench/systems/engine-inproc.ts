import type { Engine } from "../../src/engine/engine.js";
import { RUNTIMES } from "../../src/schema/exec.js";
import { createEngineFromEnv } from "../../src/compose/engine-factory.js";
import type { Workload } from "../workloads.js";
import type { BenchSystem, CallResult } from "./types.js";

/**
 * The namespace engine called in this process, no MCP and no stdio: the difference to the MCP
 * system is what the protocol layer and the client cost; the difference to raw bubblewrap is
 * what the jail (cgroups, seccomp, uid), the agent protocol and the engine cost.
 */
export function engineInProcess(
  env: Record<string, string>,
): BenchSystem & { waitWarm(timeoutMs: number): Promise<boolean> } {
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
          ...(w.id !== "print" ? { timeout_ms: 30_000 } : {}),
          ...(w.files ? { files: w.files } : {}),
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
    /** As the MCP systems do: every pool full and nothing being started. */
    async waitWarm(timeoutMs: number) {
      const deadline = Date.now() + timeoutMs;
      const full = () =>
        engine !== null &&
        engine.backend.pooled("python3.11") !== undefined &&
        RUNTIMES.every((r) => {
          const w = engine!.backend.pooled(r);
          return w.ready >= w.target;
        }) &&
        (engine.backend as { pool?: { starting: number } }).pool?.starting === 0;
      while (!full() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      return full();
    },
    async close() {
      await engine?.close();
      engine = null;
    },
  };
}
