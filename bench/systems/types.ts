import type { RuntimeName } from "../../src/schema/exec.js";
import type { Workload } from "../workloads.js";

export type SystemKind = "ours" | "floor" | "peer";

/** What one call of one system returned, as far as the benchmark cares. */
export interface CallResult {
  ok: boolean;
  /** Refused by admission (the MCP server's BUSY, HTTP 429 in the API). */
  busy?: boolean;
  error?: string;
  /** The server's own duration_ms for the call (engine: sandbox + run), when it reports one. */
  serverMs?: number;
}

/** A way to run code that the benchmark measures side by side with the others. */
export interface BenchSystem {
  id: string;
  label: string;
  kind: SystemKind;
  /** null when this system can run the workload here; otherwise the exact reason it cannot. */
  unsupported(workload: Workload): string | null;
  start(): Promise<void>;
  call(workload: Workload): Promise<CallResult>;
  /** Host pids whose process trees are this system's cost (server, VMs); empty when per call. */
  rootPids(): number[];
  close(): Promise<void>;
}

export type RuntimeSet = readonly RuntimeName[];
