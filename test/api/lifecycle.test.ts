import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, describe, test } from "node:test";
import { openDatabase, type Db } from "../../src/store/db.js";
import { KeyStore } from "../../src/store/keys.js";
import type { SessionRow } from "../../src/store/sessions.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { REPO_ROOT, startServer, textOf, type McpHarness } from "../helpers/mcp-client.js";
import { CallToolResultSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { runRows, waitFor } from "./harness.js";

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");

interface Served {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  exited: Promise<number | null>;
}

/** Sandbox cgroup names present now (memory hierarchy on v1, the unified one on v2). */
function cgroupNames(): string[] {
  for (const dir of ["/sys/fs/cgroup/memory/scratchrun", "/sys/fs/cgroup/scratchrun"])
    if (existsSync(dir))
      return readdirSync(dir, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name);
  return [];
}

/** Starts `scratchrun serve` as an operator would, on a free loopback port. */
async function serve(
  home: string,
  extra: string[] = [],
  env: Record<string, string> = {},
): Promise<Served> {
  const child = spawn(
    process.execPath,
    [CLI, "serve", "--host", "127.0.0.1", "--port", "0", ...extra],
    {
      env: { ...process.env, SCRATCHRUN_HOME: home, SCRATCHRUN_ISOLATION: "namespace", ...env },
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const url = await waitFor(
    "the server to listen",
    () => /serving on (http:\/\/\S+)/.exec(err)?.[1],
    60_000,
  );
  return { child, url, stderr: () => err, exited };
}

describe("lifecycle: crash recovery, graceful shutdown, remote mode", () => {
  let home: string;
  let db: Db;
  let key: string;
  let base: HostSnapshot;

  before(async () => {
    base = snapshot();
    home = mkdtempSync(join(tmpdir(), "sr-api-life-"));
    db = openDatabase(home);
    key = (await new KeyStore(db).create("life")).key;
  });

  after(async () => {
    db.close();
    rmSync(home, { recursive: true, force: true });
    await assertNoLeaks(base);
  });

  test("an error nothing caught: serve logs it, destroys every sandbox, exits 1", async () => {
    const inject = join(REPO_ROOT, "dist/test/helpers/inject-fault.js");
    const before = snapshot();
    const s = await serve(home, [], { NODE_OPTIONS: `--import=${pathToFileURL(inject).href}` });
    await waitFor(
      "the warm pool's first jail",
      () => snapshot().cgroups.some((c) => !before.cgroups.includes(c)) || undefined,
      60_000,
    );
    s.child.kill("SIGUSR2");
    const code = await s.exited;
    await assertNoLeaks(before);
    assert.equal(code, 1);
    assert.match(s.stderr(), /internal error: closing/);
    assert.match(s.stderr(), /injected fault/);
  });

  test("kill -9 mid-run, then restart: the sandbox is reaped and the run marked failed", async () => {
    const first = await serve(home);
    const call = fetch(`${first.url}/v1/exec`, {
      method: "POST",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify({ runtime: "bash", code: "sleep 28" }),
    }).catch((e: unknown) => e);
    const runs = runRows(db);
    const run = await waitFor("the run to be running", () =>
      runs.all().find((r) => r.status === "running"),
    );
    const { name } = await waitFor(
      "its sandbox to be recorded",
      () => db.prepare("SELECT name FROM sandboxes").get() as { name: string } | undefined,
    );
    // The call's sandbox and the warm pool's jails (the one being refilled may not be recorded
    // yet when the server dies: the restart must find it all the same).
    const before = cgroupNames();
    first.child.kill("SIGKILL");
    await first.exited;
    await call;
    const dir = `/sys/fs/cgroup/memory/scratchrun/${name}`;
    assert.ok(
      existsSync(dir) || existsSync(`/sys/fs/cgroup/scratchrun/${name}`),
      "the dead server left its sandbox cgroup behind (else this test proves nothing)",
    );

    const second = await serve(home);
    assert.equal(existsSync(dir), false, "the restart reaped the orphaned sandbox");
    const left = before.filter((n) => cgroupNames().includes(n));
    assert.deepEqual(left, [], "every cgroup of the dead server is gone");
    const row = runs.get(run.id)!;
    assert.equal(row.status, "failed");
    assert.equal(row.error_code, "INTERRUPTED");
    assert.match(second.stderr(), /"interrupted_runs":1/);

    // Graceful shutdown: a call in flight at SIGTERM still gets its result.
    const inflight = fetch(`${second.url}/v1/exec`, {
      method: "POST",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify({ runtime: "bash", code: "sleep 1; echo drained" }),
    });
    await waitFor("the call to run", () => runs.all().some((r) => r.status === "running"));
    second.child.kill("SIGTERM");
    const res = await inflight;
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { stdout: string }).stdout, "drained\n");
    assert.equal(await second.exited, 0);
    assert.equal(existsSync(join(home, "server.pid")), false, "the lock is released");
  });

  test("sessions: kill -9 leaves their records open until the restart closes them as lost (their id then answers SESSION_LOST); SIGTERM ends them and closes theirs as shutdown", async () => {
    const other = (await new KeyStore(db).create("life-other")).key;
    const sessions = () =>
      db.prepare("SELECT * FROM sessions ORDER BY started_at").all() as SessionRow[];
    const post = (url: string, path: string, body: unknown, bearer = key) =>
      fetch(`${url}${path}`, {
        method: "POST",
        headers: { Authorization: `Bearer ${bearer}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    const startIn = async (url: string) => {
      const res = await post(url, "/v1/sessions", { runtime: "bash" });
      assert.equal(res.status, 201);
      const { session_id } = (await res.json()) as { session_id: string };
      const ran = await post(url, "/v1/exec", {
        runtime: "bash",
        code: "echo kept > /tmp/f; cat /tmp/f",
        session_id,
      });
      assert.equal(ran.status, 200);
      assert.equal(((await ran.json()) as { stdout: string }).stdout, "kept\n");
      return session_id;
    };
    const before = sessions().length;

    const first = await serve(home);
    const killed = await startIn(first.url);
    first.child.kill("SIGKILL");
    await first.exited;
    const open = sessions().slice(before);
    assert.equal(open.length, 1);
    assert.equal(open[0]!.ended_at, null, "a killed server closes nothing");

    const second = await serve(home);
    assert.match(second.stderr(), /"lost_sessions":1/);
    const lost = db.prepare("SELECT * FROM sessions WHERE id = ?").get(open[0]!.id) as SessionRow;
    assert.deepEqual([lost.end_reason, lost.calls], ["lost", 1]);
    const again = await post(second.url, "/v1/exec", {
      runtime: "bash",
      code: "cat /tmp/f",
      session_id: killed,
    });
    assert.equal(again.status, 410);
    const body = (await again.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, "SESSION_LOST");
    assert.match(body.error.message, /lost.*Start a new session/);
    const foreign = await post(
      second.url,
      "/v1/exec",
      { runtime: "bash", code: "cat /tmp/f", session_id: killed },
      other,
    );
    assert.equal(foreign.status, 404, "another key learns nothing of it");

    const live = await startIn(second.url);
    second.child.kill("SIGTERM");
    assert.equal(await second.exited, 0);
    const closed = sessions().slice(before + 1);
    assert.equal(closed.length, 1);
    assert.deepEqual([closed[0]!.end_reason, closed[0]!.calls], ["shutdown", 1]);
    assert.ok(closed[0]!.ended_at! >= closed[0]!.started_at);
    for (const id of [killed, live])
      assert.ok(!JSON.stringify(sessions()).includes(id), "records keep no session_id");
  });

  test("remote mode: scratchrun-mcp with SCRATCHRUN_URL lists the session tools and forwards them to the service's REST API", async () => {
    const server = await serve(home);
    let remote: McpHarness | undefined;
    try {
      remote = await startServer({ SCRATCHRUN_URL: server.url, SCRATCHRUN_API_KEY: key });
      const client = remote.client;
      const names = (await client.listTools()).tools.map((t) => t.name);
      assert.ok(names.includes("scratchrun_session_start"), names.join());
      assert.ok(names.includes("scratchrun_session_end"), names.join());
      const tool = async (name: string, args: Record<string, unknown>) =>
        (await client.callTool({ name, arguments: args }, CallToolResultSchema, {
          timeout: 120_000,
        })) as CallToolResult;
      const recordsBefore = (
        db.prepare("SELECT count(*) AS n FROM sessions").get() as { n: number }
      ).n;

      // Refused here, before anything reaches the server: the key's policy, as for a call.
      const bad = await tool("scratchrun_session_start", { runtime: "cobol" });
      assert.equal(bad.isError, true);
      assert.match(textOf(bad), /^INVALID_INPUT: .*runtime/);

      const begun = await tool("scratchrun_session_start", { runtime: "python3.12" });
      assert.ok(!begun.isError, textOf(begun));
      const sid = (begun.structuredContent as { session_id: string }).session_id;
      const first = await remote.call({ runtime: "python3.12", code: "x = 41", session_id: sid });
      assert.ok(!first.isError, textOf(first));
      const second = await remote.call({
        runtime: "python3.12",
        code: "print(x + 1)",
        session_id: sid,
      });
      assert.equal((second.structuredContent as { stdout: string }).stdout, "42\n");
      assert.equal(
        (second.structuredContent as { session: { calls: number } }).session.calls,
        2,
        "the interpreter stayed on the server between the forwarded calls",
      );
      const ended = await tool("scratchrun_session_end", { session_id: sid });
      assert.ok(!ended.isError, textOf(ended));
      assert.equal((ended.structuredContent as { calls: number }).calls, 2);
      const after = await remote.call({ runtime: "python3.12", code: "print(x)", session_id: sid });
      assert.equal(after.isError, true);
      assert.match(textOf(after), /SESSION_NOT_FOUND/);
      const again = await tool("scratchrun_session_end", { session_id: sid });
      assert.equal(again.isError, true);
      assert.match(textOf(again), /^SESSION_NOT_FOUND: /);

      const records = db
        .prepare("SELECT * FROM sessions ORDER BY started_at")
        .all()
        .slice(recordsBefore) as SessionRow[];
      assert.equal(records.length, 1, "the refused start recorded nothing");
      assert.deepEqual(
        [records[0]!.runtime, records[0]!.transport, records[0]!.end_reason, records[0]!.calls],
        ["python3.12", "rest", "ended", 2],
      );
    } finally {
      await remote?.close();
      server.child.kill("SIGTERM");
      await server.exited;
    }
  });

  test("remote mode: scratchrun-mcp with SCRATCHRUN_URL gives the embedded result", async () => {
    // Both servers get the same network setting: with SCRATCHRUN_NETWORK unset, each would offer
    // what this host allows (public where net.ipv4.ip_forward=1), so their tool descriptions would
    // differ with the host, not with the mode.
    const server = await serve(home, [], { SCRATCHRUN_NETWORK: "none" });
    let remote: McpHarness | undefined;
    let embedded: McpHarness | undefined;
    try {
      remote = await startServer({ SCRATCHRUN_URL: server.url, SCRATCHRUN_API_KEY: key });
      embedded = await startServer({
        SCRATCHRUN_ISOLATION: "namespace",
        SCRATCHRUN_NETWORK: "none",
      });
      const args = {
        runtime: "python3.12",
        code: "import sys; print('out'); print('err', file=sys.stderr); open('/tmp/r.svg','w').write('<svg xmlns=\"http://www.w3.org/2000/svg\"/>'); open('/tmp/t.txt','w').write('text'); sys.exit(3)",
        return_files: ["/tmp/r.svg", "/tmp/t.txt", "/tmp/none"],
        network: "none",
      };
      const [r, e] = await Promise.all([remote.call(args), embedded.call(args)]);
      const strip = (x: typeof r) => {
        // Durations differ, and so does each answer's random fence tag (docs/decisions/0007).
        const text = JSON.stringify(x).replace(/ · \d+ ms · /g, " · ");
        const c = JSON.parse(text.replace(/ [0-9a-f]{12} ---/g, " TAG ---")) as typeof r;
        delete (c.structuredContent as { duration_ms?: number } | undefined)?.duration_ms;
        return c;
      };
      assert.equal(r.isError, false);
      assert.match(
        JSON.stringify(r.content),
        /--- stdout [0-9a-f]{12} ---/,
        "remote text is fenced",
      );
      assert.deepEqual(strip(r), strip(e));
      assert.equal((r.structuredContent as { exit_code: number }).exit_code, 3);
      const [rt, et] = await Promise.all([remote.client.listTools(), embedded.client.listTools()]);
      assert.deepEqual(rt, et, "the same tools are listed");
      const bad = await remote.call({ runtime: "bash" });
      const badLocal = await embedded.call({ runtime: "bash" });
      assert.deepEqual(bad, badLocal, "validation errors are identical too");
    } finally {
      await remote?.close();
      await embedded?.close();
      server.child.kill("SIGTERM");
      await server.exited;
    }
  });
});
