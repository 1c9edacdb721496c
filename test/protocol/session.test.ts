import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { PassThrough } from "node:stream";
import {
  decodeRequest,
  encodeAgentFrame,
  encodeKill,
  MAX_DISPLAYS,
  MAX_STREAM_RUNS,
  type AgentExit,
  type AgentFrame,
} from "../../src/protocol/codec.js";
import { runAgentSession, waitForReady } from "../../src/protocol/session.js";
import { LIMITS } from "../../src/schema/limits.js";
import { PROTOCOL_VERSION, type AgentEvent, type AgentRequest } from "../../src/protocol/types.js";

// A scripted peer standing in for a misbehaving agent: the real agent cannot be made to break the
// protocol, so these tests feed the host side exactly the bytes a hostile agent could send.

const request: AgentRequest = {
  timeoutMs: 1000,
  maxStdoutBytes: 10,
  maxStderrBytes: 10,
  maxFileBytes: 5,
  maxTotalFileBytes: 8,
  uid: null,
  gid: null,
  cwd: "/tmp",
  argv: ["/bin/true"],
  env: {},
  files: [],
  returnFiles: ["/tmp/a", "/tmp/b"],
};

const exited = (o: Partial<AgentExit> = {}): AgentFrame => ({
  type: "exit",
  exit: {
    reason: "exited",
    value: 0,
    stdoutTruncated: false,
    stderrTruncated: false,
    durationMs: 5,
    oomKills: 0,
    message: "",
    ...o,
  },
});
const out = (s: string): AgentFrame => ({ type: "stdout", data: Buffer.from(s) });
const err = (s: string): AgentFrame => ({ type: "stderr", data: Buffer.from(s) });
const file = (path: string, content = "", status: "ok" | "missing" = "ok"): AgentFrame => ({
  type: "file",
  file: { path, status, size: content.length, content: Buffer.from(content) },
});
const R: AgentFrame = { type: "ready", version: PROTOCOL_VERSION };
const S: AgentFrame = { type: "started", pid: 7 };
const D: AgentFrame = { type: "done" };
const FILES = [file("/tmp/a", "12345"), file("/tmp/b", "", "missing")];

function peer() {
  const toHost = new PassThrough();
  const toAgent = new PassThrough();
  const written: Buffer[] = [];
  toAgent.on("data", (b: Buffer) => written.push(b));
  return {
    io: { input: toHost, output: toAgent },
    send: (...frames: AgentFrame[]) => toHost.write(Buffer.concat(frames.map(encodeAgentFrame))),
    sendRaw: (b: Buffer) => toHost.write(b),
    end: () => toHost.end(),
    written: () => Buffer.concat(written),
    toHost,
  };
}

const opts = (o: Partial<Parameters<typeof runAgentSession>[2]> = {}) => ({
  signal: new AbortController().signal,
  hardDeadlineMs: 60_000,
  ...o,
});

/** Runs a session against a peer that sends `frames` (after Q arrived) and returns the outcome. */
async function scripted(frames: AgentFrame[], req: AgentRequest = request) {
  const p = peer();
  p.send(R, ...frames);
  return runAgentSession(p.io, req, opts());
}

