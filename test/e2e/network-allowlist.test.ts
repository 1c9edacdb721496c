import { PY } from "../helpers/pythons.js";
/**
 * The egress allowlist through the real server, on each backend (SCRATCHRUN_EGRESS_ALLOW; the
 * private test internet of test/net/topology.ts and web.ts as the uplink; nothing leaves the
 * machine): one call tries every way out at once (allowed names, a refused name, a raw IP, HTTPS
 * to an IP without SNI, its own resolver, SNI and Host that disagree with the address, a non-web
 * port) and the result names each refusal. The refused host's logs prove nothing arrived.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { startService } from "../api/harness.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { MCP_BIN, startServer, textOf, type McpHarness } from "../helpers/mcp-client.js";
import { probeProgram, Topology, type Check, type ProbeResult } from "../net/topology.js";
import {
  ALLOWED_IP,
  echHello,
  REFUSED_IP,
  ROGUE_DNS,
  TEST_ALLOWLIST,
  WebHosts,
} from "../net/web.js";

interface Refused {
  host: string | null;
  port: number;
  reason: string;
  count: number;
}

/**
 * The backends run side by side, each on its own private internet (a Topology of its own: its
 * namespaces, uplink and tables carry its tag) and its own server; within a backend the suites
 * run one after another. Each suite checks its own uplink's networks are gone; the host is
 * snapshotted before both backends and checked for leaks once both are done.
 */
let base: HostSnapshot;
before(() => {
  base = snapshot();
});
after(async () => {
  await assertNoLeaks(base);
});

