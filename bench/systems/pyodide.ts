import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { findDeno, findPeerFile } from "../peers.js";
import type { Workload } from "../workloads.js";
import { runProcess } from "./process.js";
import type { BenchSystem, CallResult } from "./types.js";

const RUNNER = fileURLToPath(new URL("./pyodide-runner.js", import.meta.url));

function unsupported(workload: Workload, missing: string | null): string | null {
  if (missing) return missing;
  if (workload.runtime !== "python3.11")
    return "Pyodide is one Python (measured in the python3.11 column)";
  if (workload.needs?.length)
    return `Pyodide fetches ${workload.needs.join("/")} wheels from its CDN at run time; only the npm registry is reachable here`;
  return null;
}

/**
 * A fresh Pyodide per call, in a new Node process (`node`) or a new Deno process with read
 * access to the Pyodide files only and no other permission (`deno`): the setup mcp-run-python uses.
 */
export function pyodide(host: "node" | "deno"): BenchSystem {
  const asm = findPeerFile("pyodide", "pyodide.mjs");
  const dir = asm ? dirname(asm) : null;
  const deno = host === "deno" ? findDeno() : null;
  const missing = !dir
    ? "pyodide is not installed (npm install pyodide@314.0.7)"
    : host === "deno" && !deno
      ? "deno is not installed (npm install deno@2.9.6)"
      : null;
  const argv = (code: string): string[] =>
    host === "node"
      ? [process.execPath, RUNNER, dir ?? "", code]
      : [deno ?? "", "run", "--no-prompt", `--allow-read=${dir}`, RUNNER, dir ?? "", code];
  return {
    id: `pyodide-${host}`,
    label: host === "node" ? "Pyodide in Node (fresh)" : "Pyodide in Deno, read-only (fresh)",
    kind: "peer",
    unsupported: (w) => unsupported(w, missing),
    start: async () => {},
    async call(workload: Workload): Promise<CallResult> {
      const r = await runProcess(argv(workload.code), {
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: "/tmp", DENO_NO_UPDATE_CHECK: "1" },
      });
      if (r.code === 0 && workload.check(r.stdout, {})) return { ok: true };
      return { ok: false, error: `exit ${r.code}: ${r.stderr.slice(-300)}` };
    },
    rootPids: () => [],
    close: async () => {},
  };
}
