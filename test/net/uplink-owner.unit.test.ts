import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { describe, test } from "node:test";
import { claimNames, claimUplink, type UplinkClaim } from "../../src/net/uplink-owner.js";
import { uplinkConfig, type UplinkConfig } from "../../src/net/uplink.js";

/** An uplink no other test or server uses: its own prefix and namespace name. */
function freshUplink(): UplinkConfig {
  const tag = randomBytes(3).toString("hex");
  return uplinkConfig({ prefix: `u${tag}-`, netns: `uo-${tag}` });
}

/** The compiled module beside this compiled test, for a child process to import. */
const MODULE = new URL("../../src/net/uplink-owner.js", import.meta.url).href;

/**
 * Another process trying to claim `u`: "held" (it keeps the claim until killed) or "refused" (it
 * has exited).
 */
async function other(u: UplinkConfig): Promise<{ child: ChildProcess; answer: string }> {
  const code =
    `const { claimUplink } = await import(${JSON.stringify(MODULE)});` +
    `const c = await claimUplink(${JSON.stringify(u)});` +
    `process.stdout.write("release" in c ? "held\\n" : "refused\\n");` +
    `if ("release" in c) setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", code], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const [line] = (await once(child.stdout!, "data")) as [Buffer];
  return { child, answer: line.toString().trim() };
}

/** Another process holding a claim on `u` until it is killed. */
async function holder(u: UplinkConfig): Promise<ChildProcess> {
  const { child, answer } = await other(u);
  assert.equal(answer, "held");
  return child;
}

function isClaim(c: Awaited<ReturnType<typeof claimUplink>>): c is UplinkClaim {
  return "release" in c;
}

describe("one server per uplink and prefix (SVC-NET-OWNER)", () => {
  test("a second process is refused while the first holds the prefix, and told its pid", async () => {
    const u = freshUplink();
    const child = await holder(u);
    try {
      const c = await claimUplink(u);
      assert.ok(!isClaim(c), "refused");
      assert.equal(c.pid, child.pid);
      assert.equal(c.what, `prefix "${u.prefix}"`);
    } finally {
      child.kill("SIGKILL");
      await once(child, "exit");
    }
  });

  test("another prefix on the same uplink is refused too (its address slots would collide)", async () => {
    const u = freshUplink();
    const child = await holder(u);
    try {
      const c = await claimUplink({ ...u, prefix: `${u.prefix.slice(0, -1)}x-` });
      assert.ok(!isClaim(c), "refused");
      assert.equal(c.pid, child.pid);
      assert.equal(c.what, `uplink namespace "${u.netns}"`);
    } finally {
      child.kill("SIGKILL");
      await once(child, "exit");
    }
  });

  test("a holder killed with SIGKILL leaves nothing behind: the next claim succeeds at once", async () => {
    const u = freshUplink();
    const child = await holder(u);
    child.kill("SIGKILL");
    await once(child, "exit");
    const c = await claimUplink(u);
    assert.ok(isClaim(c), "claimed after the holder died");
    c.release();
  });

  test("one process claims twice (two engines): both hold, and the names go back only after both release", async () => {
    const u = freshUplink();
    const a = await claimUplink(u);
    const b = await claimUplink(u);
    assert.ok(isClaim(a) && isClaim(b));
    a.release();
    a.release(); // a second release of one claim counts once
    const refused = await other(u);
    assert.equal(refused.answer, "refused", "another process is refused while b holds");
    if (refused.child.exitCode === null) await once(refused.child, "exit");
    b.release();
    const child = await holder(u);
    child.kill("SIGKILL");
    await once(child, "exit");
  });

  test("the names are per prefix and per uplink namespace, the host's uplink named as such", () => {
    const host = claimNames(uplinkConfig({ prefix: "sr-" }));
    assert.deepEqual(
      host.map((n) => n.name),
      ["scratchrun/net/prefix/sr-", "scratchrun/net/uplink/-host-"],
    );
    assert.equal(host[1]!.what, "the host's uplink");
  });
});
