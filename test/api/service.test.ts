import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernHttpTransport,
} from "@modelcontextprotocol/client";
import Ajv2020 from "ajv/dist/2020.js";
import { buildOpenApiDocument } from "../../src/api/openapi.js";
import { ONCE_CALLED } from "../../src/runtimes/table.js";
import { RUNTIMES } from "../../src/schema/exec.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { WireClient, type WireError } from "../helpers/wire-2026.js";
import type { SessionRow } from "../../src/store/sessions.js";
import { startService, waitFor, type ServiceHarness } from "./harness.js";

const openapi = JSON.parse(readFileSync(join(REPO_ROOT, "openapi/openapi.json"), "utf8")) as {
  components: { schemas: Record<string, object> };
};
const ajv = new Ajv2020.default({ strict: false, allErrors: true });
// The whole document, so a schema's $ref to another component resolves (UsageFigures).
ajv.addSchema(openapi, "openapi.json");
const validators = Object.fromEntries(
  Object.keys(openapi.components.schemas).map((n) => [
    n,
    ajv.getSchema(`openapi.json#/components/schemas/${n}`),
  ]),
);
function assertSchema(name: string, body: unknown): void {
  const v = validators[name];
  assert.ok(v, `schema ${name} exists`);
  assert.ok(
    v(body),
    `${name}: ${JSON.stringify(v.errors)} in ${JSON.stringify(body).slice(0, 300)}`,
  );
}

const ENV_SECRET = "sr-env-secret-value-7d41e0";

