import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { BackendOutcome } from "../../src/backends/types.js";
import { toExecOutcome } from "../../src/engine/result.js";
import type { AgentOutcome } from "../../src/protocol/types.js";
import type { ExecInput } from "../../src/schema/exec.js";
import { parseExecRequest } from "../../src/schema/validate.js";

const req = (extra: Partial<ExecInput> = {}) =>
  parseExecRequest({ runtime: "python3.11", code: "pass", ...extra });

type Exit = NonNullable<AgentOutcome["exit"]>;
const exited = (reason: Exit["reason"], value = 0, extra: Partial<Exit> = {}): Exit => ({
  reason,
  value,
  stdoutTruncated: false,
  stderrTruncated: false,
  durationMs: 42.4,
  oomKills: 0,
  message: "",
  ...extra,
});

function outcome(agent: Partial<AgentOutcome>, extra: Partial<BackendOutcome> = {}) {
  return {
    agent: {
      exit: null,
      stdout: new Uint8Array(),
      stderr: new Uint8Array(),
      shown: [],
      files: [],
      failure: null,
      startedAfterMs: 1,
      pid: 2,
      ...agent,
    },
    isolation: "namespace",
    oomKilled: false,
    sandboxReadyMs: 0,
    ...extra,
  } satisfies BackendOutcome;
}

describe("toExecOutcome: the first termination reason wins", () => {
  const cases: [string, BackendOutcome, boolean, string, number | null, number | null][] = [
    ["exit 0", outcome({ exit: exited("exited", 0) }), false, "ok", 0, null],
    ["exit 3", outcome({ exit: exited("exited", 3) }), false, "error", 3, null],
    ["signal", outcome({ exit: exited("signaled", 9) }), false, "killed", null, 9],
    ["timeout", outcome({ exit: exited("timeout") }), false, "timeout", null, null],
    [
      "host deadline",
      outcome({ failure: { kind: "host_deadline", detail: "d" } }),
      false,
      "timeout",
      null,
      null,
    ],
    ["output limit", outcome({ exit: exited("output_limit") }), false, "output_limit", null, null],
    [
      "oom beats the signal it caused",
      outcome({ exit: exited("signaled", 9) }, { oomKilled: true }),
      false,
      "oom",
      null,
      9,
    ],
    [
      "timeout beats oom",
      outcome({ exit: exited("timeout") }, { oomKilled: true }),
      false,
      "timeout",
      null,
      null,
    ],
    [
      "cancelled beats everything",
      outcome({ exit: exited("timeout") }, { oomKilled: true }),
      true,
      "cancelled",
      null,
      null,
    ],
    [
      "agent killed = cancelled",
      outcome({ exit: exited("killed") }),
      false,
      "cancelled",
      null,
      null,
    ],
    [
      "aborted session = cancelled",
      outcome({ failure: { kind: "aborted", detail: "a" } }),
      false,
      "cancelled",
      null,
      null,
    ],
    [
      "sandbox died before X",
      outcome({ failure: { kind: "eof", detail: "agent gone" } }),
      false,
      "killed",
      null,
      null,
    ],
  ];
  for (const [name, o, cancelled, reason, code, signal] of cases)
    it(name, () => {
      const { result } = toExecOutcome(req(), o, 1000, cancelled);
      assert.equal(result.exit_reason, reason);
      assert.equal(result.exit_code, code);
      assert.equal(result.signal, signal);
      if (reason !== "ok" && reason !== "error") assert.ok(result.message, "says what happened");
    });

  it("a sandbox that died before reporting says why in the message", () => {
    const { result } = toExecOutcome(
      req(),
      outcome({ failure: { kind: "eof", detail: "agent gone" } }),
      1000,
      false,
    );
    assert.match(result.message ?? "", /agent gone/);
    assert.equal(result.duration_ms, 1000, "no agent duration: the wall time");
  });
});