describe("runAgentSession: well-behaved agent", () => {
  it("collects everything and reports events in order", async () => {
    const p = peer();
    const events: AgentEvent["type"][] = [];
    const session = runAgentSession(p.io, request, opts({ onEvent: (e) => events.push(e.type) }));
    p.send(R);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(decodeRequest(p.written()), request);
    p.send(S, out("hel"), err("e"), out("lo"), exited({ value: 3 }), ...FILES, D);
    const o = await session;
    assert.equal(o.failure, null);
    assert.equal(Buffer.from(o.stdout).toString(), "hello");
    assert.equal(Buffer.from(o.stderr).toString(), "e");
    assert.equal(o.exit?.reason, "exited");
    assert.equal(o.exit?.value, 3);
    assert.deepEqual(
      o.files.map((f) => [f.path, f.status, Buffer.from(f.content).toString()]),
      [
        ["/tmp/a", "ok", "12345"],
        ["/tmp/b", "missing", ""],
      ],
    );
    assert.ok(o.startedAfterMs !== null && o.startedAfterMs >= 0);
    assert.deepEqual(events, ["started", "stdout", "stderr", "stdout", "exited", "collecting"]);
  });

  it("accepts output exactly at the caps, with truncated flags", async () => {
    const o = await scripted([
      S,
      out("0123456789"),
      err("0123456789"),
      exited({ reason: "output_limit", stdoutTruncated: true, stderrTruncated: true }),
      ...FILES,
      D,
    ]);
    assert.equal(o.failure, null);
    assert.equal(o.stdout.length, 10);
  });

  it("accepts X setup_failed without S and without F frames", async () => {
    const o = await scripted([exited({ reason: "setup_failed", message: "bad path" }), D]);
    assert.equal(o.failure, null);
    assert.equal(o.exit?.reason, "setup_failed");
    assert.equal(o.exit?.message, "bad path");
    assert.equal(o.startedAfterMs, null);
  });

  it("sends Q at once with alreadyReady, after waitForReady consumed R", async () => {
    const p = peer();
    p.send(R);
    const ready = await waitForReady(p.io.input, new AbortController().signal);
    assert.deepEqual(ready, { ok: true, version: PROTOCOL_VERSION });
    assert.equal(p.written().length, 0);
    const session = runAgentSession(p.io, request, opts({ alreadyReady: true }));
    assert.deepEqual(decodeRequest(p.written()), request);
    p.send(S, exited(), ...FILES, D);
    assert.equal((await session).failure, null);
  });

  it("treats a second R as out of order when alreadyReady", async () => {
    const p = peer();
    p.send(R);
    const o = await runAgentSession(p.io, request, opts({ alreadyReady: true }));
    assert.equal(o.failure?.kind, "protocol");
  });

  it("swallows exceptions thrown by onEvent", async () => {
    const p = peer();
    p.send(R, S, out("x"), exited(), ...FILES, D);
    const o = await runAgentSession(
      p.io,
      request,
      opts({
        onEvent: () => {
          throw new Error("callback bug");
        },
      }),
    );
    assert.equal(o.failure, null);
  });
});

