// The agent's display channel (guest/agent-display.h, docs/decisions/0017-outputs.md), with the
// real agent in a jail of its own and tiny fixture programs that speak to the socket as the display
// modules do, or as hostile code would: each output lands in order with what was printed around
// it, the bounds hold (count, bytes), and a writer that never finishes cannot hold the call.
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { MAX_DISPLAYS } from "../../src/protocol/codec.js";
import type { ShownEvent } from "../../src/protocol/types.js";
import { LIMITS } from "../../src/schema/limits.js";
import { AGENT, hostPidsWith, killLeftovers, request, runJailed } from "./agent-harness.js";

after(() => {
  killLeftovers();
  assert.deepEqual(hostPidsWith(AGENT), [], "a jailed agent outlived its test");
});

/** A Python program with `show(data)`: one output as the display module sends it. */
const py = (body: string) =>
  request([
    "/usr/bin/python3.11",
    "-c",
    [
      "import os, socket, sys",
      `NAME = "\\0" + "scratchrun-display".ljust(107, "_")`,
      "def connect():",
      "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
      "    s.connect(NAME)",
      "    return s",
      "def show(data):",
      "    s = connect()",
      "    s.sendall(data)",
      "    s.shutdown(socket.SHUT_WR)",
      "    s.recv(1)",
      "    s.close()",
      body,
    ].join("\n"),
  ]);

const words = (shown: ShownEvent[]) =>
  shown.map((e) =>
    e.kind === "stream"
      ? `${e.stream} ${e.bytes}`
      : `${e.end} ${Buffer.from(e.content).toString().slice(0, 20)}`,
  );

describe("agent: the display channel", () => {
  it("puts each output after what was printed before it and before what comes after", async () => {
    const r = await runJailed(
      py("for i in range(20):\n    print(i, flush=True)\n    show(b'out %d' % i)\nprint('end')"),
    );
    assert.equal(r.failure, null);
    assert.equal(r.exit?.value, 0, r.text.stderr);
    const expected = Array.from({ length: 20 }, (_, i) => [
      `stdout ${String(i).length + 1}`,
      `whole out ${i}`,
    ]).flat();
    assert.deepEqual(words(r.shown), [...expected, "stdout 4"]);
  });

  it("forwards the first outputs up to the count; past it each is read, ends 'over', and forwarded empty", async () => {
    const r = await runJailed(py(`for i in range(${MAX_DISPLAYS + 10}):\n    show(b'x')`));
    assert.equal(r.exit?.value, 0, r.text.stderr);
    assert.deepEqual(words(r.shown), [
      ...Array(MAX_DISPLAYS).fill("whole x"),
      ...Array(10).fill("over "),
    ]);
  });

  it("an output past the bytes one may have ends 'over'; the next is forwarded whole", async () => {
    const r = await runJailed(py(`show(b'y' * ${LIMITS.outputs.maxBytes + 1})\nshow(b'z')`));
    assert.equal(r.exit?.value, 0, r.text.stderr);
    assert.deepEqual(
      r.shown.map((e) => (e.kind === "display" ? e.end : e.kind)),
      ["over", "whole"],
    );
  });

  it("an output whose writer exits without waiting for its place still comes, after the streams", async () => {
    const r = await runJailed(
      py("print('a', flush=True)\ns = connect()\ns.sendall(b'last')\nos._exit(0)"),
    );
    assert.equal(r.exit?.value, 0);
    assert.deepEqual(words(r.shown), ["stdout 2", "whole last"]);
  });

  it("a writer that never ends its output cannot hold the call past its timeout", async () => {
    const r = await runJailed({
      ...py("s = connect()\ns.sendall(b'never ends')\nimport time\ntime.sleep(60)"),
      timeoutMs: 1500,
    });
    assert.equal(r.failure, null);
    assert.equal(r.exit?.reason, "timeout");
    // Its writer is dead by then: what it sent is read to the end and reported (the host parses).
    assert.deepEqual(words(r.shown), ["whole never ends"]);
  });

  it("a thousand connections at once end with the call: the count holds, nothing hangs", async () => {
    const r = await runJailed(
      py(
        "import threading\n" +
          "def one():\n    try:\n        show(b'c')\n    except OSError:\n        pass\n" +
          "ts = [threading.Thread(target=one) for _ in range(1000)]\n" +
          "[t.start() for t in ts]\n[t.join() for t in ts]\nprint('done')",
      ),
    );
    assert.equal(r.exit?.value, 0, r.text.stderr);
    const outputs = r.shown.filter((e) => e.kind === "display");
    assert.equal(
      outputs.filter((e) => e.kind === "display" && e.end === "whole").length,
      MAX_DISPLAYS,
    );
    assert.equal(outputs.length, 1000);
  });
});
