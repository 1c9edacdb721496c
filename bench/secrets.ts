/**
 * What brokering a secret adds to an HTTPS request (issue 28; docs/decisions/0015): on each
 * backend, one stdio server on a private test internet (test/net/topology.ts, web.ts; nothing
 * leaves the machine) with an allowlist, and one call with a secret bound to allowed.test that
 * times, inside the sandbox, new HTTPS connections with one GET each, alternating:
 *   - direct: to a.wild.test (allowlisted, not bound: spliced end to end by the proxy), the
 *     client verifying the test server's own certificate;
 *   - brokered: to allowed.test with the placeholder in Authorization (terminated by the proxy
 *     with the call's CA, substituted, sent on over the proxy's kept-alive upstream connection).
 * Both names are the same test server. Reported: p50 of each and the added p50.
 */
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { RESOLVER, Topology } from "../test/net/topology.js";
import { WebHosts } from "../test/net/web.js";
import { REPO_ROOT } from "./peers.js";
import type { SecretsBackend, SecretsResults } from "./results.js";
import { summarize } from "./stats.js";

const MCP_BIN = `${REPO_ROOT}/dist/src/bin/scratchrun-mcp.js`;

export interface SecretsPlan {
  /** Requests per side, in one call. */
  requests: number;
}

const program = (n: number) => `
import json, os, ssl, time, urllib.request
tok = os.environ["TOKEN"]
direct = ssl.create_default_context(cafile="web-ca.pem")
brokered = ssl.create_default_context()
def once(url, ctx):
    t = time.perf_counter()
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {tok}"})
    urllib.request.urlopen(req, timeout=10, context=ctx).read()
    return (time.perf_counter() - t) * 1000
sides = {"direct": ("https://a.wild.test/d", direct), "brokered": ("https://allowed.test/b", brokered)}
for url, ctx in sides.values():
    once(url, ctx)
out = {"direct": [], "brokered": []}
for i in range(${n}):
    order = ["direct", "brokered"] if i % 2 == 0 else ["brokered", "direct"]
    for side in order:
        out[side].append(once(*sides[side]))
print(json.dumps(out))
`;

async function oneBackend(
  backend: "namespace" | "microvm",
  plan: SecretsPlan,
): Promise<SecretsBackend> {
  const topo = await new Topology().build();
  const web = await new WebHosts(topo).start();
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MCP_BIN],
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
      SCRATCHRUN_ISOLATION: backend,
      SCRATCHRUN_NETWORK: "public",
      SCRATCHRUN_LOCAL: "1",
      SCRATCHRUN_EGRESS_ALLOW: "allowed.test, *.wild.test",
      SCRATCHRUN_EGRESS_UPSTREAM_CA: web.certPath,
      SCRATCHRUN_POOL_SIZE: "0",
      SCRATCHRUN_UPLINK_NETNS: topo.uplinkNs,
      SCRATCHRUN_NET_PREFIX: topo.uplink.prefix,
      SCRATCHRUN_DNS: RESOLVER,
      SCRATCHRUN_ENABLE_FORWARDING: "1",
    },
    stderr: "ignore",
  });
  const client = new Client({ name: "bench-secrets", version: "1" });
  try {
    await client.connect(transport);
    const t = performance.now();
    const r = await client.callTool(
      {
        name: "scratchrun_exec",
        arguments: {
          runtime: "python3.11",
          network: "public",
          timeout_ms: 30_000,
          code: program(plan.requests),
          files: { "web-ca.pem": readFileSync(web.certPath, "utf8") },
          secrets: { TOKEN: { value: "bench-brokered-value", hosts: ["allowed.test"] } },
        },
      },
      CallToolResultSchema,
      { timeout: 120_000 },
    );
    const callMs = performance.now() - t;
    const s = r.structuredContent as { exit_code?: number; stdout?: string; stderr?: string };
    if (r.isError || s.exit_code !== 0)
      throw new Error(`${backend}: ${JSON.stringify(r).slice(0, 500)}`);
    const out = JSON.parse(s.stdout ?? "{}") as { direct: number[]; brokered: number[] };
    const direct = summarize(out.direct);
    const brokered = summarize(out.brokered);
    return {
      backend,
      direct,
      brokered,
      addedP50Ms: direct && brokered ? Math.round((brokered.p50 - direct.p50) * 10) / 10 : null,
      callMs: Math.round(callMs),
    };
  } finally {
    await client.close().catch(() => undefined);
    await web.stop();
    await topo.networksLeft();
    await topo.destroy();
  }
}

export async function benchSecrets(
  backends: readonly ("namespace" | "microvm")[],
  plan: SecretsPlan,
  log: (line: string) => void,
): Promise<SecretsResults> {
  const results: SecretsResults = { requests: plan.requests, backends: [] };
  for (const backend of backends) {
    try {
      const b = await oneBackend(backend, plan);
      log(
        `secrets ${backend}: direct p50 ${b.direct?.p50} ms, brokered p50 ${b.brokered?.p50} ms, added ${b.addedP50Ms} ms`,
      );
      results.backends.push(b);
    } catch (e) {
      results.backends.push({
        backend,
        direct: null,
        brokered: null,
        addedP50Ms: null,
        callMs: 0,
        error: String(e).slice(0, 300),
      });
    }
  }
  return results;
}
