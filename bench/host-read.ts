// `node dist/bench/host-read.js [N]`: what reading the host's neighbourhood costs a sandbox
// network's creation (issue 13, H17), side by side with what it replaced, in one run on the host's
// real network (read only): before, `ip -j addr show` and the own public addresses; after, one
// `ip -j -force -batch -` (addresses, every table's routes, nexthops) and hostBlockSet when the
// watch does not have the set current, nothing when it does (its monitor running in the root
// namespace for the measurement). The first two alternate so both see the same machine. Also the per-call CPU of the result shaping that items
// 4-6 of issue 13 added to every call (fence tag and escaping, the raw-arguments check, the
// streamer), for a print(1)-sized and a 32 KiB result.
import { performance } from "node:perf_hooks";
import { classifyAddress } from "../src/net/addresses.js";
import { inNetns, mustRun } from "../src/net/commands.js";
import { hostBlockSet, parseHostNetwork, HOST_NETWORK_BATCH } from "../src/net/host-block.js";
import { hostWatch, readHostBlockSet } from "../src/net/host-watch.js";
import { uplinkConfig } from "../src/net/uplink.js";
import { summaryText } from "../src/mcp/content.js";
import { LineStreamer } from "../src/mcp/stream-log.js";
import { parseExecRequest } from "../src/schema/validate.js";
import type { ExecOutcome } from "../src/engine/result.js";
import { summarize } from "./stats.js";

const N = Number(process.argv[2] ?? 300);
const u = uplinkConfig();

/** The read sandbox-net.ts did before: own addresses no blocked range covers. */
async function before(): Promise<string[]> {
  const out = await mustRun(inNetns(u.netns, "ip", ["-j", "addr", "show"]));
  const doc = JSON.parse(out) as Array<{ addr_info?: Array<{ local?: string }> }>;
  const addrs = doc.flatMap((l) => (l.addr_info ?? []).map((a) => a.local ?? ""));
  return [...new Set(addrs)].filter((a) => a !== "" && !classifyAddress(a).blocked);
}

async function time(f: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await f();
  return performance.now() - t;
}

function cpu(f: () => void, rounds = 2000): number {
  for (let i = 0; i < 200; i++) f();
  const t = performance.now();
  for (let i = 0; i < rounds; i++) f();
  return ((performance.now() - t) / rounds) * 1000; // µs
}

const a: number[] = [];
const b: number[] = [];
for (let i = 0; i < N; i++) {
  if (i % 2 === 0) {
    a.push(await time(before));
    b.push(await time(() => readHostBlockSet(u)));
  } else {
    b.push(await time(() => readHostBlockSet(u)));
    a.push(await time(before));
  }
}
// The steady state of a server with live sandbox networks: the watch's monitor runs and settled.
const watch = hostWatch(u);
watch.acquire();
await new Promise((r) => setTimeout(r, 1000));
const c: number[] = [];
for (let i = 0; i < N; i++)
  c.push(
    await time(async () => {
      const gen = watch.generation;
      const set = watch.cached() ?? (await readHostBlockSet(u));
      watch.noteRead(set, gen);
    }),
  );
const hits = watch.cached() !== null;
watch.release();

const batch = await mustRun(
  inNetns(u.netns, "ip", ["-j", "-force", "-batch", "-"]),
  HOST_NETWORK_BATCH,
).catch(() => "");
const pure = cpu(() =>
  hostBlockSet(parseHostNetwork(batch), { ignoreLinkPrefix: "sr-h", pools: [u.poolV4] }),
);

const result = (stdout: string): ExecOutcome => ({
  result: {
    stdout,
    stderr: "",
    exit_code: 0,
    exit_reason: "ok",
    signal: null,
    duration_ms: 20,
    isolation: "namespace",
    network: "none",
    stdout_truncated: false,
    stderr_truncated: false,
    stdout_omitted_bytes: 0,
    stderr_omitted_bytes: 0,
    files: [],
  },
  files: [],
  images: [],
});
const small = result("1\n");
const big = result(`${"x".repeat(79)}\n`.repeat(400));
const args = { runtime: "python3.11", code: "print(1)", env: { TOKEN: "sk-0123456789" } };
const stream = (text: string) => () => {
  const s = new LineStreamer(() => undefined, { TOKEN: "sk-0123456789" });
  s.push("stdout", Buffer.from(text));
  s.flush();
};

const report = {
  host: process.env.HOSTNAME ?? "",
  samples: N,
  ms: {
    before_ip_addr_show: summarize(a),
    after_uncached_ip_batch_and_block_set: summarize(b),
    after_steady_state_watch_cached: summarize(c),
  },
  steady_state_cache_hit: hits,
  us_per_call: {
    hostBlockSet_of_this_host: Math.round(pure * 10) / 10,
    parseExecRequest_print1: Math.round(cpu(() => parseExecRequest(args)) * 10) / 10,
    summaryText_print1: Math.round(cpu(() => summaryText(small)) * 10) / 10,
    summaryText_32KiB: Math.round(cpu(() => summaryText(big), 500) * 10) / 10,
    stream_print1: Math.round(cpu(stream("1\n")) * 10) / 10,
    stream_32KiB: Math.round(cpu(stream(big.result.stdout), 200) * 10) / 10,
  },
};
process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