describe("HTTP service on one engine", () => {
  let h: ServiceHarness;
  let base: HostSnapshot;
  const keys: Record<string, string> = {};
  const secrets: string[] = [ENV_SECRET];

  before(async () => {
    base = snapshot();
    h = await startService(
      { maxConcurrent: 2, maxQueued: 8, queueDeadlineMs: 20_000 },
      {
        keyLimits: { maxConcurrent: 5, ratePerMinute: 100_000, burst: 100_000 },
        // A 2026 call that declares the tasks extension becomes a task after half a second.
        sessions: { taskAfterMs: 500 },
      },
    );
    for (const name of ["a", "b", "c", "d", "revoked"]) {
      keys[name] = (await h.keys.create(name)).key;
      secrets.push(keys[name]!);
    }
    await h.keys.revoke("revoked");
  });

  after(async () => {
    await h?.close();
    await assertNoLeaks(base);
  });

  test("the checked-in OpenAPI document is the one the code builds", () => {
    assert.deepEqual(openapi, JSON.parse(JSON.stringify(buildOpenApiDocument())));
  });

  test("/readyz and scratchrun_pool_ready count the namespace pool's jails for every runtime", async () => {
    // Jails are pooled per runtime (and, for Python with a pre-import, per flavour): wait for all.
    const full = () =>
      RUNTIMES.every((r) => h.engine.backend.pooled(r).ready === h.engine.backend.pooled(r).target);
    await waitFor("every runtime's warm jails", full, 60_000);
    const res = await fetch(`${h.api.url}/readyz`);
    const body = (await res.json()) as {
      status: string;
      isolation: string;
      pools: {
        kinds: {
          kind: string;
          runtime: string;
          state: string;
          ready: number;
          size: number;
          since: string;
        }[];
        fullAfterMs: number | null;
      };
    };
    assert.deepEqual([res.status, body.status, body.isolation], [200, "ready", "namespace"]);
    // Each pool says its state and since when: full ones have their size ready, a once-called
    // runtime nobody called is off; every pool was full at some point after start.
    assert.ok(body.pools.kinds.length >= RUNTIMES.length, JSON.stringify(body.pools));
    for (const k of body.pools.kinds) {
      const want = ONCE_CALLED.includes(k.runtime as (typeof RUNTIMES)[number]) ? "off" : "full";
      assert.equal(k.state, want, JSON.stringify(k));
      if (want === "full") assert.ok(k.ready >= k.size && k.size >= 1, JSON.stringify(k));
      assert.ok(Date.parse(k.since) <= Date.now(), k.since);
    }
    assert.ok(
      typeof body.pools.fullAfterMs === "number" && body.pools.fullAfterMs > 0,
      `fullAfterMs ${body.pools.fullAfterMs}`,
    );
    const metrics = await h.api.metrics.render();
    for (const r of RUNTIMES) {
      const { ready, target } = h.engine.backend.pooled(r);
      // A once-called runtime nobody has called yet keeps no jail (and /readyz does not wait).
      if (ONCE_CALLED.includes(r)) assert.deepEqual({ ready, target }, { ready: 0, target: 0 }, r);
      else assert.ok(ready >= 1, `${r}: ${ready} warm`);
      assert.match(metrics, new RegExp(`scratchrun_pool_ready\\{runtime="${r}"\\} ${ready}\\b`));
    }
  });

  test("a once-called runtime's first call starts its pool, which then fills", async () => {
    const runtime = "python3.13";
    assert.ok(ONCE_CALLED.includes(runtime));
    assert.equal(h.engine.backend.pooled(runtime).target, 0, `${runtime} was not called yet`);
    const first = await h.post("/v1/exec", { runtime, code: "print(6 * 7)" }, keys.a);
    assert.equal(first.status, 200);
    assert.equal(((await first.json()) as { stdout: string }).stdout, "42\n");
    assert.ok(h.engine.backend.pooled(runtime).target >= 1, "called once: pooled from now on");
    await waitFor(
      `${runtime}'s warm jails`,
      () => h.engine.backend.pooled(runtime).ready >= 1,
      60_000,
    );
    const metrics = await h.api.metrics.render();
    assert.match(metrics, new RegExp(`scratchrun_pool_ready\\{runtime="${runtime}"\\} [1-9]`));
  });

  test("/metrics serves this server's metrics and the process's own, and no key material", async () => {
    const res = await fetch(`${h.api.url}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    for (const name of [
      "scratchrun_sandboxes_active",
      "scratchrun_mcp_sessions",
      "scratchrun_call_duration_seconds",
      "process_resident_memory_bytes",
      "nodejs_heap_size_used_bytes",
      "nodejs_eventloop_lag_seconds",
    ])
      assert.match(text, new RegExp(`^# TYPE ${name} `, "m"), name);
    for (const key of Object.values(keys)) assert.ok(!text.includes(key!), "no key in metrics");
  });

  test("missing, malformed, unknown and revoked keys get 401 and start no sandbox", async () => {
    const before = h.runs.all().length;
    const calls = async () =>
      (await h.api.metrics.render())
        .split("\n")
        .filter((l) => l.startsWith("scratchrun_calls_total{"));
    const callsBefore = await calls();
    const req = { runtime: "bash", code: "echo should-not-run" };
    const wrong = keys.a!.slice(0, -4) + (keys.a!.endsWith("AAAA") ? "BBBB" : "AAAA");
    for (const key of [undefined, "nonsense", wrong, keys.revoked]) {
      const res = await h.post("/v1/exec", req, key);
      assert.equal(res.status, 401, `key ${String(key).slice(0, 8)}`);
      assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer/);
      assertSchema("Error", await res.json());
    }
    const mcp = await h.post("/mcp", { jsonrpc: "2.0", id: 1, method: "initialize" }, wrong);
    assert.equal(mcp.status, 401);
    assert.equal(h.runs.all().length, before, "no run was recorded");
    assert.deepEqual(await calls(), callsBefore, "no call reached a sandbox");
    // Control: the same request with a valid key does run.
    const ok = await h.post("/v1/exec", req, keys.a);
    assert.equal(ok.status, 200);
    assert.equal(((await ok.json()) as { stdout: string }).stdout, "should-not-run\n");
  });

  test("a result matches the OpenAPI schema and carries returned files", async () => {
    const res = await h.post(
      "/v1/exec",
      {
        runtime: "python3.12",
        code: "import os; open('/tmp/o.txt','w').write(os.environ['TOKEN'][:3]); print('py')",
        env: { TOKEN: ENV_SECRET },
        return_files: ["/tmp/o.txt", "/tmp/missing"],
      },
      keys.a,
    );
    assert.equal(res.status, 200);
    const body = (await res.json()) as {
      stdout: string;
      files: { path: string; status: string; content_base64?: string }[];
    };
    assertSchema("ExecResult", body);
    assert.equal(body.stdout, "py\n");
    assert.equal(Buffer.from(body.files[0]!.content_base64!, "base64").toString(), "sr-");
    assert.equal(body.files[1]!.status, "missing");
    assert.equal(body.files[1]!.content_base64, undefined);
  });

  test("a session is its key's alone: another key's calls and end get the unknown id's 404", async () => {
    const started = await h.post("/v1/sessions", { runtime: "python3.12", memory_mb: 128 }, keys.a);
    assert.equal(started.status, 201);
    const session = (await started.json()) as { session_id: string; memory_mb: number };
    assertSchema("Session", session);
    assert.equal(session.memory_mb, 128);
    const id = session.session_id;
    const call = (key: string, code: string, session_id = id) =>
      h.post("/v1/exec", { runtime: "python3.12", code, session_id }, key);
    const first = await call(keys.a!, "kept = 'only a'\nprint('set')");
    assert.equal(first.status, 200);
    const firstBody = (await first.json()) as { stdout: string; session?: { calls: number } };
    assertSchema("ExecResult", firstBody);
    assert.equal(firstBody.stdout, "set\n");
    assert.equal(firstBody.session?.calls, 1);

    const unknown = await call(keys.b!, "print(kept)", "AAAAAAAAAAAAAAAAAAAAAA");
    const foreign = await call(keys.b!, "print(kept)");
    assert.equal(foreign.status, 404);
    assert.deepEqual(await foreign.json(), await unknown.json(), "foreign and unknown read alike");
    const del = (key: string) =>
      fetch(`${h.api.url}/v1/sessions/${id}`, {
        method: "DELETE",
        headers: { Authorization: `Bearer ${key}` },
      });
    assert.equal((await del(keys.b!)).status, 404, "another key cannot end it");
    const again = await call(keys.a!, "print(kept)");
    const againBody = (await again.json()) as { stdout: string; session?: { calls: number } };
    assert.equal(againBody.stdout, "only a\n", "b's attempts ran nothing and ended nothing");
    assert.equal(againBody.session?.calls, 2);
    const ended = await del(keys.a!);
    assert.equal(ended.status, 200);
    assertSchema("Session", await ended.json());
    assert.equal((await call(keys.a!, "print(1)")).status, 404, "ended: gone for its key too");

    // Its record: whose, what, how it ended, its calls; each call's run names it.
    secrets.push(id);
    const [record, ...others] = h.db
      .prepare("SELECT * FROM sessions WHERE key_id = ?")
      .all((await h.keys.list()).find((k) => k.name === "a")!.id) as SessionRow[];
    assert.equal(others.length, 0);
    assert.deepEqual(
      [record!.runtime, record!.memory_mb, record!.transport, record!.end_reason, record!.calls],
      ["python3.12", 128, "rest", "ended", 2],
    );
    assert.ok(record!.ended_at! >= record!.started_at);
    const runs = h.runs.all().filter((r) => r.session_record === record!.id);
    assert.deepEqual(
      runs.map((r) => [r.status, r.exit_reason]),
      [
        ["finished", "ok"],
        ["finished", "ok"],
      ],
      "a's two calls name the record; b's foreign call and a's call after the end do not",
    );
    const refused = h.runs
      .all()
      .filter((r) => r.error_code === "SESSION_NOT_FOUND")
      .map((r) => r.session_record);
    assert.deepEqual(refused, [null, null, null]);
  });

  test("a session that expires idle is recorded so, with its calls", async () => {
    const started = await h.post(
      "/v1/sessions",
      { runtime: "bash", idle_timeout_ms: 1000 },
      keys.c,
    );
    assert.equal(started.status, 201);
    const { session_id } = (await started.json()) as { session_id: string };
    secrets.push(session_id);
    const ran = await h.post("/v1/exec", { runtime: "bash", code: "echo x", session_id }, keys.c);
    assert.equal(ran.status, 200);
    const cId = (await h.keys.list()).find((k) => k.name === "c")!.id;
    const record = await waitFor("the idle session's record to close", () => {
      const r = h.db.prepare("SELECT * FROM sessions WHERE key_id = ?").get(cId) as
        SessionRow | undefined;
      return r?.ended_at ? r : undefined;
    });
    assert.deepEqual([record.end_reason, record.calls, record.runtime], ["idle", 1, "bash"]);
    const gone = await h.post("/v1/exec", { runtime: "bash", code: "echo x", session_id }, keys.c);
    assert.equal(gone.status, 404);
  });

  test("bad input is 400, wrong media type 415, an oversized body 413, all before any sandbox", async () => {
    const before = h.runs.all().length;
    const bad = await h.post("/v1/exec", { runtime: "cobol", code: "x", extra: 1 }, keys.a);
    assert.equal(bad.status, 400);
    const err = (await bad.json()) as { error: { code: string; message: string } };
    assertSchema("Error", err);
    assert.equal(err.error.code, "INVALID_INPUT");
    assert.match(err.error.message, /runtime/);
    assert.equal((await h.post("/v1/exec", "{not json", keys.a)).status, 400);
    const media = await h.post("/v1/exec", "{}", keys.a, { "Content-Type": "text/plain" });
    assert.equal(media.status, 415);
    const big = await h.post(
      "/v1/exec",
      { runtime: "bash", code: "x".repeat(17 * 1024 * 1024) },
      keys.a,
    );
    assert.equal(big.status, 413);
    assertSchema("Error", await big.json());
    assert.equal(h.runs.all().length, before);
  });

  test("a rebinding Host or foreign Origin is refused on a loopback bind", async () => {
    const { port } = h.api;
    const probe = (headers: Record<string, string>) =>
      new Promise<number>((resolve, reject) => {
        import("node:http").then(({ request }) => {
          const r = request(
            { host: "127.0.0.1", port, path: "/v1/exec", method: "POST", headers },
            (res) => {
              res.resume();
              resolve(res.statusCode ?? 0);
            },
          );
          r.on("error", reject);
          r.end(JSON.stringify({ runtime: "bash", code: "echo x" }));
        }, reject);
      });
    const auth = { Authorization: `Bearer ${keys.a}`, "Content-Type": "application/json" };
    assert.equal(await probe({ ...auth, Host: `evil.example:${port}` }), 403);
    assert.equal(
      await probe({ ...auth, Host: `127.0.0.1:${port}`, Origin: "http://evil.example" }),
      403,
    );
    assert.equal(
      await probe({ ...auth, Host: `localhost:${port}`, Origin: `http://localhost:${port}` }),
      200,
    );
  });

  test("100 concurrent calls from 4 keys: each answered once, with its own output, within limits", async () => {
    const names = ["a", "b", "c", "d"];
    const before = new Set(h.runs.all().map((r) => r.id));
    const calls = Array.from({ length: 100 }, async (_, i) => {
      const key = names[i % names.length]!;
      const token = `call-${i}-${key}`;
      const res = await h.post(
        "/v1/exec",
        // The code's own clock readings bound when its sandbox ran (the concurrency check below).
        {
          runtime: "bash",
          code: `echo ${token}; date +%s%N; sleep 0.02; date +%s%N`,
          env: { T: ENV_SECRET },
        },
        keys[key],
      );
      const body = (await res.json()) as { stdout?: string; error?: { code: string } };
      return { i, key, token, status: res.status, retry: res.headers.get("retry-after"), body };
    });
    const results = await Promise.all(calls);
    let ok = 0;
    const ran: [number, number][] = [];
    for (const r of results) {
      if (r.status === 200) {
        ok++;
        const [token, t0, t1] = (r.body.stdout ?? "").trim().split("\n");
        assert.equal(token, r.token, `call ${r.i} got its own output`);
        ran.push([Number(t0) / 1e6, Number(t1) / 1e6]);
      } else {
        assert.equal(r.status, 429, `call ${r.i}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error?.code, "BUSY");
        assert.ok(Number(r.retry) >= 1, "429 says when to retry");
      }
    }
    assert.ok(ok >= 10, `a fair share ran (${ok})`);
    assert.ok(ok < 100, "the limits refused some");

    const rows = h.runs.all().filter((r) => !before.has(r.id));
    const finished = rows.filter((r) => r.status === "finished");
    assert.equal(finished.length, ok, "one finished record per answered call");
    assert.ok(rows.every((r) => r.status === "finished" || r.status === "failed"));
    // Short calls have their start written with their end (STARTED_RECORD_DELAY_MS).
    for (const r of finished) {
      const [received, started, ended] = [r.received_at, r.started_at, r.finished_at] as number[];
      assert.ok(
        typeof started === "number" && received! <= started && started <= ended!,
        `run ${r.id} records when it started: ${JSON.stringify(r)}`,
      );
    }
    const maxOverlap = (spans: [number, number][]) => {
      const ev = spans.flatMap(([s, e]) => [
        [s, 1],
        [e, -1],
      ]);
      ev.sort((x, y) => x[0]! - y[0]! || x[1]! - y[1]!);
      let cur = 0;
      let max = 0;
      for (const [, d] of ev) max = Math.max(max, (cur += d!));
      return max;
    };
    // When each call's code ran, by its own clock (inside its sandbox, so within the slot it held;
    // the records' times are taken around the slot and a busy event loop stretches them).
    assert.equal(ran.length, ok);
    assert.ok(
      ran.every(([a, b]) => b - a >= 20),
      "every call's code ran for its 20 ms",
    );
    assert.ok(maxOverlap(ran) <= 2, "never more sandboxes than maxConcurrent");
    for (const name of names) {
      const id = (await h.keys.list()).find((k) => k.name === name)!.id;
      const mine = rows
        .filter((r) => r.key_id === id)
        .map((r) => [r.received_at, r.finished_at] as [number, number]);
      assert.ok(maxOverlap(mine) <= 5, `key ${name} never had more than 5 calls in flight`);
    }
    assert.match(
      await h.api.metrics.render(),
      /scratchrun_calls_total\{runtime="bash",exit_reason="ok"\} \d+/,
    );
  });

  test("the SDK's Streamable HTTP client calls the tool; sessions are bound to their key", async () => {
    const client = new Client({ name: "api-test", version: "1" });
    const transport = new StreamableHTTPClientTransport(new URL(`${h.api.url}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${keys.b}` } },
    });
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      assert.ok(tools.some((t) => t.name === "scratchrun_exec"));
      const result = await client.callTool(
        { name: "scratchrun_exec", arguments: { runtime: "node20", code: "console.log(6*7)" } },
        CallToolResultSchema,
      );
      assert.equal(result.isError, false);
      assert.equal((result.structuredContent as { stdout: string }).stdout, "42\n");
      const other = await fetch(`${h.api.url}/mcp`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${keys.c}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
          "Mcp-Session-Id": transport.sessionId!,
          "Mcp-Protocol-Version": "2025-06-18",
        },
        body: JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/list" }),
      });
      assert.equal(other.status, 404, "another key cannot use this session");
      const rows = h.runs.all().filter((r) => r.transport === "mcp");
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.exit_reason, "ok");
    } finally {
      await transport.terminateSession().catch(() => {});
      await client.close();
    }
  });

  test("cancelling an MCP call or dropping a REST request ends its sandbox", async () => {
    // MCP: the SDK sends notifications/cancelled when the signal aborts.
    const client = new Client({ name: "api-test", version: "1" });
    const transport = new StreamableHTTPClientTransport(new URL(`${h.api.url}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${keys.c}` } },
    });
    await client.connect(transport);
    const countRunning = () => h.runs.all().filter((r) => r.status === "running").length;
    try {
      const ac = new AbortController();
      const call = client
        .callTool(
          { name: "scratchrun_exec", arguments: { runtime: "bash", code: "sleep 25" } },
          CallToolResultSchema,
          { signal: ac.signal },
        )
        .catch((e: unknown) => e);
      await waitFor("the MCP call to run", () => countRunning() === 1);
      await waitFor(
        "its sandbox to be recorded",
        () => h.db.prepare("SELECT count(*) n FROM sandboxes").get() as { n: number } | undefined,
      );
      ac.abort();
      await call;
      const row = await waitFor("the run to end", () =>
        h.runs
          .all()
          .find(
            (r) =>
              r.transport === "mcp" && r.status === "finished" && r.exit_reason === "cancelled",
          ),
      );
      assert.ok(row);
    } finally {
      await transport.terminateSession().catch(() => {});
      await client.close();
    }
    // REST: one of two clients goes away mid-call; only its sandbox ends.
    const drop = (code: string, signal: AbortSignal) =>
      fetch(`${h.api.url}/v1/exec`, {
        method: "POST",
        headers: { Authorization: `Bearer ${keys.d}`, "Content-Type": "application/json" },
        body: JSON.stringify({ runtime: "bash", code }),
        signal,
      }).catch((e: unknown) => e);
    const first = new AbortController();
    const second = new AbortController();
    const calls = [drop("sleep 25", first.signal), drop("sleep 26", second.signal)];
    await waitFor("both REST calls to run", () => countRunning() === 2);
    // Both engine slots are taken (maxConcurrent 2): a third call waits in the engine's queue.
    // Dropped there, it is answered and recorded as a cancelled call, not refused BUSY.
    const queued = new AbortController();
    calls.push(drop("sleep 27", queued.signal));
    await waitFor("the third call to queue", () => h.engine.admission.queued === 1);
    queued.abort();
    const inQueue = await waitFor("the queued call to be cancelled", () =>
      h.runs
        .all()
        .find(
          (r) => r.transport === "rest" && r.exit_reason === "cancelled" && r.started_at === null,
        ),
    );
    assert.equal(inQueue.status, "finished");
    assert.equal(inQueue.error_code, null, "not BUSY");
    assert.equal(h.engine.admission.queued, 0);
    assert.equal(countRunning(), 2, "the running calls are untouched");
    first.abort();
    await waitFor("the dropped call to be cancelled", () =>
      h.runs
        .all()
        .find(
          (r) => r.transport === "rest" && r.exit_reason === "cancelled" && r.started_at !== null,
        ),
    );
    assert.equal(countRunning(), 1, "the other call is untouched");
    second.abort();
    await Promise.all(calls);
    await waitFor("the second call to end", () => countRunning() === 0);
  });

  /** An SDK v2 client pinned to the 2026-07-28 revision: no initialize, no session. */
  async function modernClient(key: string) {
    const client = new ModernClient(
      { name: "api-test-2026", version: "1" },
      { versionNegotiation: { mode: { pin: "2026-07-28" } } },
    );
    const transport = new ModernHttpTransport(new URL(`${h.api.url}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${key}` } },
    });
    await client.connect(transport);
    return { client, transport };
  }

  test("a 2026-07-28 client is served statelessly on /mcp: discover, the tool, no session", async () => {
    const { client, transport } = await modernClient(keys.b!);
    try {
      assert.equal(client.getProtocolEra(), "modern");
      assert.equal(client.getServerVersion()?.name, "scratchrun");
      assert.equal(transport.sessionId, undefined, "the 2026 revision has no Mcp-Session-Id");
      const { tools } = await client.listTools();
      assert.deepEqual(
        tools.map((t) => t.name),
        [
          "scratchrun_exec",
          "scratchrun_runtimes",
          "scratchrun_session_start",
          "scratchrun_session_end",
        ],
      );
      const before = h.runs.all().filter((r) => r.transport === "mcp").length;
      const progress: string[] = [];
      const result = await client.callTool(
        { name: "scratchrun_exec", arguments: { runtime: "node20", code: "console.log(6*7)" } },
        { onprogress: (p) => progress.push(p.message ?? "") },
      );
      assert.equal(result.isError, false);
      assert.equal((result.structuredContent as { stdout: string }).stdout, "42\n");
      assert.ok(progress.includes("running"), `progress: ${progress.join(", ")}`);
      const rows = h.runs.all().filter((r) => r.transport === "mcp");
      assert.equal(rows.length, before + 1, "one call, recorded under its key");
      assert.equal(rows.at(-1)!.key_id, (await h.keys.list()).find((k) => k.name === "b")!.id);
      // Bad input is a tool error before any sandbox starts, as in the 2025 era.
      const bad = await client.callTool({
        name: "scratchrun_exec",
        arguments: { runtime: "cobol", code: "x" },
      });
      assert.equal(bad.isError, true);
      assert.match(JSON.stringify(bad.content), /INVALID_INPUT/);
      assert.equal(h.runs.all().filter((r) => r.transport === "mcp").length, before + 1);
    } finally {
      await client.close();
    }
  });

  test("a malformed 2026 _meta envelope is a JSON-RPC error and runs nothing", async () => {
    const before = h.runs.all().length;
    const res = await fetch(`${h.api.url}/mcp`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${keys.b}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
        "Mcp-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "scratchrun_exec",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: {
          name: "scratchrun_exec",
          arguments: { runtime: "bash", code: "echo ran" },
          _meta: {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": "not an object",
          },
        },
      }),
    });
    const body = (await res.json()) as { error?: { code: number; message: string } };
    assert.ok(body.error, `an error, got ${JSON.stringify(body)}`);
    assert.equal(body.error.code, -32602);
    assert.equal(h.runs.all().length, before, "nothing ran");
  });

  test("aborting a 2026 call closes its stream, which cancels the call and ends its sandbox", async () => {
    const { client } = await modernClient(keys.c!);
    try {
      const ac = new AbortController();
      const call = client
        .callTool(
          { name: "scratchrun_exec", arguments: { runtime: "bash", code: "sleep 25 # 2026" } },
          { signal: ac.signal },
        )
        .catch((e: unknown) => e);
      const mine = () =>
        h.runs.all().filter((r) => r.transport === "mcp" && r.status === "running");
      await waitFor("the 2026 call to run", () => mine().length === 1);
      ac.abort();
      await call;
      const row = await waitFor("the run to end cancelled", () =>
        h.runs
          .all()
          .find(
            (r) =>
              r.transport === "mcp" &&
              r.status === "finished" &&
              r.exit_reason === "cancelled" &&
              Number(r.finished_at) - Number(r.received_at) < 20_000,
          ),
      );
      assert.ok(row);
    } finally {
      await client.close();
    }
  });

  test("a 2026 task over /mcp is its key's alone, recorded like any call, and read from a 2025 session too", async () => {
    const wireFor = (key: string) =>
      WireClient.connect(
        new ModernHttpTransport(new URL(`${h.api.url}/mcp`), {
          requestInit: { headers: { Authorization: `Bearer ${key}` } },
        }),
      );
    const a = await wireFor(keys.a!);
    const b = await wireFor(keys.b!);
    const legacy = new Client({ name: "api-test", version: "1" });
    await legacy.connect(
      new StreamableHTTPClientTransport(new URL(`${h.api.url}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${keys.a}` } },
      }),
    );
    try {
      const handle = await a.exec({ runtime: "bash", code: "sleep 3; echo tasked # task" });
      assert.equal(handle.resultType, "task", JSON.stringify(handle));
      const taskId = String(handle.taskId);
      const keyA = (await h.keys.list()).find((k) => k.name === "a")!.id;
      const row = h.runs.all().find((r) => r.transport === "mcp" && r.status !== "finished");
      assert.equal(row?.key_id, keyA, "the task's call is a run of key a");
      for (const method of ["tasks/get", "tasks/cancel", "tasks/update"])
        await assert.rejects(b.request(method, { taskId }), (e: WireError) => {
          assert.equal(e.code, -32602, `${method}: ${e.message}`);
          assert.match(e.message, /not found/);
          return true;
        });
      const done = await a.untilFinished(taskId);
      assert.equal(done.status, "completed", "key b's cancel reached nothing");
      const result = done.result as { structuredContent: { stdout: string } };
      assert.equal(result.structuredContent.stdout, "tasked\n");
      const seen = await legacy.experimental.tasks.getTask(taskId);
      assert.equal(seen.status, "completed", "the same key's 2025 session reads it");
    } finally {
      await Promise.all([a.close(), b.close(), legacy.close()]);
    }
  });

  test("records and logs hold no key, env value or output", async () => {
    h.db.pragma("wal_checkpoint(TRUNCATE)");
    const files = readdirSync(h.home).map((f) => join(h.home, f));
    const stores = files.map((f) => readFileSync(f)).concat([Buffer.from(h.logText())]);
    for (const secret of [...secrets, "should-not-run", "call-7-d"])
      for (const [i, data] of stores.entries())
        assert.equal(
          data.includes(secret),
          false,
          `${secret.slice(0, 12)} found in ${files[i] ?? "log"}`,
        );
    assert.match(h.logText(), /"msg":"run finished"/, "the log is not empty");
  });
});