describe("runAgentSession: protocol violations become failures", () => {
  const cases: [string, AgentFrame[], RegExp][] = [
    ["O before S", [out("x")], /expected S or X/],
    ["S twice", [S, S], /expected O, E, Y, Z or X/],
    ["X exited without S", [exited()], /without S/],
    ["X spawn_failed after S", [S, exited({ reason: "spawn_failed" })], /after S/],
    ["F before X", [S, file("/tmp/a")], /expected O, E, Y, Z or X/],
    ["D before X", [S, D], /expected O, E, Y, Z or X/],
    ["D before all F", [S, exited(), file("/tmp/a"), D], /D after 1 of 2/],
    ["F with an unrequested path", [S, exited(), file("/etc/shadow")], /not requested/],
    ["F paths swapped", [S, exited(), file("/tmp/b"), file("/tmp/a")], /not requested/],
    ["F after setup_failed", [exited({ reason: "setup_failed" }), file("/tmp/a")], /more F/],
    ["a third F", [S, exited(), ...FILES, file("/tmp/a")], /more F/],
    ["R after Q", [R], /expected S or X/],
    ["stdout past the cap", [S, out("0123456789"), out("a")], /stdout beyond/],
    ["stderr past the cap", [S, err("01234567890")], /stderr beyond/],
    [
      "truncated flag short of the cap",
      [S, out("abc"), exited({ stdoutTruncated: true })],
      /stdout_truncated/,
    ],
    [
      "stderr truncated flag, no stderr",
      [S, exited({ stderrTruncated: true })],
      /stderr_truncated/,
    ],
    [
      "output_limit without a flag",
      [S, exited({ reason: "output_limit" })],
      /output_limit without/,
    ],
    ["file past maxFileBytes", [S, exited(), file("/tmp/a", "123456")], /maxFileBytes/],
    [
      "files past the total",
      [S, exited(), file("/tmp/a", "12345"), file("/tmp/b", "1234")],
      /maxTotal/,
    ],
  ];
  for (const [name, frames, pattern] of cases)
    it(name, async () => {
      const o = await scripted(frames);
      assert.equal(o.failure?.kind, "protocol", JSON.stringify(o.failure));
      assert.match(o.failure?.detail ?? "", pattern);
    });

  it("keeps what arrived before the violation", async () => {
    const o = await scripted([S, out("ok"), out("0123456789")]);
    assert.equal(Buffer.from(o.stdout).toString(), "ok");
  });

  it(
    "leaves the stream draining after a violation, so 'end' (and a child's 'close') still come",
    { timeout: 10_000 },
    async () => {
      const p = peer();
      p.send(R, S, out("0123456789"), out("over"));
      const o = await runAgentSession(p.io, request, opts());
      assert.equal(o.failure?.kind, "protocol");
      const ended = new Promise((r) => p.toHost.once("end", r));
      for (let i = 0; i < 100; i++) p.sendRaw(Buffer.alloc(64 * 1024));
      p.end();
      await ended;
    },
  );

  it("reports an undecodable stream", async () => {
    const p = peer();
    p.send(R);
    p.sendRaw(Buffer.from([0, 0, 0, 2, 0x3f, 0]));
    const o = await runAgentSession(p.io, request, opts());
    assert.equal(o.failure?.kind, "protocol");
    assert.match(o.failure?.detail ?? "", /unknown frame type/);
  });

  it("rejects a READY with another version and sends no Q", async () => {
    const p = peer();
    p.send({ type: "ready", version: PROTOCOL_VERSION + 1 });
    const o = await runAgentSession(p.io, request, opts());
    assert.equal(o.failure?.kind, "protocol");
    assert.equal(p.written().length, 0);
  });

  it("reports EOF mid-session, keeping partial output", async () => {
    const p = peer();
    p.send(R, S, out("part"));
    p.end();
    const o = await runAgentSession(p.io, request, opts());
    assert.equal(o.failure?.kind, "eof");
    assert.equal(Buffer.from(o.stdout).toString(), "part");
    assert.equal(o.exit, null);
  });

  it("reports EOF after X with the exit kept", async () => {
    const p = peer();
    p.send(R, S, exited({ value: 1 }));
    p.end();
    const o = await runAgentSession(p.io, request, opts());
    assert.equal(o.failure?.kind, "eof");
    assert.equal(o.exit?.value, 1);
  });

  it("reports a stream error as eof", async () => {
    const p = peer();
    p.send(R, S);
    setImmediate(() => p.toHost.destroy(new Error("boom")));
    const o = await runAgentSession(p.io, request, opts());
    assert.equal(o.failure?.kind, "eof");
  });
});