describe("toExecOutcome: output, files and accounting", () => {
  it("redacts env values from both streams and text files, not from binary files", () => {
    const secret = "s3cr3t-value";
    const { result, files } = toExecOutcome(
      req({ env: { TOKEN: secret }, return_files: ["a.txt", "b.bin"] }),
      outcome({
        exit: exited("exited"),
        stdout: Buffer.from(`out ${secret}`),
        stderr: Buffer.from(`err ${secret}`),
        files: [
          { path: "/home/user/a.txt", status: "ok", size: 16, content: Buffer.from(`t ${secret}`) },
          { path: "/home/user/b.bin", status: "ok", size: 14, content: Buffer.from(`b ${secret}`) },
        ],
      }),
      1,
      false,
    );
    assert.equal(result.stdout, "out [redacted:TOKEN]");
    assert.equal(result.stderr, "err [redacted:TOKEN]");
    assert.equal(files[0]!.content.toString(), "t [redacted:TOKEN]");
    assert.equal(files[1]!.content.toString(), `b ${secret}`);
    assert.equal(result.duration_ms, 42, "the agent's own duration, rounded");
  });

  it("redact_env false leaves output alone", () => {
    const { result } = toExecOutcome(
      req({ env: { TOKEN: "s3cr3t-value" }, redact_env: false }),
      outcome({ exit: exited("exited"), stdout: Buffer.from("s3cr3t-value") }),
      1,
      false,
    );
    assert.equal(result.stdout, "s3cr3t-value");
  });

  it("long output keeps head and tail and says how much was left out", () => {
    const big = "h".repeat(5000) + "m".repeat(10_000) + "t".repeat(5000);
    const { result } = toExecOutcome(
      req({ max_output_bytes: 1024 }),
      outcome({ exit: exited("exited"), stdout: Buffer.from(big) }),
      1,
      false,
    );
    assert.ok(result.stdout.startsWith("h") && result.stdout.endsWith("t"));
    assert.ok(result.stdout_omitted_bytes > 18_000);
    assert.equal(result.stdout_truncated, true);
    assert.equal(result.stderr_truncated, false);
  });

  it("the agent's own truncation flag is kept even when the shown text fits", () => {
    const { result } = toExecOutcome(
      req(),
      outcome({
        exit: exited("output_limit", 0, { stdoutTruncated: true }),
        stdout: Buffer.from("x"),
      }),
      1,
      false,
    );
    assert.equal(result.stdout_truncated, true);
    assert.equal(result.stdout_omitted_bytes, 0);
  });

  it("files the sandbox never sent are listed as error; statuses and MIME types are kept", () => {
    const { result, files } = toExecOutcome(
      req({ return_files: ["plot.png", "gone.txt", "never.csv"] }),
      outcome({
        exit: exited("exited"),
        files: [
          { path: "/home/user/plot.png", status: "ok", size: 3, content: Buffer.from("png") },
          { path: "/home/user/gone.txt", status: "missing", size: 0, content: new Uint8Array() },
        ],
        failure: { kind: "eof", detail: "broke off" },
      }),
      1,
      false,
    );
    assert.deepEqual(
      result.files.map((f) => [f.path, f.status, f.mime_type]),
      [
        ["/home/user/plot.png", "ok", "image/png"],
        ["/home/user/gone.txt", "missing", "text/plain"],
        ["/home/user/never.csv", "error", "text/csv"],
      ],
    );
    assert.deepEqual(
      files.map((f) => f.path),
      ["/home/user/plot.png"],
    );
    assert.equal(result.exit_reason, "ok", "the code finished: its verdict stands");
    assert.match(result.message ?? "", /broke off after the code finished/);
    // A file with status error always says why; the others carry no message.
    assert.match(result.files[2]?.message ?? "", /never sent: .*connection closed/);
    assert.equal(result.files[0]?.message, undefined);
    assert.equal(result.files[1]?.message, undefined);
  });

  it("every file with status error carries its reason: read error, deadline, cancel", () => {
    const read = toExecOutcome(
      req({ return_files: ["a.bin"] }),
      outcome({
        exit: exited("exited"),
        files: [{ path: "/home/user/a.bin", status: "error", size: 0, content: new Uint8Array() }],
      }),
      1,
      false,
    );
    assert.match(read.result.files[0]?.message ?? "", /could not read it/);
    for (const [kind, said] of [
      ["host_deadline", /deadline/],
      ["aborted", /cancelled/],
      ["protocol", /malformed/],
    ] as const) {
      const r = toExecOutcome(
        req({ return_files: ["b.bin"] }),
        outcome({ exit: exited("exited"), files: [], failure: { kind, detail: "x" } }),
        1,
        false,
      );
      assert.equal(r.result.files[0]?.status, "error");
      assert.match(r.result.files[0]?.message ?? "", said, kind);
    }
  });

  it("blocked packets are reported only when the backend counted them", () => {
    const counted = toExecOutcome(
      req(),
      outcome({ exit: exited("exited") }, { network: { blockedPackets: 3 } }),
      1,
      false,
    );
    assert.equal(counted.result.network_blocked_packets, 3);
    const none = toExecOutcome(req(), outcome({ exit: exited("exited") }), 1, false);
    assert.equal("network_blocked_packets" in none.result, false);
    assert.equal(none.result.isolation, "namespace");
    assert.equal(none.result.network, "public");
  });
});
