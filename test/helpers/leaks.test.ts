import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { closeSync, mkdtempSync, openSync, readlinkSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serverOwnFds } from "./leaks.js";

// The suites' fd check (assertServerFdsBack) counts what serverOwnFds returns: it must set aside
// the channels to a live child and count them again once the child is gone and they stay open.
// This process plays the server; its children the jails.
describe("serverOwnFds: the server's fds no live child holds the other end of", () => {
  test("a live child's channels are set aside; one left open after the child died counts", async () => {
    // A channel Node does not close when the child exits: a FIFO this side opened and passed on.
    const dir = mkdtempSync(join(tmpdir(), "sr-unit-fds-"));
    const fifo = join(dir, "fifo");
    execFileSync("mkfifo", [fifo]);
    const fd = openSync(fifo, "r+");
    const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], {
      stdio: ["pipe", "pipe", "pipe", fd],
    });
    try {
      await once(child, "spawn");
      // This side's ends of the child's stdio (Node makes them as unix socket pairs).
      const ends = child.stdio.slice(0, 3).map((s) => {
        const fd = (s as unknown as { _handle: { fd: number } })._handle.fd;
        return readlinkSync(`/proc/self/fd/${fd}`);
      });
      assert.equal(ends.length, 3);
      const during = serverOwnFds(process.pid);
      assert.deepEqual(
        [...ends, fifo].filter((e) => during.includes(e)),
        [],
        "a live child's channels are set aside",
      );
      // The child dies; the FIFO stays open here, as a channel a server forgot to close would.
      child.kill("SIGKILL");
      await once(child, "exit");
      const after = serverOwnFds(process.pid);
      assert.ok(after.includes(fifo), `a dead child's channel left open counts: ${after}`);
    } finally {
      for (const s of child.stdio) s?.destroy();
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
