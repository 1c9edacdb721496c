import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, it } from "node:test";
import { runAgentSession } from "../../src/protocol/session.js";
import { AGENT, bwrapArgs, hostPidsWith, sh } from "./agent-harness.js";

// `--channel PATH`: the microVM gives the agent a virtio-serial port, a character device. Here a
// raw pty stands in for it: a small python bridge copies between its stdio and the pty master,
// the jailed agent opens the slave with --channel, and the host side is the real session code.
const BRIDGE = `
import os, select, subprocess, sys, tty
m, s = os.openpty()
tty.setraw(s); tty.setraw(m)
jail = sys.argv[1:]
i = jail.index("--")
jail[i:i] = ["--dev-bind", os.ttyname(s), "/tmp/chan"]
p = subprocess.Popen(jail + ["--channel", "/tmp/chan"], stdin=subprocess.DEVNULL)
while True:
    r, _, _ = select.select([0, m], [], [], 0.05)
    if m in r:
        os.write(1, os.read(m, 65536))
    if 0 in r:
        data = os.read(0, 65536)
        if not data:
            # The host is done: the agent exits on its own after D (a kill here would race it).
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        else:
            os.write(m, data)
    if p.poll() is not None and not select.select([m], [], [], 0)[0]:
        sys.exit(p.returncode)
`;

after(() => assert.deepEqual(hostPidsWith(AGENT), []));

it("speaks the protocol over --channel on a character device", async () => {
  const bridge = spawn("/usr/bin/python3.11", ["-c", BRIDGE, "bwrap", ...bwrapArgs()], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const closed = new Promise<number | null>((resolve) => bridge.once("close", resolve));
  const outcome = await runAgentSession(
    { input: bridge.stdout, output: bridge.stdin },
    sh("printf '%s' \"$(cat /tmp/in)\" | tr a-z A-Z; head -c 100000 /dev/zero | tr '\\0' x", {
      files: [{ path: "/tmp/in", mode: 0o644, content: Buffer.from("over a tty") }],
      returnFiles: ["/tmp/in"],
    }),
    { signal: new AbortController().signal, hardDeadlineMs: 30_000 },
  );
  bridge.stdin.end();
  assert.equal(await closed, 0);
  assert.equal(outcome.failure, null);
  assert.equal(outcome.exit?.reason, "exited");
  const text = Buffer.from(outcome.stdout).toString();
  assert.equal(text, `OVER A TTY${"x".repeat(100000)}`);
  assert.equal(Buffer.from(outcome.files[0]!.content).toString(), "over a tty");
});
