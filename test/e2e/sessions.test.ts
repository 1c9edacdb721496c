import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { CallToolResultSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { startServer, textOf, type McpHarness } from "../helpers/mcp-client.js";
import { running } from "../helpers/procs.js";

/**
 * Sessions through a real MCP client over stdio, on each backend (SESSION-* in
 * docs/SPECIFICATION.md): state kept across calls (variables, imports, files, figures), a crashed
 * interpreter replaced in the same files, isolation from fresh calls and other sessions, bad
 * input refused before anything runs, the idle and total lifetimes, ending a session under a
 * running call, a session paused between its calls, the memory a caller's and the server's
 * sessions may hold, the server's SIGTERM and kill -9, and nothing left on the host once sessions
 * end.
 */
interface Info {
  session_id: string;
  runtime: string;
  memory_mb: number;
  expires_at: string;
  calls: number;
}
interface Result {
  stdout: string;
  stderr: string;
  exit_code: number | null;
  exit_reason: string;
  files: { path: string; status: string }[];
  message?: string;
  session?: { session_id: string; calls: number; interpreter: string; ended?: boolean };
}

for (const backend of TEST_BACKENDS) {
  describe(`sessions over stdio [${backend}]`, () => {
    let mcp: McpHarness;
    let base: HostSnapshot;
    before(async () => {
      base = snapshot();
      mcp = await startServer({
        SCRATCHRUN_ISOLATION: backend,
        SCRATCHRUN_POOL_SIZE: "0",
        SCRATCHRUN_SESSIONS_PER_KEY_MEMORY_MB: "640",
      });
    });
    after(async () => {
      await mcp?.close();
      await assertNoLeaks(base, 10_000);
    });

    const tool = async (name: string, args: Record<string, unknown>) =>
      (await mcp.client.callTool({ name, arguments: args }, CallToolResultSchema, {
        timeout: 120_000,
      })) as CallToolResult;
    const start = async (args: Record<string, unknown>): Promise<Info> => {
      const r = await tool("scratchrun_session_start", args);
      assert.ok(!r.isError, textOf(r));
      return r.structuredContent as unknown as Info;
    };
    const end = (id: string) => tool("scratchrun_session_end", { session_id: id });
    const run = async (args: Record<string, unknown>): Promise<Result> => {
      const r = await mcp.call(args);
      assert.ok(!r.isError, textOf(r));
      return r.structuredContent as unknown as Result;
    };
    const refusal = async (args: Record<string, unknown>): Promise<string> => {
      const r = await mcp.call(args);
      assert.equal(r.isError, true, JSON.stringify(r.structuredContent));
      return textOf(r);
    };

    test("the session tools are listed, and a session id is 128 random bits", async () => {
      const { tools } = await mcp.client.listTools();
      const names = tools.map((t) => t.name);
      assert.ok(names.includes("scratchrun_session_start"), names.join());
      assert.ok(names.includes("scratchrun_session_end"), names.join());
      const s = await start({ runtime: "bash" });
      assert.match(s.session_id, /^[A-Za-z0-9_-]{22}$/);
      assert.ok(Date.parse(s.expires_at) > Date.now() + 50 * 60_000, "an hour by default");
      const ended = await end(s.session_id);
      assert.ok(!ended.isError, textOf(ended));
    });

    test("python3.12 keeps variables, imports, functions and files from call to call", async () => {
      const s = await start({ runtime: "python3.12" });
      const id = s.session_id;
      const first = await run({
        runtime: "python3.12",
        session_id: id,
        code: "import json\nx = 41\ndef f(v):\n    return v + 1\nopen('kept.txt', 'w').write('on disk')\nprint('set')",
      });
      assert.equal(first.stdout, "set\n", first.stderr);
      assert.equal(first.session?.interpreter, "fresh");
      assert.equal(first.session?.calls, 1);
      const second = await run({
        runtime: "python3.12",
        session_id: id,
        code: "print(f(x), json.dumps([1]), open('kept.txt').read(), __name__)",
      });
      assert.equal(second.stdout, "42 [1] on disk __main__\n", second.stderr);
      assert.equal(second.session?.interpreter, "kept");
      assert.equal(second.session?.calls, 2);
      // An exception ends the cell with status 1 and keeps the interpreter.
      const failed = await run({
        runtime: "python3.12",
        session_id: id,
        code: "raise KeyError('k')",
      });
      assert.equal(failed.exit_code, 1);
      assert.match(failed.stderr, /KeyError: 'k'/);
      assert.doesNotMatch(failed.stderr, /session\.py/, "no frame of the kernel in the traceback");
      const still = await run({ runtime: "python3.12", session_id: id, code: "print(x)" });
      assert.equal(still.stdout, "41\n");
      assert.equal(still.session?.interpreter, "kept");
      await end(id);
    });

    // A session that waits out its lifetime beside one that imports matplotlib, at once: two
    // sessions of 256 MB fit the caller's 3 and 640 MB, and neither test counts the host's
    // sandboxes (the tests below that do run alone).
    describe("a long import beside a session's lifetime", { concurrency: true }, () => {
      test("python3.11 keeps a matplotlib figure: shown at its cell's end, changed and saved later as an image", async () => {
        const { session_id } = await start({ runtime: "python3.11" });
        // A cold import of matplotlib in a booted TCG guest takes about the default 10 s under load.
        const shown = await mcp.call({
          runtime: "python3.11",
          session_id,
          code: "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 3, 2]);",
          timeout_ms: 30_000,
        });
        const first = shown.structuredContent as unknown as Result;
        assert.equal(first.exit_reason, "ok", first.stderr);
        // As a notebook's inline backend: the figure left open is shown at the cell's end, then
        // closed in pyplot (docs/decisions/0017-outputs.md); the cell's variables keep it.
        assert.equal(shown.content.filter((c) => c.type === "image").length, 1, textOf(shown));
        const r = await mcp.call({
          runtime: "python3.11",
          session_id,
          code: "ax.set_title('later')\nfig.savefig('/tmp/plot.png')",
          return_files: ["/tmp/plot.png"],
        });
        assert.ok(!r.isError, textOf(r));
        const image = r.content.find((c) => c.type === "image");
        assert.ok(image && image.type === "image" && image.mimeType === "image/png", textOf(r));
        await end(session_id);
      });

      test("a session ends at its total lifetime, even under a running call", async () => {
        const lifetimeMs = backend === "microvm" ? 10_000 : 3000;
        const { session_id, expires_at } = await start({
          runtime: "bash",
          lifetime_ms: lifetimeMs,
        });
        assert.ok(Date.parse(expires_at) <= Date.now() + lifetimeMs, expires_at);
        const called = Date.now();
        const r = await run({ runtime: "bash", session_id, code: "sleep 60", timeout_ms: 30_000 });
        assert.equal(r.exit_reason, "cancelled", JSON.stringify(r));
        assert.ok(Date.now() - called < 25_000, "ended by the session's lifetime, not the call's");
        assert.match(
          await refusal({ runtime: "bash", session_id, code: "true" }),
          /^SESSION_NOT_FOUND/,
        );
      });
    });

    // Two sessions of their own, at once (as above).
    describe("a python session's crash beside a node session", { concurrency: true }, () => {
      test("a call that ends the interpreter keeps the files; the next one gets a fresh interpreter", async () => {
        const { session_id } = await start({ runtime: "python3.11" });
        await run({
          runtime: "python3.11",
          session_id,
          code: "y = 7\nopen('/tmp/survives', 'w').write('yes')",
        });
        const crash = await run({
          runtime: "python3.11",
          session_id,
          code: "import os\nos._exit(3)",
        });
        assert.equal(crash.exit_code, 3);
        const after = await run({
          runtime: "python3.11",
          session_id,
          code: "print(open('/tmp/survives').read())\nprint('y' in globals())",
        });
        assert.equal(after.stdout, "yes\nFalse\n", after.stderr);
        assert.equal(after.session?.interpreter, "fresh");
        // A timeout ends the interpreter the same way, and the session goes on.
        const slow = await run({
          runtime: "python3.11",
          session_id,
          code: "import time\nz = 1\ntime.sleep(30)",
          timeout_ms: 1500,
        });
        assert.equal(slow.exit_reason, "timeout");
        const next = await run({
          runtime: "python3.11",
          session_id,
          code: "print('z' in globals())",
        });
        assert.equal(next.stdout, "False\n");
        assert.equal(next.session?.interpreter, "fresh");
        await end(session_id);
      });

      test("node20 keeps top-level bindings and required modules; a callback's throw is the call's status", async () => {
        const { session_id } = await start({ runtime: "node20" });
        await run({
          runtime: "node20",
          session_id,
          code: "const base = 40; let count = 1; const path = require('path');",
        });
        const r = await run({
          runtime: "node20",
          session_id,
          code: "count++; setTimeout(() => console.log(base + count, path.basename('/a/b.txt')), 50);",
        });
        assert.equal(r.stdout, "42 b.txt\n", "the call waits for its timer");
        assert.equal(r.session?.interpreter, "kept");
        const thrown = await run({
          runtime: "node20",
          session_id,
          code: "setTimeout(() => { throw new Error('late') }, 10);",
        });
        assert.equal(thrown.exit_code, 1);
        assert.match(thrown.stderr, /Error: late/);
        const still = await run({ runtime: "node20", session_id, code: "console.log(count)" });
        assert.equal(still.stdout, "2\n");
        await end(session_id);
      });
    });

    test("bash calls share the session's files; each call is a new shell", async () => {
      const { session_id } = await start({ runtime: "bash" });
      await run({ runtime: "bash", session_id, code: "mkdir -p work && echo 1 > work/n; V=set" });
      const r = await run({
        runtime: "bash",
        session_id,
        code: 'cat work/n; echo "V=${V:-unset}"; pwd',
        files: { "work/n": "2\n" },
      });
      assert.equal(
        r.stdout,
        "2\nV=unset\n/home/user\n",
        "a later call's file replaces the earlier",
      );
      assert.equal(r.session?.interpreter, "none");
      await end(session_id);
    });

    test("a session's files and variables are seen by no fresh call and no other session", async () => {
      const a = await start({ runtime: "python3.12" });
      const b = await start({ runtime: "python3.12" });
      await run({
        runtime: "python3.12",
        session_id: a.session_id,
        code: "secret = 'a-only'\nopen('/home/user/a.txt', 'w').write('a')",
      });
      const other = await run({
        runtime: "python3.12",
        session_id: b.session_id,
        code: "import os\nprint(os.path.exists('/home/user/a.txt'), 'secret' in globals())",
      });
      assert.equal(other.stdout, "False False\n");
      const fresh = await run({
        runtime: "python3.12",
        code: "import os\nprint(os.path.exists('/home/user/a.txt'))",
      });
      assert.equal(fresh.stdout, "False\n");
      assert.equal(fresh.session, undefined, "a call without session_id is a plain call");
      await end(a.session_id);
      await end(b.session_id);
    });

    test("bad input is refused with a clear error before anything runs", async () => {
      const { session_id } = await start({ runtime: "python3.12", memory_mb: 128 });
      const unknown = await refusal({
        runtime: "python3.12",
        session_id: "AAAAAAAAAAAAAAAAAAAAAA",
        code: "print(1)",
      });
      assert.match(unknown, /^SESSION_NOT_FOUND: session_id: no such session/);
      assert.match(
        await refusal({ runtime: "python3.12", session_id: "short", code: "print(1)" }),
        /INVALID_INPUT: .*session_id: not a session id/,
      );
      assert.match(
        await refusal({ runtime: "node20", session_id, code: "1" }),
        /INVALID_INPUT: .*runtime: the session runs python3.12, not node20/,
      );
      assert.match(
        await refusal({ runtime: "python3.12", session_id, code: "1", memory_mb: 256 }),
        /INVALID_INPUT: .*memory_mb: the session's sandbox has 128 MB/,
      );
      const startBad = await tool("scratchrun_session_start", { runtime: "cobol" });
      assert.equal(startBad.isError, true);
      assert.match(textOf(startBad), /INVALID_INPUT: .*runtime/);
      const endBad = await end("AAAAAAAAAAAAAAAAAAAAAA");
      assert.equal(endBad.isError, true);
      assert.match(textOf(endBad), /SESSION_NOT_FOUND/);
      // Nothing above ran: the session's first call is still its first.
      const r = await run({ runtime: "python3.12", session_id, code: "print(1)" });
      assert.equal(r.session?.calls, 1);
      await end(session_id);
      assert.match(
        await refusal({ runtime: "python3.12", session_id, code: "print(1)" }),
        /^SESSION_NOT_FOUND/,
        "an ended session is gone",
      );
    });

    test("ending a session cancels the call running in it, and a session ends when idle", async () => {
      const { session_id } = await start({ runtime: "bash" });
      const running = mcp.call({
        runtime: "bash",
        session_id,
        code: "sleep 30",
        timeout_ms: 30_000,
      });
      await new Promise((r) => setTimeout(r, 1500));
      const started = Date.now();
      const ended = await end(session_id);
      assert.ok(!ended.isError, textOf(ended));
      const r = (await running).structuredContent as unknown as Result;
      assert.equal(r.exit_reason, "cancelled", JSON.stringify(r));
      assert.ok(Date.now() - started < 15_000, "the call did not run on to its timeout");

      const idle = await start({ runtime: "bash", idle_timeout_ms: 1500 });
      await run({ runtime: "bash", session_id: idle.session_id, code: "true" });
      await new Promise((r) => setTimeout(r, 3000));
      assert.match(
        await refusal({ runtime: "bash", session_id: idle.session_id, code: "true" }),
        /^SESSION_NOT_FOUND/,
      );
      await assertNoLeaks(base, 10_000, { whileServing: true });
    });

    test("between calls the session is paused: what a cell left running does not run", async (t) => {
      const before = snapshot();
      const { session_id } = await start({ runtime: "python3.12" });
      const sandbox = sessionOnHost(before);
      assert.equal(await sandbox.paused(), true, "paused from its start until its first call");
      // A thread the cell leaves running counts every 10 ms; the cell measures its rate.
      const first = await run({
        runtime: "python3.12",
        session_id,
        code: TICKER,
      });
      const counted = Number(first.stdout);
      assert.ok(counted > 5, `the ticker ran during the call (${first.stdout}${first.stderr})`);
      assert.equal(await sandbox.paused(), true, "paused once the call is answered");
      const waitMs = backend === "microvm" ? 4000 : 2000;
      const cpu = sandbox.cpuTicks();
      await sleep(waitMs);
      assert.equal(await sandbox.paused(), true);
      if (cpu !== null) {
        const used = sandbox.cpuTicks()! - cpu;
        assert.ok(used <= waitMs / 200, `QEMU used ${used} CPU ticks while the VM was paused`);
      }
      const second = await run({
        runtime: "python3.12",
        session_id,
        code: "import time\nprint(ticks, time.time())",
      });
      const [ticks, clock] = second.stdout.trim().split(" ").map(Number);
      // A microVM's clock stood still while it was paused (waitMs and more): each call sets it.
      const behind = Date.now() / 1000 - clock!;
      t.diagnostic(`the sandbox's clock is ${behind} s behind the host's`);
      assert.ok(behind > -1 && behind < 2, `the sandbox's clock is ${behind} s behind the host's`);
      const between = ticks! - counted;
      // Running, the ticker would have counted about counted / 0.5 s * waitMs meanwhile.
      const unpaused = (counted / 500) * waitMs;
      assert.ok(
        between < unpaused / 2,
        `the ticker counted ${between} between calls; unpaused it would count about ${unpaused}`,
      );
      assert.equal(second.session?.interpreter, "kept");
      await end(session_id);
    });

    test("a caller's sessions hold at most SCRATCHRUN_SESSIONS_PER_KEY_MEMORY_MB together", async () => {
      const a = await start({ runtime: "bash", memory_mb: 256 });
      const cgroups = snapshot().cgroups;
      const over = await tool("scratchrun_session_start", { runtime: "bash", memory_mb: 512 });
      assert.equal(over.isError, true, textOf(over));
      assert.match(
        textOf(over),
        /^BUSY: your sessions hold 256 MB of the 640 MB they may hold together; this session's 512 MB does not fit/,
      );
      assert.deepEqual(
        snapshot().cgroups.filter((c) => !cgroups.includes(c)),
        [],
        "refused before any sandbox started",
      );
      await end(a.session_id);
      const b = await start({ runtime: "bash", memory_mb: 512 });
      await end(b.session_id);
    });
  });

  describe(`sessions and the server's life [${backend}]`, () => {
    let base: HostSnapshot;
    let second: McpHarness | undefined;
    before(() => {
      base = snapshot();
    });
    after(async () => {
      await second?.close();
      await assertNoLeaks(base, 10_000);
    });
    const env = { SCRATCHRUN_ISOLATION: backend, SCRATCHRUN_POOL_SIZE: "0" };
    const startIn = async (mcp: McpHarness, args: Record<string, unknown>) => {
      const r = (await mcp.client.callTool(
        { name: "scratchrun_session_start", arguments: args },
        CallToolResultSchema,
        { timeout: 120_000 },
      )) as CallToolResult;
      return r;
    };
    const open = async (mcp: McpHarness) => {
      const r = await startIn(mcp, { runtime: "python3.12" });
      assert.ok(!r.isError, textOf(r));
      const { session_id } = r.structuredContent as unknown as Info;
      const cell = await mcp.call({ runtime: "python3.12", session_id, code: "x = 1\nprint(x)" });
      assert.ok(!cell.isError, textOf(cell));
    };

    test("kill -9 of the server, then a restart: its sessions' sandboxes are reaped", async () => {
      const first = await startServer(env);
      await open(first);
      const pid = first.serverPid();
      process.kill(pid, "SIGKILL");
      await until(() => !running(pid));
      await first.close().catch(() => {});
      await sleep(1000);
      const left = snapshot();
      const leftovers = (Object.keys(left) as (keyof HostSnapshot)[]).filter((k) =>
        left[k].some((x) => !base[k].includes(x)),
      );
      assert.ok(
        leftovers.length > 0,
        "the dead server left its session behind (else this proves nothing)",
      );
      second = await startServer({ ...env, SCRATCHRUN_SESSIONS_MEMORY_MB: "300" });
      await assertNoLeaks(base, 10_000);
    });

    test("the server's sessions hold at most SCRATCHRUN_SESSIONS_MEMORY_MB together", async () => {
      const mcp = second!;
      const alone = await startIn(mcp, { runtime: "python3.12", memory_mb: 512 });
      assert.equal(alone.isError, true);
      assert.match(
        textOf(alone),
        /^INVALID_INPUT: memory_mb: 512 MB is more than the 300 MB the server's sessions may hold together/,
      );
      await open(mcp);
      const cgroups = snapshot().cgroups;
      const more = await startIn(mcp, { runtime: "bash", memory_mb: 64 });
      assert.equal(more.isError, true);
      assert.match(textOf(more), /^BUSY: the server's sessions hold 256 MB of the 300 MB/);
      assert.deepEqual(
        snapshot().cgroups.filter((c) => !cgroups.includes(c)),
        [],
        "refused before any sandbox started",
      );
    });

    test("SIGTERM ends the server's sessions and leaves nothing behind", async () => {
      const mcp = second!;
      const pid = mcp.serverPid();
      process.kill(pid, "SIGTERM");
      await until(() => !running(pid));
      await mcp.close().catch(() => {});
      second = undefined;
      await assertNoLeaks(base, 10_000);
    });
  });
}

/** Python (after a cell's imports) that says how its interpreter was started (as preimport.test). */
const WHO = [
  "def _who():",
  "    a = open('/proc/self/cmdline', 'rb').read().split(b'\\0')",
  "    if len(a) > 3 and a[2].startswith(b'modules='): return 'preimported'",
  "    return 'prestarted' if a[1].endswith(b'prestart.py') else 'fresh'",
].join("\n");

// A microVM session is a clone of the template a call of its size clones (SESSION-CLONE): its
// first kernel is the clone's pre-started interpreter when a one-off call of that cell would have
// got it, else a fresh one.
if (TEST_BACKENDS.includes("microvm"))
  describe("sessions in template clones [microvm]", () => {
    let mcp: McpHarness;
    let base: HostSnapshot;
    before(async () => {
      base = snapshot();
      mcp = await startServer({
        SCRATCHRUN_ISOLATION: "microvm",
        SCRATCHRUN_POOL_SIZE: "python3.11=1",
      });
    });
    after(async () => {
      await mcp?.close();
      await assertNoLeaks(base, 10_000);
    });
    const tool = async (name: string, args: Record<string, unknown>) =>
      (await mcp.client.callTool({ name, arguments: args }, CallToolResultSchema, {
        timeout: 240_000,
      })) as CallToolResult;
    const cell = async (args: Record<string, unknown>): Promise<Result> => {
      const r = await mcp.call({ runtime: "python3.11", timeout_ms: 30_000, ...args });
      assert.ok(!r.isError, textOf(r));
      const s = r.structuredContent as unknown as Result;
      assert.equal(s.exit_reason, "ok", s.stderr);
      return s;
    };
    const session = async () => {
      const r = await tool("scratchrun_session_start", { runtime: "python3.11" });
      assert.ok(!r.isError, textOf(r));
      return (r.structuredContent as unknown as Info).session_id;
    };

    test("a first cell that imports the stack gets the pre-imported interpreter; others a fresh one", async () => {
      // The pre-imported template is built once a call reaches a clone of it.
      let who = "";
      for (let i = 0; i < 180 && who !== "preimported"; i++) {
        who = (await cell({ code: `import numpy\n${WHO}\nprint(_who())` })).stdout.trim();
        if (who !== "preimported") await sleep(1000);
      }
      assert.equal(who, "preimported", "no call reached a pre-imported interpreter");

      const stack = await session();
      const first = await cell({
        session_id: stack,
        code: `import numpy as np\nimport sys\n${WHO}\nx = np.arange(3)\nprint(_who(), 'pandas' in sys.modules)`,
      });
      assert.equal(first.stdout, "preimported True\n");
      assert.equal(first.session?.interpreter, "fresh");
      const next = await cell({ session_id: stack, code: "print(_who(), x.sum())" });
      assert.equal(next.stdout, "preimported 3\n");
      assert.equal(next.session?.interpreter, "kept");
      await tool("scratchrun_session_end", { session_id: stack });

      // A first cell a call would run in a plain interpreter: the session's kernel is fresh.
      const plain = await session();
      const own = await cell({
        session_id: plain,
        code: `import sys\n${WHO}\nprint(_who(), 'pandas' in sys.modules)`,
      });
      assert.equal(own.stdout, "fresh False\n");
      await tool("scratchrun_session_end", { session_id: plain });

      // A first cell that sets what the imports read (the agent's check, as for a call): fresh,
      // and its import reads the cell's value.
      const env = await session();
      const svg = await cell({
        session_id: env,
        env: { MPLBACKEND: "svg" },
        code: `import matplotlib\n${WHO}\nprint(_who(), matplotlib.get_backend())`,
      });
      assert.equal(svg.stdout, "fresh svg\n");
      await tool("scratchrun_session_end", { session_id: env });
    });
  });

/** A python cell: a thread counting every 10 ms, kept running; the cell prints its count after 0.5 s. */
const TICKER = [
  "import threading, time",
  "ticks = 0",
  "def tick():",
  "    global ticks",
  "    while True:",
  "        ticks += 1",
  "        time.sleep(0.01)",
  "threading.Thread(target=tick, daemon=True).start()",
  "time.sleep(0.5)",
  "print(ticks)",
].join("\n");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(done: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) assert.fail("timed out waiting");
    await sleep(50);
  }
}