describe("runAgentSession: the display channel's outputs (docs/decisions/0017-outputs.md)", () => {
  const Y = (s: string | Buffer): AgentFrame => ({ type: "display", data: Buffer.from(s) });
  const Z = (end: "whole" | "over" | "cut" = "whole"): AgentFrame => ({ type: "display_end", end });
  const noFiles = { ...request, returnFiles: [] };

  it("keeps the streams' runs and each output in the order they came", async () => {
    const o = await scripted(
      [S, out("a"), out("b"), Y("{"), Y("}\n"), Z(), err("e"), Z("over"), out("c"), exited(), D],
      noFiles,
    );
    assert.equal(o.failure, null);
    assert.deepEqual(
      o.shown.map((e) =>
        e.kind === "stream"
          ? `${e.stream} ${e.bytes}`
          : `display ${e.end} ${Buffer.from(e.content).toString()}`,
      ),
      ["stdout 2", "display whole {}\n", "stderr 1", "display over ", "stdout 1"],
    );
  });

  it("keeps at most MAX_STREAM_RUNS runs in order, then each stream's bytes before every output", async () => {
    // Alternating one-byte writes: a run each, as SEC-OUTPUT's flood makes 600,000 of them.
    const alternate = (n: number) =>
      Array.from({ length: n }, (_, i) => (i % 2 ? err("e") : out("o")));
    const o = await scripted(
      [S, ...alternate(10_000), Y("{}"), Z(), ...alternate(10_001), exited(), D],
      { ...noFiles, maxStdoutBytes: 1 << 20, maxStderrBytes: 1 << 20 },
    );
    assert.equal(o.failure, null);
    // MAX_STREAM_RUNS (256) before the output, the output, one run per stream after it.
    assert.equal(MAX_STREAM_RUNS, 256);
    assert.equal(o.shown.length, 259, `${o.shown.length} events`);
    const display = o.shown.findIndex((e) => e.kind === "display");
    const bytes = (events: typeof o.shown, stream: string) =>
      events.reduce((n, e) => n + (e.kind === "stream" && e.stream === stream ? e.bytes : 0), 0);
    assert.equal(bytes(o.shown.slice(0, display), "stdout"), 5_000, "stdout before the output");
    assert.equal(bytes(o.shown.slice(0, display), "stderr"), 5_000, "stderr before the output");
    assert.equal(bytes(o.shown.slice(display), "stdout"), 5_001);
    assert.equal(bytes(o.shown.slice(display), "stderr"), 5_000);
    // The first runs keep the order they came in.
    assert.deepEqual(
      o.shown.slice(0, 4).map((e) => (e.kind === "stream" ? `${e.stream} ${e.bytes}` : e.kind)),
      ["stdout 1", "stderr 1", "stdout 1", "stderr 1"],
    );
  });

  it("counts an output past its bound that came with no bytes", async () => {
    const frames = Array.from({ length: MAX_DISPLAYS + 5 }, () => Z("over"));
    const o = await scripted([S, ...frames, exited(), D], noFiles);
    assert.equal(o.failure, null);
    assert.equal(o.shown.length, MAX_DISPLAYS + 5);
  });

  const cases: [string, AgentFrame[], RegExp][] = [
    ["Y before S", [Y("x")], /expected S or X/],
    ["Y after X", [S, exited(), Y("x")], /expected F or D|D after/],
    ["X inside an output", [S, Y("x"), exited()], /X inside an output/],
    [
      "bytes past the outputs' count",
      [S, ...Array.from({ length: MAX_DISPLAYS }, () => Z()), Y("x")],
      /beyond the output count/,
    ],
    [
      "one output past its bytes",
      [
        S,
        ...Array.from({ length: LIMITS.outputs.maxBytes / 65536 + 1 }, () =>
          Y(Buffer.alloc(65536)),
        ),
      ],
      /beyond an output's bytes/,
    ],
    [
      "outputs past their total",
      [
        S,
        ...Array.from({ length: LIMITS.outputs.maxTotalBytes / LIMITS.outputs.maxBytes }, () => [
          ...Array.from({ length: LIMITS.outputs.maxBytes / 65536 }, () => Y(Buffer.alloc(65536))),
          Z(),
        ]).flat(),
        Y("x"),
      ],
      /beyond the outputs' total/,
    ],
  ];
  for (const [name, frames, pattern] of cases)
    it(name, async () => {
      const o = await scripted(frames, noFiles);
      assert.equal(o.failure?.kind, "protocol", JSON.stringify(o.failure));
      assert.match(o.failure?.detail ?? "", pattern);
    });
});

