/**
 * Starting beside a running server (issue 46). An ordinary user starting local mode (the uid-first
 * fix): the refusal comes first, before anything reads the host. A root stdio server with a pooled sandbox runs meanwhile; the user
 * (made by the test with useradd) starts `scratchrun-mcp` and calls the orphan reaper directly.
 * Each says it must run as root, the reaper before it looks at one cgroup, and the root server's
 * sandboxes are exactly as they were. (The seconds each took are printed, not asserted: before the
 * fix the stdio start waited 10 s per live cgroup it took for an orphan.) And a root server on
 * another Node binary: its start reaps orphans, and takes none of the running server's sandboxes
 * for one (ownership by process identity, src/jail/servers.ts, not by executable path).
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { assertNoLeaks, SANDBOX_UID_MAX, SANDBOX_UID_MIN, snapshot } from "../helpers/leaks.js";
import { MCP_BIN, REPO_ROOT, startServer, type McpHarness } from "../helpers/mcp-client.js";

/** Node 22 from the test legs' package (setup installs it): another binary than this test's. */
const OTHER_NODE = join(REPO_ROOT, "test/node-legs/node_modules/node22/bin/node");

const USER = `sr-nonroot-${randomBytes(3).toString("hex")}`;

/** Every live process of a sandbox (a jail's uid): pid → start time, to see none replaced. */
function sandboxProcesses(): Map<number, string> {
  const out = new Map<number, string>();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${d}/status`, "utf8"))?.[1]);
      if (uid < SANDBOX_UID_MIN || uid >= SANDBOX_UID_MAX) continue;
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      out.set(Number(d), stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "");
    } catch {
      // gone
    }
  }
  return out;
}

/** Runs `args` with node as the test user; its stderr, exit status and seconds. */
function asUser(
  uid: number,
  gid: number,
  args: string[],
): Promise<{ stderr: string; stdout: string; code: number | null; seconds: number }> {
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, {
      uid,
      gid,
      cwd: "/",
      env: { PATH: "/usr/bin:/bin", HOME: "/nonexistent" },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stderr = "";
    let stdout = "";
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.on("error", reject);
    child.on("close", (code) =>
      resolve({
        stderr,
        stdout,
        code,
        seconds: Number(process.hrtime.bigint() - started) / 1e9,
      }),
    );
  });
}

/** The running server's sandbox processes once its pool is filled (two readings apart agree). */
async function settledSandboxes(): Promise<Map<number, string>> {
  let live = sandboxProcesses();
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setTimeout(r, 300));
    const again = sandboxProcesses();
    if (live.size > 0 && JSON.stringify([...again]) === JSON.stringify([...live])) break;
    live = again;
  }
  assert.ok(live.size > 0, "the root server holds a pooled sandbox");
  return live;
}

describe("an ordinary user starting local mode beside a root server", { timeout: 300_000 }, () => {
  let h: McpHarness;
  let base: ReturnType<typeof snapshot>;
  let uid = 0;
  let gid = 0;

  before(async () => {
    base = snapshot();
    const made = spawnSync("useradd", [
      "--system",
      "--no-create-home",
      "--shell",
      "/bin/false",
      USER,
    ]);
    assert.equal(made.status, 0, made.stderr.toString());
    uid = Number(spawnSync("id", ["-u", USER]).stdout.toString().trim());
    gid = Number(spawnSync("id", ["-g", USER]).stdout.toString().trim());
    assert.ok(uid > 0 && gid > 0);
    h = await startServer({ SCRATCHRUN_ISOLATION: "namespace", SCRATCHRUN_POOL_SIZE: "bash=1" });
    // A call, so a pooled sandbox is refilled and the server is past its start.
    const { s } = await h.exec({ runtime: "bash", code: "echo ready" });
    assert.equal(s.stdout, "ready\n");
  });

  after(async () => {
    await h?.close();
    spawnSync("userdel", [USER]);
    await assertNoLeaks(base);
  });

  test("scratchrun-mcp and the reaper refuse at once with what to do; the root server's sandboxes are untouched", async () => {
    const live = await settledSandboxes();

    const mcp = await asUser(uid, gid, [MCP_BIN]);
    process.stderr.write(`non-root scratchrun-mcp: refused after ${mcp.seconds.toFixed(2)} s\n`);
    assert.notEqual(mcp.code, 0);
    assert.equal(mcp.stdout, "", "nothing on stdout: an MCP client reads only JSON-RPC there");
    assert.match(mcp.stderr, /must run as root/);
    assert.match(mcp.stderr, /SCRATCHRUN_URL/, "it names the way that works without root");
    assert.equal(mcp.stderr.trim().split("\n").length, 1, mcp.stderr);

    // The reaper itself, as that user: refused before it reads a cgroup or a process.
    const reap = await asUser(uid, gid, [
      "--input-type=module",
      "-e",
      `import { reapOrphanSandboxes } from ${JSON.stringify(join(REPO_ROOT, "dist/src/jail/reap.js"))};
try { const r = await reapOrphanSandboxes(); console.log("reaped", JSON.stringify(r)); }
catch (e) { console.log("refused", e.code, e.message); }`,
    ]);
    process.stderr.write(`non-root reaper: refused after ${reap.seconds.toFixed(2)} s\n`);
    assert.match(
      reap.stdout,
      /^refused NOT_READY ScratchRun must run as root/,
      reap.stdout + reap.stderr,
    );

    // Every sandbox process of the root server is the one it was (same pid, same start).
    const now = sandboxProcesses();
    for (const [pid, start] of live) assert.equal(now.get(pid), start, `sandbox process ${pid}`);
    const { s } = await h.exec({ runtime: "bash", code: "echo still" });
    assert.equal(s.stdout, "still\n");
  });
});

describe(
  "a root server on another Node binary starting beside a running one",
  { timeout: 300_000 },
  () => {
    let running: McpHarness;
    let base: ReturnType<typeof snapshot>;

    before(async () => {
      base = snapshot();
      running = await startServer({
        SCRATCHRUN_ISOLATION: "namespace",
        SCRATCHRUN_POOL_SIZE: "bash=1",
      });
      const { s } = await running.exec({ runtime: "bash", code: "echo ready" });
      assert.equal(s.stdout, "ready\n");
    });

    after(async () => {
      await running?.close();
      await assertNoLeaks(base);
    });

    test("its start reaps none of the running server's sandboxes", async () => {
      const live = await settledSandboxes();
      assert.ok(existsSync(OTHER_NODE), `${OTHER_NODE} (setup installs the test legs' Node)`);
      // The second server reaps orphans as it starts (src/cli/mcp.ts), on its own Node binary.
      const other = await startServer(
        { SCRATCHRUN_ISOLATION: "namespace", SCRATCHRUN_POOL_SIZE: "0" },
        OTHER_NODE,
      );
      try {
        const { s } = await other.exec({ runtime: "bash", code: "echo other" });
        assert.equal(s.stdout, "other\n");
        assert.match(
          readlinkSync(`/proc/${other.serverPid()}/exe`),
          /node22/,
          "the second server runs on the other binary",
        );
      } finally {
        await other.close();
      }
      const now = sandboxProcesses();
      for (const [pid, start] of live) assert.equal(now.get(pid), start, `sandbox process ${pid}`);
      const { s } = await running.exec({ runtime: "bash", code: "echo still" });
      assert.equal(s.stdout, "still\n");
    });
  },
);
