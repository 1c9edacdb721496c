import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import pg from "pg";
import { waitFor } from "../api/harness.js";
import { skipOutsideCi } from "../helpers/ci.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { postgresMissing, promote, startStandby, type PgServer } from "../helpers/postgres.js";
import {
  API_ADDRESS,
  Cluster,
  type ApiReplica,
  type CallResult,
  type WorkerNode,
} from "./harness.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { MemoryProvider } from "../api/oauth-browser.js";
import { launchChromium, until } from "../console/chromium.js";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth, UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import type { FetchLike } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernHttpTransport,
} from "@modelcontextprotocol/client";

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");

const MISSING = process.getuid?.() !== 0 ? "needs root (namespaces, cgroups)" : postgresMissing();

/** Processes whose command line contains `text` (a sandboxed program, seen from the host). */
function processesRunning(text: string): number[] {
  const out: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${e}/cmdline`, "utf8").replace(/\0/g, " ").includes(text))
        out.push(Number(e));
    } catch {
      // gone
    }
  }
  return out;
}

async function workerStatus(c: Cluster, w: WorkerNode) {
  const res = await fetch(`http://${w.addr}/v1/worker/status`, {
    headers: { Authorization: `Bearer ${c.token}` },
    signal: AbortSignal.timeout(2000),
  });
  return (await res.json()) as {
    slots: { active: number };
    worker_id: string;
    sessions: { open: number };
  };
}

/** A REST answer of the session tests: a session, a result, or an error. */
interface SessionAnswer {
  session_id?: string;
  stdout?: string;
  session?: { calls: number };
  error?: { code: string; message: string };
}