describe("runAgentSession: deadlines and cancellation", () => {
  it("fails with host_deadline and sends K when the agent stalls", async () => {
    const p = peer();
    p.send(R, S);
    const o = await runAgentSession(p.io, request, opts({ hardDeadlineMs: 50 }));
    assert.equal(o.failure?.kind, "host_deadline");
    assert.ok(p.written().subarray(-5).equals(encodeKill()));
  });

  it("after X the files get their own bound, not what is left of the code's deadline", async () => {
    const p = peer();
    p.send(R, S, exited({ value: 0 }));
    // The files arrive 150 ms after X, well past the 50 ms session deadline.
    setTimeout(() => p.send(...FILES, D), 150);
    const o = await runAgentSession(p.io, request, opts({ hardDeadlineMs: 50, collectMs: 2000 }));
    assert.equal(o.failure, null);
    assert.deepEqual(
      o.files.map((f) => f.status),
      ["ok", "missing"],
    );
  });

  it("a sandbox that stalls after X still ends: host_deadline once the files' bound passes", async () => {
    const p = peer();
    p.send(R, S, exited({ value: 0 }), FILES[0]!);
    const o = await runAgentSession(p.io, request, opts({ hardDeadlineMs: 50, collectMs: 100 }));
    assert.equal(o.failure?.kind, "host_deadline");
    assert.match(o.failure?.detail ?? "", /within 100 ms of X/);
    assert.equal(o.files.length, 1, "what arrived is kept");
    assert.ok(p.written().subarray(-5).equals(encodeKill()));
  });

  it("fails with host_deadline before READY without writing anything", async () => {
    const p = peer();
    const o = await runAgentSession(p.io, request, opts({ hardDeadlineMs: 50 }));
    assert.equal(o.failure?.kind, "host_deadline");
    assert.equal(p.written().length, 0);
  });

  it("returns aborted at once for an already-aborted signal, sending nothing", async () => {
    const p = peer();
    p.send(R);
    const o = await runAgentSession(p.io, request, opts({ signal: AbortSignal.abort() }));
    assert.equal(o.failure?.kind, "aborted");
    assert.equal(p.written().length, 0);
  });

  it("on abort after Q sends K and completes when the agent reports killed", async () => {
    const p = peer();
    const ac = new AbortController();
    const session = runAgentSession(p.io, request, opts({ signal: ac.signal }));
    p.send(R, S);
    await new Promise((r) => setImmediate(r));
    ac.abort();
    const q = p.written().readUInt32BE(0) + 4;
    assert.ok(p.written().subarray(q).equals(encodeKill()));
    p.send(exited({ reason: "killed" }), ...FILES, D);
    const o = await session;
    assert.equal(o.failure, null);
    assert.equal(o.exit?.reason, "killed");
  });

  it("on abort gives up after killGraceMs when the agent does not answer", async () => {
    const p = peer();
    const ac = new AbortController();
    const session = runAgentSession(p.io, request, opts({ signal: ac.signal, killGraceMs: 20 }));
    p.send(R, S);
    await new Promise((r) => setImmediate(r));
    ac.abort();
    const o = await session;
    assert.equal(o.failure?.kind, "aborted");
  });

  it("sends K only once", async () => {
    const p = peer();
    const ac = new AbortController();
    const session = runAgentSession(
      p.io,
      request,
      opts({ signal: ac.signal, killGraceMs: 20, hardDeadlineMs: 40 }),
    );
    p.send(R, S);
    await new Promise((r) => setImmediate(r));
    ac.abort();
    await session;
    const q = p.written().readUInt32BE(0) + 4;
    assert.equal(p.written().length - q, 5);
  });
});

describe("waitForReady", () => {
  it("fails on data after R before Q", async () => {
    const p = peer();
    p.send(R, S);
    const r = await waitForReady(p.io.input, new AbortController().signal);
    assert.equal(r.ok ? "ok" : r.failure.kind, "protocol");
  });

  it("fails on a first frame that is not R", async () => {
    const p = peer();
    p.send(S);
    const r = await waitForReady(p.io.input, new AbortController().signal);
    assert.equal(r.ok ? "ok" : r.failure.kind, "protocol");
  });

  it("fails on EOF and on abort", async () => {
    const p = peer();
    p.end();
    const r = await waitForReady(p.io.input, new AbortController().signal);
    assert.equal(r.ok ? "ok" : r.failure.kind, "eof");
    const q = peer();
    const ac = new AbortController();
    const pending = waitForReady(q.io.input, ac.signal);
    ac.abort();
    const a = await pending;
    assert.equal(a.ok ? "ok" : a.failure.kind, "aborted");
  });

  it("leaves the stream paused so later frames wait for the session", async () => {
    const p = peer();
    p.send(R);
    assert.ok((await waitForReady(p.io.input, new AbortController().signal)).ok);
    p.send(S, out("late"));
    await new Promise((r) => setImmediate(r));
    const session = runAgentSession(p.io, request, opts({ alreadyReady: true }));
    p.send(exited(), ...FILES, D);
    const o = await session;
    assert.equal(o.failure, null);
    assert.equal(Buffer.from(o.stdout).toString(), "late");
  });
});
