import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { describe, test } from "node:test";
import { claimNames, claimUplink, holderOf } from "../../src/net/uplink-owner.js";
import { uplinkConfig } from "../../src/net/uplink.js";

const NOBODY = 65534;

/**
 * Another user's process (nobody, as any local user could) holding `names` as abstract sockets,
 * answering every connection with "1" as if it were a server of pid 1.
 */
async function squatter(names: string[]): Promise<ChildProcess> {
  // Python binds an abstract name as any user could (a node under /root would not run as nobody),
  // padded with NULs to the address's full size as Node binds its own (so the names collide).
  const code = [
    "import socket, sys, threading",
    "def serve(s):",
    "    while True:",
    "        c, _ = s.accept(); c.sendall(b'1\\n'); c.close()",
    "for n in sys.argv[1:]:",
    "    s = socket.socket(socket.AF_UNIX); s.bind((b'\\0' + n.encode()).ljust(108, b'\\0')); s.listen()",
    "    threading.Thread(target=serve, args=(s,), daemon=True).start()",
    "print('up', flush=True)",
    "threading.Event().wait()",
  ].join("\n");
  const child = spawn(
    "/usr/bin/setpriv",
    [
      `--reuid=${NOBODY}`,
      `--regid=${NOBODY}`,
      "--clear-groups",
      "/usr/bin/python3",
      "-c",
      code,
      ...names,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const [line] = (await once(child.stdout!, "data")) as [Buffer];
  assert.equal(line.toString().trim(), "up");
  return child;
}

// SVC-NET-OWNER's other side: any local user may bind an abstract name, so a held name's holder is
// looked up in the kernel's tables, and another user's process cannot keep a server off the network.
describe("a claim's names held by another user's process (SVC-NET-OWNER)", () => {
  test("the claim goes on without them and names the process, never what it answers", async () => {
    const tag = randomBytes(3).toString("hex");
    const u = uplinkConfig({ prefix: `q${tag}-`, netns: `uq-${tag}` });
    const names = claimNames(u);
    const child = await squatter(names.map((n) => n.name));
    try {
      for (const { name } of names) {
        const h = holderOf(name);
        assert.equal(h?.pid, child.pid, `the kernel's tables name the holder of ${name}`);
        assert.equal(h?.uid, NOBODY);
      }
      const c = await claimUplink(u);
      assert.ok("release" in c, `claimed despite the squatter: ${JSON.stringify(c)}`);
      assert.deepEqual(
        c.squatted.map((s) => [s.what, s.pid, s.uid]),
        names.map((n) => [n.what, child.pid, NOBODY]),
      );
      assert.match(c.squatted[0]!.command, /python3/);
      c.release();
    } finally {
      child.kill("SIGKILL");
      await once(child, "exit");
    }
  });
});