/** Log lines (pino JSON) of a process whose message is `msg`. */
function logLines(stderr: string, msg: string): Record<string, unknown>[] {
  return stderr
    .split("\n")
    .filter((l) => l.startsWith("{") && l.includes(`"msg":"${msg}"`))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** The replicas' settings: a key's sessions across the cluster, under each worker's own 3. */
const REPLICA_ENV = { SCRATCHRUN_SESSIONS_PER_KEY: "2" };

describe(
  "cluster: API replicas, workers in their own network namespaces, Postgres",
  { skip: skipOutsideCi(MISSING) },
  () => {
    let c: Cluster;
    let base: HostSnapshot;
    let standby: PgServer | undefined;

    before(async () => {
      base = snapshot();
      // Replicas hold a key to 2 open sessions across the cluster, under each worker's own 3.
      c = await Cluster.start({
        workers: 2,
        replicas: 2,
        replicaEnv: REPLICA_ENV,
      });
      await c.waitWorkersUp(2);
    });

    after(async () => {
      await c?.close();
      await standby?.stop();
      await assertNoLeaks(base);
    });

    /** Waits until `n` new runs are running and returns them. */
    const running = (n: number, seen: Set<string>) =>
      waitFor(`${n} runs to be running`, async () => {
        const rows = (await c.runs()).filter(
          (r) => !seen.has(r.id) && r.status === "running" && r.worker,
        );
        return rows.length >= n ? rows : undefined;
      });
    const ids = async () => new Set((await c.runs()).map((r) => r.id));
    const workerAt = (addr: unknown) => c.workers.find((w) => w.addr === addr)!;

    test("calls through the front door run on both workers and are recorded with their worker", async () => {
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) => c.exec({ runtime: "bash", code: `echo call-${i}` })),
      );
      results.forEach((r, i) => {
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.stdout, `call-${i}\n`);
      });
      const runs = await c.runs();
      assert.equal(runs.length, 8);
      assert.ok(runs.every((r) => r.status === "finished" && r.exit_reason === "ok"));
      const workers = new Set(runs.map((r) => r.worker));
      assert.deepEqual(
        [...workers].sort(),
        c.workers.map((w) => w.addr).sort(),
        "both workers ran calls",
      );
      assert.equal(new Set(runs.map((r) => r.replica_id)).size, 2, "both replicas took calls");
      // `scratchrun keys` works on the shared database too (straight to the server: a
      // synchronous spawn would stall the proxy that runs in this process).
      const listed = spawnSync(process.execPath, [CLI, "keys", "list", "--json"], {
        env: { ...process.env, SCRATCHRUN_DATABASE_URL: c.pgServer.url("scratchrun") },
        encoding: "utf8",
      });
      assert.equal(listed.status, 0, listed.stderr);
      assert.deepEqual(
        (JSON.parse(listed.stdout) as { name: string }[]).map((k) => k.name),
        ["cluster"],
      );
    });

    test("INPUTS-CLUSTER: one call's inputs are spread over both workers by load, answered in order, each a run recorded with its worker", async () => {
      const seen = await ids();
      // Both workers' pooled bash sandboxes ready, and the replicas' polls (about once a second)
      // seeing it: each input then goes where the lighter load is, counting what the replica just
      // sent. Three inputs fit on one worker (2 running, 2 queued), so only that rule puts them on
      // both; sending each input to one worker until it refuses would not.
      await waitFor("both workers' pools to be ready", async () => {
        const warm = await Promise.all(
          c.workers.map(async (w) => {
            const res = await fetch(`http://${w.addr}/v1/worker/status`, {
              headers: { Authorization: `Bearer ${c.token}` },
            });
            const body = (await res.json()) as { warm: Record<string, { ready: number }> };
            return body.warm.bash?.ready ?? 0;
          }),
        );
        return warm.every((n) => n > 0) ? true : undefined;
      });
      await new Promise((r) => setTimeout(r, 2_500));
      const inputs = Array.from({ length: 3 }, (_, i) => ({ env: { N: String(i) } }));
      const r = await c.exec({ runtime: "bash", code: 'sleep 0.3; echo "input $N"', inputs });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const body = r.body as unknown as {
        results: { stdout: string; exit_reason: string }[];
        summary: { count: number; passed: number };
      };
      assert.deepEqual(
        body.results.map((x) => x.stdout),
        inputs.map((_, i) => `input ${i}\n`),
      );
      assert.deepEqual([body.summary.count, body.summary.passed], [3, 3]);
      const runs = (await c.runs()).filter((x) => !seen.has(x.id));
      assert.equal(runs.length, 3, "each input is a run of the key");
      assert.ok(runs.every((x) => x.status === "finished" && x.exit_reason === "ok"));
      assert.deepEqual(
        [...new Set(runs.map((x) => x.worker))].sort(),
        c.workers.map((w) => w.addr).sort(),
        "the inputs ran on both workers",
      );
    });

    test("2026-07-28 needs no affinity: its requests, each on a fresh connection, are served whole by either replica; a 2025 session needs the replica that opened it", async () => {
      const seen = await ids();
      // Every request on a connection of its own: the front door deals them out in turn, as a
      // Service without sessionAffinity would.
      const headers = { Authorization: `Bearer ${c.key}`, Connection: "close" };
      const modern = new ModernClient(
        { name: "cluster-2026", version: "1" },
        { versionNegotiation: { mode: { pin: "2026-07-28" } } },
      );
      await modern.connect(
        new ModernHttpTransport(new URL(`${c.url}/mcp`), { requestInit: { headers } }),
      );
      try {
        assert.equal(modern.getProtocolEra(), "modern");
        const names = (await modern.listTools()).tools.map((t) => t.name);
        assert.ok(names.includes("scratchrun_exec"), names.join(", "));
        for (let i = 0; i < 4; i++) {
          const r = await modern.callTool({
            name: "scratchrun_exec",
            arguments: { runtime: "bash", code: `echo modern-${i}` },
          });
          assert.equal(r.isError, false, JSON.stringify(r.content));
          assert.equal((r.structuredContent as { stdout: string }).stdout, `modern-${i}\n`);
        }
      } finally {
        await modern.close();
      }
      const mine = (await c.runs()).filter((r) => !seen.has(r.id));
      assert.equal(mine.length, 4, "each call recorded once");
      assert.ok(mine.every((r) => r.status === "finished" && r.exit_reason === "ok"));
      assert.equal(
        new Set(mine.map((r) => r.replica_id)).size,
        2,
        "both replicas served the one client's calls",
      );

      // The legacy era keeps its session in the replica that answered initialize: dealt out
      // the same way, its next request reaches the other replica, which does not know it.
      const legacy = new Client({ name: "cluster-2025", version: "1" });
      await assert.rejects(
        legacy.connect(
          new StreamableHTTPClientTransport(new URL(`${c.url}/mcp`), { requestInit: { headers } }),
        ),
        /session|404|not found/i,
      );
      await legacy.close().catch(() => {});
      // With ClientIP affinity (the API Service's), the same client's session is served whole.
      c.front.sticky = true;
      const pinned = new Client({ name: "cluster-2025", version: "1" });
      try {
        await pinned.connect(
          new StreamableHTTPClientTransport(new URL(`${c.url}/mcp`), { requestInit: { headers } }),
        );
        const r = await pinned.callTool({
          name: "scratchrun_exec",
          arguments: { runtime: "bash", code: "echo legacy" },
        });
        assert.equal((r.structuredContent as { stdout: string }).stdout, "legacy\n");
      } finally {
        c.front.sticky = false;
        await pinned.close();
      }
    });

    test("OAuth across API replicas sharing Postgres, in headless Chromium: signed in on one replica, the console and the consent on the other; the SDK's code redeemed on one, its token, refresh and the key's revocation honoured on the other", async () => {
      const [one, two] = c.replicas as [ApiReplica, ApiReplica];
      const at = (r: ApiReplica) => `http://${API_ADDRESS}:${r.port}`;
      // The SDK knows only the public URL (the front door, every replica's issuer); its fetch
      // sends each request to the replica a step names, and says which one it reached.
      const reached: string[] = [];
      const via =
        (r: ApiReplica): FetchLike =>
        (url, init) => {
          const u = new URL(url);
          assert.equal(u.origin, c.url, "the SDK asks the public URL only");
          reached.push(`${r.index} ${init?.method ?? "GET"} ${u.pathname}`);
          return fetch(`${at(r)}${u.pathname}${u.search}`, init);
        };
      const mcpUrl = new URL(`${c.url}/mcp`);
      const seen = await ids();
      /** A bare /mcp request with `token` on replica `r` (for the refusals: 401 comes first). */
      const ping = (r: ApiReplica, token: string) =>
        fetch(`${at(r)}/mcp`, {
          method: "POST",
          headers: {
            Authorization: `Bearer ${token}`,
            "Content-Type": "application/json",
            Accept: "application/json, text/event-stream",
          },
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
        });
      /** The CLI on the shared database, without stalling this process (the front door's). */
      const cli = (args: string[], stdin = "") =>
        new Promise<string>((resolve, reject) => {
          const p = spawn(process.execPath, [CLI, ...args], {
            env: { ...process.env, SCRATCHRUN_DATABASE_URL: c.pgServer.url("scratchrun") },
          });
          let out = "";
          let err = "";
          p.stdout.on("data", (d: Buffer) => (out += d.toString()));
          p.stderr.on("data", (d: Buffer) => (err += d.toString()));
          p.once("error", reject);
          p.once("close", (code) =>
            code === 0 ? resolve(out) : reject(new Error(`scratchrun ${args[0]}: ${code} ${err}`)),
          );
          p.stdin.end(stdin);
        });

      // 1. A member and two keys of theirs, made with the CLIs on the shared database.
      const password = "mia-correct-horse-battery";
      await cli(["users", "create", "--name", "mia", "--role", "member"], `${password}\n`);
      await cli(["keys", "create", "--name", "mia-laptop", "--owner", "mia"]);
      const agentKey = (
        await cli(["keys", "create", "--name", "mia-agent", "--owner", "mia"])
      ).trim();
      assert.match(agentKey, /^srk_[0-9a-f]{12}_/);
      const agentId = agentKey.slice(4, 16);

      // The client's redirect target: a loopback server of its own, where the browser lands.
      const landed: URL[] = [];
      const landing = createServer((req, res) => {
        const u = new URL(req.url ?? "/", "http://127.0.0.1");
        if (u.pathname !== "/callback") return void res.writeHead(404).end(); // the favicon
        landed.push(u);
        res.writeHead(200, { "Content-Type": "text/plain" }).end("back in the client");
      });
      await new Promise<void>((r) => landing.listen(0, "127.0.0.1", () => r()));
      const redirect = `http://127.0.0.1:${(landing.address() as AddressInfo).port}/callback`;

      const browser = await launchChromium();
      try {
        const context = await browser.newContext();
        const visited: string[] = [];
        context.on("request", (r) => visited.push(r.url()));
        const page = await context.newPage();

        // 2. Sign in through replica 1's form; replica 2 knows the session (it is in Postgres).
        await page.goto(`${at(one)}/console`);
        assert.equal(page.url(), `${at(one)}/console/signin`);
        await page.fill("#name", "mia");
        await page.fill("#password", password);
        await Promise.all([
          page.waitForURL((u) => u.href === `${at(one)}/console`),
          page.click("button[type=submit]"),
        ]);
        await page.waitForSelector("body[data-view=keys]");
        await page.goto(`${at(two)}/console`);
        assert.equal(page.url(), `${at(two)}/console`, "replica 2 did not send to sign-in");
        await page.waitForSelector("body[data-view=keys]");
        await until(page, `document.querySelector("#who").textContent === "mia (member)"`);
        await until(page, `document.querySelector("#key-table").textContent.includes("mia-agent")`);

        /** The consent for `authUrl` in the browser on replica `r`: approve as `keyId`. */
        const approve = async (authUrl: URL, r: ApiReplica, keyId: string): Promise<URL> => {
          assert.equal(authUrl.origin, c.url, "the authorization endpoint is the issuer's");
          landed.length = 0;
          await page.goto(`${at(r)}${authUrl.pathname}${authUrl.search}`);
          assert.match(page.url(), new RegExp(`^${at(r)}/oauth/consent\\?request=`));
          const text = (await page.textContent("main"))!;
          assert.match(text, /Let Replica Test Client use ScratchRun\?/);
          assert.ok(text.includes(redirect), `the consent page names ${redirect}`);
          assert.match(text, /Signed in as mia\./);
          await page.selectOption("#key", keyId);
          await Promise.all([
            page.waitForURL((u) => u.href.startsWith(redirect)),
            page.click("button[value=approve]"),
          ]);
          assert.equal(landed.length, 1, "the browser landed on the client's redirect once");
          const back = landed[0]!;
          assert.equal(back.searchParams.get("iss"), c.url, "the issuer is the public URL");
          assert.equal(back.searchParams.get("state"), "state-123");
          assert.ok(back.searchParams.get("code"), `a code in ${back.href}`);
          return back;
        };

        // 3. The SDK meets replica 1's 401 on /mcp, finds OAuth there and registers; the person
        // approves on replica 2, picking the second of their keys.
        const provider = new MemoryProvider("Replica Test Client", redirect);
        /** scratchrun_exec through replica `r`'s /mcp with the provider's token: its stdout. */
        const execOn = async (r: ApiReplica, word: string) => {
          const client = new Client({ name: "replicas-oauth", version: "1" });
          await client.connect(
            new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider, fetch: via(r) }),
          );
          try {
            const out = (await client.callTool({
              name: "scratchrun_exec",
              arguments: { runtime: "bash", code: `echo ${word}` },
            })) as CallToolResult;
            return (out.structuredContent as { stdout: string }).stdout;
          } finally {
            await client.close();
          }
        };
        const first = new StreamableHTTPClientTransport(mcpUrl, {
          authProvider: provider,
          fetch: via(one),
        });
        await assert.rejects(
          new Client({ name: "replicas-oauth", version: "1" }).connect(first),
          UnauthorizedError,
        );
        assert.ok(reached.includes("1 POST /oauth/register"), reached.join(", "));
        assert.ok(provider.info?.client_id.startsWith("src_"), "registered dynamically");
        const back = await approve(provider.authUrl!, two, agentId);

        // 4. The code (made on replica 2) is redeemed on replica 1; the token calls on replica 2.
        reached.length = 0;
        await first.finishAuth(back.searchParams.get("code")!);
        assert.deepEqual(
          reached.filter((s) => s.endsWith("/oauth/token")),
          ["1 POST /oauth/token"],
        );
        const issued = provider.saved!;
        assert.match(issued.access_token, /^sra_/);
        assert.equal(await execOn(two, "oauth-on-replica-2"), "oauth-on-replica-2\n");
        const run = (await c.runs()).filter((x) => !seen.has(x.id));
        assert.equal(run.length, 1, "one run recorded");
        assert.equal(run[0]!.key_id, agentId, "the run is the approved key's");
        assert.equal(run[0]!.transport, "mcp");
        assert.equal(run[0]!.replica_id, two.replicaId, "replica 2 took the call");

        // 5. Refresh on replica 1; the new token works on replica 2; the spent refresh token
        // used again on replica 2 is refused and revokes the grant for both replicas.
        assert.equal(await auth(provider, { serverUrl: mcpUrl, fetchFn: via(one) }), "AUTHORIZED");
        const refreshed = provider.saved!;
        assert.notEqual(refreshed.access_token, issued.access_token);
        assert.notEqual(refreshed.refresh_token, issued.refresh_token);
        assert.equal(await execOn(two, "refreshed-on-replica-2"), "refreshed-on-replica-2\n");
        const reuse = await fetch(`${at(two)}/oauth/token`, {
          method: "POST",
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({
            grant_type: "refresh_token",
            refresh_token: issued.refresh_token!,
            client_id: provider.info!.client_id,
          }),
        });
        assert.equal(reuse.status, 400);
        assert.equal(((await reuse.json()) as { error: string }).error, "invalid_grant");
        assert.equal((await ping(one, refreshed.access_token)).status, 401, "grant revoked");

        // A second grant, the other way round: authorized on replica 1, redeemed on replica 2,
        // called on replica 1; the key revoked in the console on replica 2 refuses its token.
        provider.saved = undefined;
        reached.length = 0;
        assert.equal(await auth(provider, { serverUrl: mcpUrl, fetchFn: via(two) }), "REDIRECT");
        const again = await approve(provider.authUrl!, one, agentId);
        assert.equal(
          await auth(provider, {
            serverUrl: mcpUrl,
            authorizationCode: again.searchParams.get("code")!,
            fetchFn: via(two),
          }),
          "AUTHORIZED",
        );
        assert.ok(reached.includes("2 POST /oauth/token"), reached.join(", "));
        const second = provider.saved!.access_token;
        assert.equal(await execOn(one, "oauth-on-replica-1"), "oauth-on-replica-1\n");

        await page.goto(`${at(two)}/console`);
        await page.waitForSelector(`[data-revoke="${agentId}"]`);
        page.once("dialog", (d) => void d.accept());
        await page.click(`[data-revoke="${agentId}"]`);
        await page.waitForSelector(`[data-revoke="${agentId}"]`, { state: "detached" });
        const refused = await ping(one, second);
        assert.equal(refused.status, 401, "the revoked key's token is refused on replica 1");
        assert.match(refused.headers.get("www-authenticate") ?? "", /invalid_token/);
        const runs = (await c.runs()).filter((x) => !seen.has(x.id));
        assert.deepEqual(
          runs.map((x) => [x.key_id, x.replica_id]),
          [
            [agentId, two.replicaId],
            [agentId, two.replicaId],
            [agentId, one.replicaId],
          ],
        );
        // No token ever sat in a URL the browser visited.
        assert.ok(visited.length > 10, `${visited.length} requests`);
        for (const u of visited) assert.doesNotMatch(u, /sra_|srr_|access_token|refresh_token/);
        await context.close();
      } finally {
        await browser.close();
        await new Promise<void>((r) => landing.close(() => r()));
      }
    });

    test("a worker runs nothing for a caller without the shared secret", async () => {
      const w = c.workers[0]!;
      const body = JSON.stringify({
        run_id: "x",
        replica_id: "intruder",
        request: { runtime: "bash", code: "sleep 7" },
      });
      const before = processesRunning("sleep 7").length;
      for (const auth of [undefined, "Bearer wrong-token-wrong-token", `Bearer ${c.token}x`]) {
        const headers: Record<string, string> = { "Content-Type": "application/json" };
        if (auth) headers.Authorization = auth;
        const res = await fetch(`http://${w.addr}/v1/worker/exec`, {
          method: "POST",
          headers,
          body,
        });
        assert.equal(res.status, 401, String(auth));
        const status = await fetch(`http://${w.addr}/v1/worker/status`, { headers });
        assert.equal(status.status, 401);
      }
      assert.equal(processesRunning("sleep 7").length, before);
      assert.equal((await workerStatus(c, w)).slots.active, 0, "nothing was started");
    });

    test("a worker killed mid-call (SIGKILL, link down): WORKER_LOST within ~3 s, run failed, next calls elsewhere, its orphans reaped when it returns", async (t) => {
      const seen = await ids();
      const calls = [0, 1].map((i) =>
        c
          .exec({ runtime: "bash", code: `sleep 6; echo survived-${i}`, timeout_ms: 20_000 })
          .then((r) => ({ ...r, at: Date.now() })),
      );
      const rows = await running(2, seen);
      const victim = workerAt(rows[0]!.worker);
      const survivor = c.workers.find((w) => w !== victim)!;
      // Unplugged first: no FIN or RST can tell the replicas; only their polls can.
      victim.linkDown();
      const killedAt = Date.now();
      await victim.proc!.kill("SIGKILL");
      const results = await Promise.all(calls);
      const lost = results.filter((r) => r.status !== 200);
      assert.equal(lost.length, rows.filter((r) => r.worker === victim.addr).length);
      for (const r of lost) {
        assert.equal(r.status, 502, JSON.stringify(r.body));
        assert.equal(r.body.error?.code, "WORKER_LOST");
        t.diagnostic(`WORKER_LOST answered ${r.at - killedAt} ms after the kill`);
        assert.ok(r.at - killedAt < 6000, `detected in ${r.at - killedAt} ms`);
      }
      for (const r of results.filter((x) => x.status === 200))
        assert.match(String(r.body.stdout), /^survived-\d\n$/);
      const after = await c.runs();
      for (const row of rows) {
        const now = after.find((r) => r.id === row.id)!;
        if (row.worker === victim.addr)
          assert.deepEqual([now.status, now.error_code], ["failed", "WORKER_LOST"]);
        else assert.equal(now.status, "finished");
      }

      const next = await Promise.all(
        Array.from({ length: 4 }, (_, i) => c.exec({ runtime: "bash", code: `echo next-${i}` })),
      );
      assert.ok(next.every((r) => r.status === 200));
      const nextRows = (await c.runs()).slice(-4);
      assert.ok(
        nextRows.every((r) => r.worker === survivor.addr),
        "new calls went elsewhere",
      );

      victim.linkUp();
      await victim.start();
      const recovered = logLines(victim.proc!.stderr, "recovered")[0]!;
      assert.ok(
        Number(recovered.reaped_sandboxes) >= 1,
        `the returning worker reaped its orphans: ${JSON.stringify(recovered)}`,
      );
      await c.waitWorkersUp(2);
    });

    test("an API replica killed mid-call: the worker kills that sandbox, the run is interrupted once the lease expires, the other replica keeps serving", async () => {
      const seen = await ids();
      const doomed = c.replicas[0]!;
      const call = c
        .exec(
          { runtime: "bash", code: "sleep 27; echo never", timeout_ms: 30_000 },
          { port: doomed.port },
        )
        .catch((e: unknown) => e);
      const [row] = await running(1, seen);
      assert.equal(row!.replica_id, doomed.replicaId);
      assert.ok(processesRunning("sleep 27").length > 0, "the call's program runs");
      const worker = workerAt(row!.worker);
      const killedAt = Date.now();
      await doomed.proc!.kill("SIGKILL");
      c.publishReplicas();
      await call;
      await waitFor(
        "the worker to kill the orphaned sandbox",
        async () =>
          (await workerStatus(c, worker)).slots.active === 0 &&
          processesRunning("sleep 27").length === 0,
        10_000,
      );
      const other = await c.exec({ runtime: "bash", code: "echo still-serving" });
      assert.equal(other.status, 200);
      assert.equal(other.body.stdout, "still-serving\n");
      const interrupted = await waitFor(
        "the run to be marked interrupted after the lease expired",
        async () => {
          const r = (await c.runs()).find((x) => x.id === row!.id)!;
          return r.status === "failed" ? r : undefined;
        },
        20_000,
      );
      assert.equal(interrupted.error_code, "INTERRUPTED");
      // The lease was last renewed at most a third of its TTL before the kill.
      assert.ok(
        Number(interrupted.finished_at) >= killedAt + (2 * c.leaseTtlMs) / 3 - 50,
        "not before the lease had expired",
      );
      // Restarted as it was started: the sessions test below holds both replicas to its limit.
      await doomed.start(REPLICA_ENV);
      c.publishReplicas();
      await c.waitWorkersUp(2);
    });

    test("drain: SIGTERM a worker mid-call; no new placements on it, its call finishes, it exits 0", async () => {
      const seen = await ids();
      const call = c.exec({ runtime: "bash", code: "sleep 3; echo drained" });
      const [row] = await running(1, seen);
      const draining = workerAt(row!.worker);
      const other = c.workers.find((w) => w !== draining)!;
      draining.proc!.kill("SIGTERM");
      // As many at once as the other worker takes (2 slots + 2 queue places).
      const during = await Promise.all(
        Array.from({ length: 4 }, (_, i) => c.exec({ runtime: "bash", code: `echo during-${i}` })),
      );
      assert.ok(
        during.every((r) => r.status === 200),
        JSON.stringify(during.map((r) => r.body)),
      );
      const res = await call;
      assert.equal(res.status, 200);
      assert.equal(res.body.stdout, "drained\n");
      assert.equal(await draining.proc!.exited, 0, "the worker exits cleanly after its drain");
      const placed = (await c.runs()).filter((r) => !seen.has(r.id) && r.id !== row!.id);
      assert.equal(placed.length, 4);
      assert.ok(
        placed.every((r) => r.worker === other.addr),
        "no call was placed on the draining worker",
      );
      await draining.start();
      await c.waitWorkersUp(2);
    });

    test("sessions: one worker holds each; either replica routes its calls there (REST and /mcp); a lost worker ends it with SESSION_LOST, recorded lost, never re-created; a drained one's are recorded shutdown", async () => {
      const at = (r: (typeof c.replicas)[number]) => `http://${API_ADDRESS}:${r.port}`;
      const [r1, r2] = [c.replicas[0]!, c.replicas[1]!];
      const call = async (base: string, method: string, path: string, body?: unknown) => {
        const res = await fetch(`${base}${path}`, {
          method,
          headers: {
            Authorization: `Bearer ${c.key}`,
            "Content-Type": "application/json",
            Connection: "close",
          },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
        return { status: res.status, body: (await res.json()) as SessionAnswer };
      };
      const start = async (base: string, extra: object = {}) => {
        const r = await call(base, "POST", "/v1/sessions", { runtime: "bash", ...extra });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        return r.body.session_id!;
      };
      const exec = (base: string, session_id: string, code: string) =>
        call(base, "POST", "/v1/exec", { runtime: "bash", code, session_id });
      const record = async (id: string) => {
        const digest = createHash("sha256").update(id).digest("hex");
        const rows = (await c.sql("SELECT * FROM sessions WHERE id_sha256 = $1", [digest])) as {
          id: string;
          worker: string;
          worker_id: string;
          replica_id: string;
          ended_at: string | null;
          end_reason: string | null;
          calls: number | null;
        }[];
        assert.ok(rows.length <= 1, "one record per session, never a second");
        return rows[0]!;
      };

      // Started through one replica, called through both: the same sandbox, on its worker.
      const kept = await start(at(r1));
      const rec = await record(kept);
      assert.ok(
        c.workers.some((w) => w.addr === rec.worker),
        rec.worker,
      );
      assert.equal(rec.worker_id, (await workerStatus(c, workerAt(rec.worker))).worker_id);
      assert.equal(rec.replica_id, r1.replicaId);
      const first = await exec(at(r1), kept, "echo from-r1 > /tmp/state; echo one");
      assert.equal(first.status, 200, JSON.stringify(first.body));
      const second = await exec(at(r2), kept, "cat /tmp/state");
      assert.equal(second.status, 200, JSON.stringify(second.body));
      assert.equal(second.body.stdout, "from-r1\n", "replica 2 reached the session's sandbox");
      assert.equal(second.body.session?.calls, 2);
      const runs = (await c.runs()).filter((r) => r.session_record === rec.id);
      assert.equal(runs.length, 2);
      assert.ok(runs.every((r) => r.worker === rec.worker && r.status === "finished"));
      const ended = await call(at(r2), "DELETE", `/v1/sessions/${kept}`);
      assert.equal(ended.status, 200, JSON.stringify(ended.body));
      const closed = await record(kept);
      assert.deepEqual([closed.end_reason, closed.calls], ["ended", 2]);
      assert.equal((await exec(at(r1), kept, "echo x")).status, 404);

      // /mcp on a replica lists the session tools and runs them.
      const client = new Client({ name: "cluster-test", version: "1" });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${at(r2)}/mcp`), {
          requestInit: { headers: { Authorization: `Bearer ${c.key}` } },
        }),
      );
      try {
        const names = (await client.listTools()).tools.map((t) => t.name);
        for (const n of ["scratchrun_exec", "scratchrun_session_start", "scratchrun_session_end"])
          assert.ok(names.includes(n), `${n} in ${names.join(", ")}`);
        const begun = await client.callTool({
          name: "scratchrun_session_start",
          arguments: { runtime: "bash" },
        });
        assert.ok(!begun.isError, JSON.stringify(begun.content));
        const sid = (begun.structuredContent as { session_id: string }).session_id;
        const ran = await client.callTool({
          name: "scratchrun_exec",
          arguments: { runtime: "bash", code: "echo mcp > f; cat f", session_id: sid },
        });
        assert.equal((ran.structuredContent as { stdout: string }).stdout, "mcp\n");
        const bye = await client.callTool({
          name: "scratchrun_session_end",
          arguments: { session_id: sid },
        });
        assert.ok(!bye.isError, JSON.stringify(bye.content));
        const r = await record(sid);
        assert.deepEqual([r.end_reason, r.calls], ["ended", 1]);
      } finally {
        await client.close();
      }

      // An idle end on the worker reaches the record through the worker's status.
      const idle = await start(at(r1), { idle_timeout_ms: 1000 });
      const idled = await waitFor("the idle session's record to close", async () => {
        const r = await record(idle);
        return r.ended_at !== null ? r : undefined;
      });
      assert.deepEqual([idled.end_reason, idled.calls], ["idle", 0]);

      // The per-key limit holds across the cluster, starting sessions counted (SEC-LIMIT-SESSION-
      // SLOTS): 8 starts at once for one key, 4 through each replica, and 2 start (the replicas
      // hold a key to SCRATCHRUN_SESSIONS_PER_KEY=2; either worker alone would take 3).
      const burst = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          call(at(i % 2 ? r2 : r1), "POST", "/v1/sessions", { runtime: "bash" }),
        ),
      );
      const pair = burst.filter((r) => r.status === 201).map((r) => r.body.session_id!);
      assert.equal(pair.length, 2, JSON.stringify(burst.map((r) => r.status)));
      for (const refused of burst.filter((r) => r.status !== 201)) {
        assert.equal(refused.status, 429, JSON.stringify(refused.body));
        assert.match(String(refused.body.error?.message), /2 sessions open/);
      }
      const openRecords = await c.sql(
        "SELECT id FROM sessions WHERE ended_at IS NULL AND starting_until IS NULL",
      );
      assert.equal(openRecords.length, 2, "no reservation left behind");
      // The key narrowed below them elsewhere (`scratchrun keys update` on the shared database):
      // each ends on its worker at once, recorded `policy` (SEC-LIMIT-SESSION-POLICY).
      const keysCli = (...args: string[]) => {
        const r = spawnSync(process.execPath, [CLI, "keys", ...args], {
          env: { ...process.env, SCRATCHRUN_DATABASE_URL: c.pgServer.url("scratchrun") },
          encoding: "utf8",
        });
        assert.equal(r.status, 0, r.stderr);
      };
      const clusterKeyId = c.key.split("_")[1]!;
      keysCli("update", clusterKeyId, "--max-memory-mb", "128");
      for (const id of pair)
        await waitFor(`session ${id.slice(0, 6)} ended for its key's policy`, async () =>
          (await record(id)).end_reason === "policy" ? true : undefined,
        );
      await waitFor("the workers' sandboxes gone", async () => {
        const open = await Promise.all(c.workers.map((w) => workerStatus(c, w)));
        return open.every((s) => s.sessions.open === 0) ? true : undefined;
      });
      assert.equal((await exec(at(r1), pair[0]!, "echo x")).status, 404);
      keysCli("update", clusterKeyId, "--max-memory-mb", "default");

      // A worker killed under a session: its next call is SESSION_LOST on every replica, its
      // record says lost, and nothing re-creates it elsewhere.
      const doomed = await start(at(r1));
      const placed = await record(doomed);
      assert.equal((await exec(at(r2), doomed, "echo alive")).status, 200);
      const victim = workerAt(placed.worker);
      const other = c.workers.find((w) => w !== victim)!;
      const openElsewhere = (await workerStatus(c, other)).sessions.open;
      await victim.proc!.kill("SIGKILL");
      for (const r of [r2, r1]) {
        const lost = await exec(at(r), doomed, "echo again");
        assert.equal(lost.status, 410, JSON.stringify(lost.body));
        assert.equal(lost.body.error?.code, "SESSION_LOST");
        assert.match(String(lost.body.error?.message), /lost.*Start a new session/);
      }
      const gone = await record(doomed);
      assert.equal(gone.end_reason, "lost");
      assert.equal(gone.calls, 1, "counted from its runs");
      assert.equal(
        (await workerStatus(c, other)).sessions.open,
        openElsewhere,
        "no session was re-created on the other worker",
      );
      const endLost = await call(at(r2), "DELETE", `/v1/sessions/${doomed}`);
      assert.equal(endLost.status, 410);
      // Both replicas see it gone before it returns (a new process at its address is a restart).
      await c.waitWorkersUp(1);
      await victim.start();
      const recovered = logLines(victim.proc!.stderr, "recovered")[0]!;
      assert.ok(Number(recovered.reaped_sandboxes) >= 1, "the session's sandbox was reaped");
      await c.waitWorkersUp(2);
      assert.equal((await exec(at(r1), doomed, "echo again")).status, 410, "still lost");

      // A worker's SIGTERM ends its sessions after its drain (they cannot move): "shutdown".
      const drained = await start(at(r2));
      const home = workerAt((await record(drained)).worker);
      home.proc!.kill("SIGTERM");
      assert.equal(await home.proc!.exited, 0);
      const shut = await waitFor("the drained worker's session record to close", async () => {
        const r = await record(drained);
        return r.ended_at !== null ? r : undefined;
      });
      assert.deepEqual([shut.end_reason, shut.calls], ["shutdown", 0]);
      await c.waitWorkersUp(1);
      await home.start();
      await c.waitWorkersUp(2);
      const open = await c.sql("SELECT id FROM sessions WHERE ended_at IS NULL");
      assert.deepEqual(open, [], "no session record is left open");
    });

    test("overload: every call is answered, the excess with 429 and Retry-After; no record left open", async () => {
      const seen = await ids();
      const results: CallResult[] = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          c.exec({ runtime: "bash", code: `sleep 1; echo load-${i}` }),
        ),
      );
      let ok = 0;
      results.forEach((r, i) => {
        if (r.status === 200) {
          ok++;
          assert.equal(r.body.stdout, `load-${i}\n`, "each answer is its own call's");
        } else {
          assert.equal(r.status, 429, JSON.stringify(r.body));
          assert.equal(r.body.error?.code, "BUSY");
          assert.ok(Number(r.retryAfter) >= 1, "429 says when to retry");
        }
      });
      // Two workers × (2 slots + 2 queue places): at least the slots run, the rest is refused.
      assert.ok(ok >= 4 && ok < 24, `${ok} ran`);
      const rows = (await c.runs()).filter((r) => !seen.has(r.id));
      assert.equal(rows.filter((r) => r.status === "finished").length, ok);
      assert.ok(rows.every((r) => r.status === "finished" || r.status === "failed"));
    });

    test("Postgres primary killed, standby promoted: in-flight calls finish and are recorded, new calls get 503 NOT_READY in the gap, no run left running", async (t) => {
      const t0 = Date.now();
      const mark = (what: string) => t.diagnostic(`${what} at +${Date.now() - t0} ms`);
      standby = await startStandby(c.pgServer);
      mark("standby streaming");
      const caughtUp = async () => {
        const p = new pg.Client({ connectionString: c.pgServer.url() });
        const s2 = new pg.Client({ connectionString: standby!.url() });
        await p.connect();
        await s2.connect();
        try {
          const lsn = (await p.query("SELECT pg_current_wal_lsn() AS l")).rows[0].l as string;
          await waitFor(
            "the standby to replay the primary's WAL",
            async () =>
              (await s2.query("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok", [lsn])).rows[0]
                .ok,
          );
        } finally {
          await p.end();
          await s2.end();
        }
      };
      await caughtUp();
      const seen = await ids();
      const inflight = [0, 1].map((i) =>
        c.exec({ runtime: "bash", code: `sleep 4; echo kept-${i}` }),
      );
      const rows = await running(2, seen);
      // A synchronous standby would have these rows; the test waits as one would.
      await caughtUp();
      mark("calls running, standby caught up");
      await c.pgServer.kill();
      mark("primary killed");
      const gap = await Promise.all(
        [0, 1].map(() => c.exec({ runtime: "bash", code: "echo gap" })),
      );
      for (const r of gap) {
        assert.equal(r.status, 503, JSON.stringify(r.body));
        assert.equal(r.body.error?.code, "NOT_READY");
        assert.ok(Number(r.retryAfter) >= 1);
      }
      mark("gap calls answered 503");
      await promote(standby);
      c.dbProxy.targets = [standby.port];
      mark("standby promoted");
      const results = await Promise.all(inflight);
      mark("in-flight calls answered");
      results.forEach((r, i) => {
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.stdout, `kept-${i}\n`);
      });
      await c.readFrom(standby);
      const after = await c.runs();
      for (const row of rows)
        assert.equal(
          after.find((r) => r.id === row.id)?.status,
          "finished",
          "written after the failover",
        );
      const open = after.filter((r) => r.status === "running" || r.status === "queued");
      assert.deepEqual(open, [], "no run left running");
      const back = await c.exec({ runtime: "bash", code: "echo back" });
      assert.equal(back.status, 200);
    });
  },
);
