// `node dist/bench/ab-builds.js OTHER_BIN [rounds]`: the namespace hot path of two builds side by
// side in one run: this checkout's scratchrun-mcp and another build's (OTHER_BIN, e.g. a commit
// exported with `git archive` and compiled), both started as stdio servers at once, their calls
// alternating one by one (the order flipping each round) so both see the same machine. Prints
// p25/p50/p75 per runtime of bash `true` and python3.11 `print(1)`, through the MCP SDK's client;
// AB_WORKLOAD=product (or realistic, pandas) alternates that python3.11 workload of the benchmark
// instead, its files sent and returned as `npm run bench` does.
// Network "none"; the namespace backend unless SCRATCHRUN_ISOLATION says microvm. Run it under
// sr-locked: it starts jails.
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { alternate } from "./stats.js";
import { workloadFor, type WorkloadId } from "./workloads.js";

const other = process.argv[2];
if (!other)
  throw new Error("usage: ab-builds.js OTHER_BUILD/dist/src/bin/scratchrun-mcp.js [rounds]");
const rounds = Number(process.argv[3] ?? 100);
const isolation = process.env.SCRATCHRUN_ISOLATION ?? "namespace";
// The pool refills between calls: a jail in tens of ms, a warmed microVM clone in about a second.
// AB_PAUSE_MS overrides it (a pre-imported jail takes ~0.6 s of CPU to refill).
const pauseMs = Number(process.env.AB_PAUSE_MS ?? (isolation === "microvm" ? 1500 : 30));
const bins = {
  this: fileURLToPath(new URL("../src/bin/scratchrun-mcp.js", import.meta.url)),
  other,
};
type Build = keyof typeof bins;

async function start(bin: string): Promise<Client> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bin],
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
      SCRATCHRUN_ISOLATION: isolation,
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_LOCAL: "1",
    },
    stderr: "ignore",
  });
  const client = new Client({ name: "ab-builds", version: "1" });
  await client.connect(transport);
  return client;
}

const clients: Record<Build, Client> = {
  this: await start(bins.this),
  other: await start(bins.other),
};
const chosen = (process.env.AB_WORKLOAD ?? "print") as WorkloadId;
const python = workloadFor(chosen, "python3.11");
if (!python) throw new Error(`AB_WORKLOAD=${chosen}: no such python3.11 workload`);
const work: Record<string, Record<string, unknown>> = chosen === "print"
  ? {
      bash: { runtime: "bash", code: "true" },
      "python3.11": { runtime: "python3.11", code: "print(1)" },
    }
  : {
      [`python3.11 ${chosen}`]: {
        runtime: "python3.11",
        code: python.code,
        timeout_ms: 30_000,
        return_files: python.returnFiles,
        ...(python.files ? { files: python.files } : {}),
      },
    };

async function call(b: Build, row: string): Promise<number> {
  const t = performance.now();
  const r = await clients[b].callTool(
    { name: "scratchrun_exec", arguments: work[row]! },
    CallToolResultSchema,
    { timeout: 300_000 },
  );
  const ms = performance.now() - t;
  if (r.isError || (r.structuredContent as { exit_code?: number }).exit_code !== 0)
    throw new Error(`${b} ${row}: ${JSON.stringify(r).slice(0, 300)}`);
  return ms;
}

const report = await alternate(
  ["this", "other"] as const,
  Object.keys(work),
  call,
  rounds,
  pauseMs,
);
process.stdout.write(`${JSON.stringify({ isolation, rounds, bins, ms: report }, null, 2)}\n`);
await clients.this.close();
await clients.other.close();