describe("egress allowlist on every backend, side by side", { concurrency: true }, () => {
  for (const backend of TEST_BACKENDS) {
    describe(`egress allowlist [${backend}]`, { concurrency: false }, () => {
      describe(`egress allowlist through the MCP server [${backend}]`, { timeout: 600_000 }, () => {
        let topo: Topology;
        let web: WebHosts;
        let h: McpHarness;

        before(async () => {
          topo = await new Topology().build();
          web = await new WebHosts(topo).start();
          h = await startServer({
            SCRATCHRUN_ISOLATION: backend,
            SCRATCHRUN_POOL_SIZE: backend === "microvm" ? `${PY}=1` : "1",
            SCRATCHRUN_NETWORK: "public",
            SCRATCHRUN_EGRESS_ALLOW: TEST_ALLOWLIST,
            ...topo.serverEnv(),
          });
        });

        after(async () => {
          await h?.close();
          const left = await topo.networksLeft();
          await web?.stop();
          await topo?.destroy();
          assert.deepEqual(
            left,
            { netns: [], links: [], tables: [] },
            "networks and the guard table removed",
          );
        });

        test("the tool description names the allowlist", async () => {
          const { tools } = await h.client.listTools();
          const exec = tools.find((t) => t.name === "scratchrun_exec");
          assert.match(
            exec?.description ?? "",
            /reaches only these names.*allowed\.test, \*\.wild\.test/s,
          );
        });

        test("allowed names answer; every other way out is refused at once and named in the result", async () => {
          const checks: Check[] = [
            { label: "https allowed", kind: "https", host: "allowed.test" },
            { label: "http wildcard", kind: "http", host: "a.wild.test" },
            {
              label: "sni allowed to refused ip",
              kind: "https",
              host: REFUSED_IP,
              sni: "allowed.test",
            },
            { label: "https refused", kind: "https", host: "refused.test" },
            {
              label: "https ip no sni",
              kind: "https",
              host: REFUSED_IP,
              sni: null,
              hostHeader: "refused.test",
            },
            { label: "http ip", kind: "http", host: REFUSED_IP },
            {
              label: "sni refused, Host allowed",
              kind: "https",
              host: ALLOWED_IP,
              sni: "refused.test",
              hostHeader: "allowed.test",
            },
            { label: "own resolver", kind: "dnsq", server: ROGUE_DNS, name: "rogue.test" },
            { label: "tcp 7", kind: "tcp", host: ALLOWED_IP },
            {
              label: "allowed name resolving inward",
              kind: "https",
              host: ALLOWED_IP,
              sni: "inward.test",
            },
            {
              label: "ech",
              kind: "raw",
              host: ALLOWED_IP,
              port: 443,
              hex: echHello("allowed.test"),
            },
            // Two of test/security/egress-bypass.test.ts's cases, in the guest too: an absolute-form
            // target naming a refused host, and an address spelled as one decimal number as Host.
            {
              label: "absolute-uri",
              kind: "raw",
              host: ALLOWED_IP,
              port: 80,
              text: true,
              hex: Buffer.from(
                "GET http://refused.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
              ).toString("hex"),
            },
            {
              label: "decimal ip host",
              kind: "raw",
              host: ALLOWED_IP,
              port: 80,
              text: true,
              hex: Buffer.from("GET / HTTP/1.1\r\nHost: 3413180426\r\n\r\n").toString("hex"),
            },
          ];
          const mark = web.mark();
          const { result, s } = await h.exec({
            runtime: PY,
            code: probeProgram(checks, 8),
            network: "public",
            timeout_ms: 30_000,
          });
          assert.equal(s.exit_reason, "ok", s.stderr);
          const res = JSON.parse(s.stdout) as ProbeResult;
          for (const l of ["https allowed", "http wildcard", "sni allowed to refused ip"])
            assert.ok(res[l]?.ok, `${l}: ${res[l]?.detail}`);
          for (const l of [
            "https refused",
            "https ip no sni",
            "http ip",
            "sni refused, Host allowed",
            "own resolver",
            "tcp 7",
            "allowed name resolving inward",
          ]) {
            assert.equal(res[l]?.ok, false, `${l}: ${res[l]?.detail}`);
            assert.doesNotMatch(
              res[l]?.detail ?? "",
              /timed out/,
              `${l} refused at once, not a hang`,
            );
          }
          assert.equal(web.since(mark, "refused"), "", "the refused host saw nothing");
          assert.match(web.since(mark, "allowed"), /https sni=allowed\.test host=allowed\.test/);
          const refused = (s as unknown as { network_refused?: Refused[] }).network_refused ?? [];
          const has = (host: string | null, port: number, reason: string) =>
            assert.ok(
              refused.some(
                (r) => r.host === host && r.port === port && r.reason === reason && r.count >= 1,
              ),
              `${host}:${port} ${reason} in ${JSON.stringify(refused)}`,
            );
          has("refused.test", 53, "not_allowed");
          has(null, 443, "no_name");
          has(REFUSED_IP, 80, "ip_address");
          has("refused.test", 443, "not_allowed");
          has("rogue.test", 53, "not_allowed");
          has("inward.test", 443, "blocked_address");
          has("allowed.test", 443, "ech");
          assert.equal(res.ech?.detail, "recv 15030300020231", "ECH: a fatal access_denied alert");
          assert.match(
            res["absolute-uri"]?.detail ?? "",
            /refused allowed\.test \(host_mismatch\)/,
          );
          has("allowed.test", 80, "host_mismatch");
          assert.match(res["decimal ip host"]?.detail ?? "", /refused 3413180426 \(ip_address\)/);
          has("3413180426", 80, "ip_address");
          assert.equal(web.since(mark, "inward"), "", "the inward host saw nothing");
          assert.ok((s.network_blocked_packets ?? 0) >= 1, "the non-web connection was counted");
          // The text names the first 8 refusals in the order the proxy saw them (the probes run at
          // once): refused.test's DNS query or its connection, whichever came first, is among them.
          assert.match(
            textOf(result),
            /network: the egress allowlist refused .*refused\.test:(53|443) \(not allowed/,
          );
        });

        test('network "none" is unchanged: nothing at all', async () => {
          const { s } = await h.exec({
            runtime: PY,
            code: probeProgram([{ label: "https", kind: "https", host: "allowed.test" }], 2),
            network: "none",
          });
          assert.equal((JSON.parse(s.stdout) as ProbeResult).https?.ok, false);
          assert.equal((s as unknown as { network_refused?: unknown }).network_refused, undefined);
        });
      });

      describe(
        `an API key's egress allowlist through the HTTP service [${backend}]`,
        { timeout: 600_000 },
        () => {
          let topo: Topology;
          let web: WebHosts;
          before(async () => {
            topo = await new Topology().build();
            web = await new WebHosts(topo).start();
          });
          after(async () => {
            const left = await topo.networksLeft();
            await web?.stop();
            await topo?.destroy();
            assert.deepEqual(left, { netns: [], links: [], tables: [] }, "networks removed");
          });

          test("an API key's own allowlist narrows the server's: only names both allow answer", async () => {
            // The HTTP service with API keys on a private internet of its own (two servers' sandbox
            // address pools would collide in one uplink); the server's list is TEST_ALLOWLIST.
            const svc = await startService(
              {},
              {},
              {
                SCRATCHRUN_ISOLATION: backend,
                SCRATCHRUN_POOL_SIZE: "0",
                SCRATCHRUN_NETWORK: "public",
                SCRATCHRUN_EGRESS_ALLOW: TEST_ALLOWLIST,
                ...topo.serverEnv(),
              },
            );
            try {
              const only = (
                await svc.keys.create("only-allowed", { egress_allow: ["allowed.test"] })
              ).key;
              const wider = (
                await svc.keys.create("wild-and-refused", {
                  egress_allow: ["*.wild.test", "refused.test"],
                })
              ).key;
              const probe = async (key: string) => {
                const res = await svc.post(
                  "/v1/exec",
                  {
                    runtime: PY,
                    network: "public",
                    timeout_ms: 30_000,
                    code: probeProgram(
                      [
                        { label: "allowed", kind: "https", host: "allowed.test" },
                        { label: "wild", kind: "http", host: "a.wild.test" },
                        { label: "refused", kind: "https", host: "refused.test" },
                      ],
                      8,
                    ),
                  },
                  key,
                );
                const body = (await res.json()) as {
                  stdout: string;
                  stderr: string;
                  exit_reason: string;
                };
                assert.equal(res.status, 200, JSON.stringify(body));
                assert.equal(body.exit_reason, "ok", body.stderr);
                const r = JSON.parse(body.stdout) as ProbeResult;
                return [r.allowed?.ok, r.wild?.ok, r.refused?.ok];
              };
              // What the key is told applies is what does: the names both lists allow, not its own.
              const info = (await (
                await fetch(`${svc.api.url}/v1/info`, {
                  headers: { Authorization: `Bearer ${wider}` },
                })
              ).json()) as { network_note: string; limits: { egress_allow?: string[] } };
              assert.deepEqual(info.limits.egress_allow, ["*.wild.test"]);
              assert.match(info.network_note, /to these domains only: \*\.wild\.test$/);
              const mark = web.mark();
              // The server allows a.wild.test; this key does not.
              assert.deepEqual(await probe(only), [true, false, false]);
              // This key names refused.test; the server does not: a key only takes network away.
              assert.deepEqual(await probe(wider), [false, true, false]);
              assert.equal(web.since(mark, "refused"), "", "the refused host saw nothing");
            } finally {
              await svc.close();
            }
          });
        },
      );
    });
  }
});

describe("egress allowlist configuration", () => {
  test("a bad entry stops the server before it answers, naming the entry", () => {
    for (const [spec, named] of [
      ["pypi.org, https://evil.example/x", '"https://evil.example/x"'],
      ["pypi.org 10.0.0.1", '"10.0.0.1"'],
      ["*.com", '"*.com"'],
      [" , ", "names no domain"],
    ] as const) {
      const r = spawnSync(process.execPath, [MCP_BIN], {
        input: "",
        encoding: "utf8",
        timeout: 30_000,
        env: {
          PATH: process.env.PATH,
          SCRATCHRUN_ISOLATION: "namespace",
          SCRATCHRUN_LOCAL: "1",
          SCRATCHRUN_EGRESS_ALLOW: spec,
        },
      });
      assert.notEqual(r.status, 0, spec);
      assert.equal(r.stdout, "", "nothing on the protocol stream");
      assert.ok(
        r.stderr.includes("SCRATCHRUN_EGRESS_ALLOW") && r.stderr.includes(named),
        `${spec}: ${r.stderr}`,
      );
    }
  });
});