/**
 * The one session sandbox started since `before`, as the host sees it: whether it is paused (a
 * namespace jail's cgroup frozen, from the freezer's own files; a VM's QEMU using no CPU is
 * measured apart) and its QEMU's CPU time (null for a jail).
 */
function sessionOnHost(before: HostSnapshot): {
  paused(): Promise<boolean>;
  cpuTicks(): number | null;
} {
  const now = snapshot();
  const qemu = now.qemuProcesses.filter((p) => !before.qemuProcesses.includes(p));
  if (qemu.length > 0) {
    assert.equal(qemu.length, 1, qemu.join("\n"));
    const pid = qemu[0]!.split(" ")[0]!;
    const cpuTicks = () => {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      return Number(rest[11]) + Number(rest[12]); // utime + stime
    };
    // A paused VM is told by its CPU time alone: it does not grow over half a second.
    return {
      paused: async () => {
        const a = cpuTicks();
        await sleep(500);
        return cpuTicks() - a <= 2;
      },
      cpuTicks,
    };
  }
  const fresh = now.cgroups.filter((c) => !before.cgroups.includes(c));
  const v1 = fresh.find((d) => d.startsWith("/sys/fs/cgroup/freezer/"));
  const v2 = fresh.find((d) => d.startsWith("/sys/fs/cgroup/scratchrun/"));
  assert.ok(v1 ?? v2, `the session's jail has a freezer cgroup: ${fresh.join(", ")}`);
  return {
    paused: async () =>
      v1
        ? readFileSync(join(v1, "freezer.state"), "utf8").trim() === "FROZEN"
        : /^frozen 1$/m.test(readFileSync(join(v2!, "cgroup.events"), "utf8")),
    cpuTicks: () => null,
  };
}
