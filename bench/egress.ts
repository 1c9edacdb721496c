// `node dist/bench/egress.js BASE_BIN [rounds]`: what the egress allowlist costs, side by side in
// one run, on the namespace backend with network "public" in private test internets (one
// test/net/topology.ts per server: their address pools would collide in one uplink). Three stdio
// servers at once: BASE_BIN (a build without the allowlist, e.g. main), this build without an
// allowlist (the default path, which must not get slower), and this build with one. Prints
//   1. per call: python3.11 print(1) and bash true, calls alternating across the three servers
//      (the order rotating each round), p25/p50/p75;
//   2. per connection, measured inside the sandbox (this build, open vs allowlisted, calls
//      alternating): a name lookup, a new HTTPS connection with one GET, a new HTTP connection
//      with one GET, to allowed.test; medians over the calls' medians.
// Run it under sr-locked: it starts jails and namespaces.
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { RESOLVER, Topology } from "../test/net/topology.js";
import { TEST_ALLOWLIST, WebHosts } from "../test/net/web.js";
import { quantile as quantileSorted } from "./stats.js";

const quantile = (xs: readonly number[], p: number) =>
  quantileSorted(
    [...xs].sort((a, b) => a - b),
    p,
  );

const baseBin = process.argv[2];
if (!baseBin)
  throw new Error("usage: egress.js BASE_BUILD/dist/src/bin/scratchrun-mcp.js [rounds]");
const rounds = Number(process.argv[3] ?? 60);
const thisBin = fileURLToPath(new URL("../src/bin/scratchrun-mcp.js", import.meta.url));

type Name = "base" | "open" | "allowlist";
const topos: Partial<Record<Name, Topology>> = {};
const webs: WebHosts[] = [];
const clients: Partial<Record<Name, Client>> = {};

async function start(name: Name, bin: string, allow: boolean): Promise<void> {
  const topo = await new Topology().build();
  topos[name] = topo;
  webs.push(await new WebHosts(topo).start());
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bin],
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
      SCRATCHRUN_ISOLATION: "namespace",
      SCRATCHRUN_NETWORK: "public",
      SCRATCHRUN_LOCAL: "1",
      SCRATCHRUN_UPLINK_NETNS: topo.uplinkNs,
      SCRATCHRUN_NET_PREFIX: topo.uplink.prefix,
      SCRATCHRUN_DNS: RESOLVER,
      SCRATCHRUN_ENABLE_FORWARDING: "1",
      ...(allow ? { SCRATCHRUN_EGRESS_ALLOW: TEST_ALLOWLIST } : {}),
    },
    stderr: "ignore",
  });
  const client = new Client({ name: "bench-egress", version: "1" });
  await client.connect(transport);
  clients[name] = client;
}

async function exec(
  name: Name,
  args: Record<string, unknown>,
): Promise<{ ms: number; stdout: string }> {
  const t = performance.now();
  const r = await clients[name]!.callTool(
    { name: "scratchrun_exec", arguments: { network: "public", timeout_ms: 30_000, ...args } },
    CallToolResultSchema,
    { timeout: 120_000 },
  );
  const ms = performance.now() - t;
  const s = r.structuredContent as { exit_code?: number; stdout?: string; stderr?: string };
  if (r.isError || s.exit_code !== 0)
    throw new Error(`${name}: ${JSON.stringify(r).slice(0, 400)}`);
  return { ms, stdout: s.stdout ?? "" };
}

const q = (xs: number[]) => ({
  p25: +quantile(xs, 0.25).toFixed(2),
  p50: +quantile(xs, 0.5).toFixed(2),
  p75: +quantile(xs, 0.75).toFixed(2),
});

const CONNECTIONS = 40;
/** Inside the sandbox: CONNECTIONS of each operation, sequential, timed with perf_counter. */
const perConnection = `
import json, socket, ssl, statistics, time
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
def get(s, host):
    s.sendall(("GET / HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n" % host).encode())
    data = b""
    while True:
        c = s.recv(4096)
        if not c: break
        data += c
    assert b"hello from" in data, data
def lookup():
    socket.getaddrinfo("allowed.test", 443, type=socket.SOCK_STREAM)
def https():
    with socket.create_connection(("allowed.test", 443), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="allowed.test") as s:
            get(s, "allowed.test")
def http():
    with socket.create_connection(("allowed.test", 80), timeout=5) as s:
        get(s, "allowed.test")
out = {}
for name, f in (("lookup", lookup), ("https", https), ("http", http)):
    f()
    ts = []
    for _ in range(${CONNECTIONS}):
        t = time.perf_counter(); f(); ts.append((time.perf_counter() - t) * 1000)
    out[name] = statistics.median(ts)
print(json.dumps(out))
`;

try {
  await start("base", baseBin, false);
  await start("open", thisBin, false);
  await start("allowlist", thisBin, true);
  const names: Name[] = ["base", "open", "allowlist"];
  const work = { "python3.11": "print(1)", bash: "true" } as const;
  const calls: Record<string, Record<Name, number[]>> = {};
  for (const runtime of Object.keys(work) as (keyof typeof work)[]) {
    const times: Record<Name, number[]> = { base: [], open: [], allowlist: [] };
    for (const n of names) await exec(n, { runtime, code: work[runtime] }); // warm
    for (let i = 0; i < rounds; i++) {
      const order = [...names.slice(i % 3), ...names.slice(0, i % 3)];
      for (const n of order) times[n].push((await exec(n, { runtime, code: work[runtime] })).ms);
    }
    calls[runtime] = times;
  }
  const conn: Record<"open" | "allowlist", Record<string, number[]>> = { open: {}, allowlist: {} };
  for (let i = 0; i < 7; i++) {
    for (const n of (i % 2 ? ["allowlist", "open"] : ["open", "allowlist"]) as (
      "open" | "allowlist"
    )[]) {
      const r = JSON.parse(
        (await exec(n, { runtime: "python3.11", code: perConnection })).stdout,
      ) as Record<string, number>;
      for (const [k, v] of Object.entries(r)) (conn[n][k] ??= []).push(v);
    }
  }
  const report = {
    when: new Date().toISOString(),
    rounds,
    perCallMs: Object.fromEntries(
      Object.entries(calls).map(([rt, t]) => [
        rt,
        Object.fromEntries(names.map((n) => [n, q(t[n])])),
      ]),
    ),
    perConnectionMs: Object.fromEntries(
      Object.keys(conn.open).map((k) => [
        k,
        {
          open: +quantile(conn.open[k]!, 0.5).toFixed(2),
          allowlist: +quantile(conn.allowlist[k]!, 0.5).toFixed(2),
          added: +(quantile(conn.allowlist[k]!, 0.5) - quantile(conn.open[k]!, 0.5)).toFixed(2),
        },
      ]),
    ),
  };
  console.log(JSON.stringify(report, null, 2));
} finally {
  for (const c of Object.values(clients)) await c?.close().catch(() => undefined);
  for (const w of webs) await w.stop();
  for (const t of Object.values(topos)) await t?.destroy();
}
