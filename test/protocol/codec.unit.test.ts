import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  decodeRequest,
  encodeAgentFrame,
  encodeKill,
  encodeRequest,
  FrameDecoder,
  MAX_AGENT_FRAME,
  MAX_OUTPUT_CHUNK,
  MAX_REQUEST_FRAME,
  type AgentFrame,
} from "../../src/protocol/codec.js";
import { PROTOCOL_VERSION, type AgentRequest } from "../../src/protocol/types.js";

const baseRequest: AgentRequest = {
  timeoutMs: 1000,
  maxStdoutBytes: 100,
  maxStderrBytes: 200,
  maxFileBytes: 300,
  maxTotalFileBytes: 400,
  uid: null,
  gid: null,
  cwd: "/home/user",
  argv: ["/bin/echo", "hi"],
  env: { PATH: "/usr/bin", EMPTY: "", EQ: "a=b" },
  files: [{ path: "/home/user/a.txt", mode: 0o644, content: new Uint8Array([1, 2, 3]) }],
  returnFiles: ["/home/user/out.png"],
};

/** A raw frame: u32 length, type, payload. */
function raw(type: string | number, payload: Uint8Array | number[] = []): Buffer {
  const p = Buffer.from(payload);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(1 + p.length);
  head[4] = typeof type === "number" ? type : type.charCodeAt(0);
  return Buffer.concat([head, p]);
}

function u32(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v);
  return b;
}
function str(s: string | Buffer): Buffer {
  const b = typeof s === "string" ? Buffer.from(s) : s;
  return Buffer.concat([u32(b.length), b]);
}
function u64(v: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(v);
  return b;
}

/** An X payload with every field adjustable. */
function exitPayload(
  o: Partial<{
    reason: number;
    value: number;
    outT: number;
    errT: number;
    message: Buffer;
    extra: Buffer;
  }> = {},
): Buffer {
  const head = Buffer.alloc(15);
  head[0] = o.reason ?? 0;
  head.writeInt32BE(o.value ?? 0, 1);
  head[5] = o.outT ?? 0;
  head[6] = o.errT ?? 0;
  head.writeUInt32BE(12, 7);
  head.writeUInt32BE(0, 11);
  return Buffer.concat([head, str(o.message ?? Buffer.alloc(0)), o.extra ?? Buffer.alloc(0)]);
}

function filePayload(
  o: Partial<{ path: Buffer; status: number; size: bigint; content: Buffer; extra: Buffer }> = {},
): Buffer {
  const content = o.content ?? Buffer.from("abc");
  return Buffer.concat([
    str(o.path ?? Buffer.from("/tmp/x")),
    Buffer.from([o.status ?? 0]),
    u64(o.size ?? BigInt(content.length)),
    str(content),
    o.extra ?? Buffer.alloc(0),
  ]);
}

function decodeAll(bytes: Buffer): { frames: AgentFrame[]; error: string | null } {
  return new FrameDecoder().push(bytes);
}
function expectError(bytes: Buffer, pattern: RegExp): void {
  const r = decodeAll(bytes);
  assert.match(r.error ?? "(no error)", pattern);
}

describe("encodeRequest", () => {
  it("writes the documented layout", () => {
    const q = encodeRequest(baseRequest);
    assert.equal(q.readUInt32BE(0), q.length - 4);
    assert.equal(String.fromCharCode(q[4]!), "Q");
    assert.equal(q.readUInt32BE(5), PROTOCOL_VERSION);
    assert.equal(q.readUInt32BE(9), 1000); // timeout
    assert.equal(q.readBigUInt64BE(13), 100n);
    assert.equal(q.readBigUInt64BE(21), 200n);
    assert.equal(q.readBigUInt64BE(29), 300n);
    assert.equal(q.readBigUInt64BE(37), 400n);
    assert.equal(q.readUInt32BE(45), 0xffffffff); // uid null
    assert.equal(q.readUInt32BE(49), 0xffffffff);
    assert.equal(q.readUInt32BE(53), "/home/user".length);
    assert.equal(q.subarray(57, 67).toString(), "/home/user");
    // Ends with the session flag and its kernel (empty): one call, the agent exits after D; then
    // the clock (0: leave it).
    assert.deepEqual([...q.subarray(q.length - 16)], new Array<number>(16).fill(0));
  });

  it("carries a session's flag and kernel, and decodes them back", () => {
    const kernel = "/opt/scratchrun/session.py";
    const q = encodeRequest({ ...baseRequest, session: { kernel } });
    assert.equal(q.readUInt32BE(q.length - 16 - kernel.length), 1);
    assert.equal(q.subarray(q.length - 8 - kernel.length, q.length - 8).toString(), kernel);
    assert.deepEqual(decodeRequest(q).session, { kernel });
    const bash = decodeRequest(encodeRequest({ ...baseRequest, session: { kernel: null } }));
    assert.deepEqual(bash.session, { kernel: null });
    assert.equal(decodeRequest(encodeRequest(baseRequest)).session, undefined);
  });

  it("sets the adopt bit (2) beside the session bit, and refuses it alone or unknown bits", () => {
    const kernel = "/run/scratchrun-session.py";
    const q = encodeRequest({ ...baseRequest, session: { kernel, adopt: true } });
    const at = q.length - 16 - kernel.length;
    assert.equal(q.readUInt32BE(at), 3);
    assert.deepEqual(decodeRequest(q).session, { kernel, adopt: true });
    const flag = (value: number) => {
      const bad = Buffer.from(q);
      bad.writeUInt32BE(value, at);
      return () => decodeRequest(bad);
    };
    assert.throws(flag(2), /session flag 2/);
    assert.throws(flag(5), /session flag 5/);
    assert.deepEqual(
      decodeRequest(encodeRequest({ ...baseRequest, session: { kernel } })).session,
      {
        kernel,
      },
    );
  });

  it("ends with the host's clock for the agent to set, and decodes it back", () => {
    const clockMs = Date.UTC(2026, 11, 5, 10, 0, 0, 123);
    const q = encodeRequest({ ...baseRequest, session: { kernel: null }, clockMs });
    assert.equal(q.readBigUInt64BE(q.length - 8), BigInt(clockMs));
    assert.equal(decodeRequest(q).clockMs, clockMs);
    assert.equal(decodeRequest(encodeRequest(baseRequest)).clockMs, undefined);
  });

  it("round-trips through decodeRequest", () => {
    assert.deepEqual(decodeRequest(encodeRequest(baseRequest)), {
      ...baseRequest,
      files: baseRequest.files.map((f) => ({ ...f, content: new Uint8Array(f.content) })),
    });
    const withIds = { ...baseRequest, uid: 1000, gid: 0 };
    assert.equal(decodeRequest(encodeRequest(withIds)).uid, 1000);
    assert.equal(decodeRequest(encodeRequest(withIds)).gid, 0);
  });

  it("round-trips arbitrary requests (property)", () => {
    const text = fc.string({ unit: "grapheme", maxLength: 20 });
    const request = fc.record({
      timeoutMs: fc.integer({ min: 0, max: 0xffffffff }),
      maxStdoutBytes: fc.maxSafeNat(),
      maxStderrBytes: fc.maxSafeNat(),
      maxFileBytes: fc.maxSafeNat(),
      maxTotalFileBytes: fc.maxSafeNat(),
      ids: fc.option(fc.tuple(fc.integer({ min: 0, max: 0xfffffffe }), fc.nat()), { nil: null }),
      cwd: text,
      argv: fc.array(text, { maxLength: 5 }),
      env: fc.dictionary(
        fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,8}$/),
        fc.string({ maxLength: 10 }),
      ),
      files: fc.array(
        fc.record({
          path: text,
          mode: fc.integer({ min: 0, max: 0o777 }),
          content: fc.uint8Array({ maxLength: 50 }),
        }),
        { maxLength: 4 },
      ),
      returnFiles: fc.array(text, { maxLength: 4 }),
    });
    fc.assert(
      fc.property(request, ({ ids, ...r }) => {
        // structuredClone: fast-check builds null-prototype records; the decoder builds plain ones.
        const req: AgentRequest = structuredClone({
          ...r,
          uid: ids?.[0] ?? null,
          gid: ids?.[1] ?? null,
        });
        assert.deepEqual(decodeRequest(encodeRequest(req)), req);
      }),
    );
  });

  it("rejects values it cannot represent", () => {
    const bad: Partial<AgentRequest>[] = [
      { timeoutMs: -1 },
      { timeoutMs: 1.5 },
      { timeoutMs: 2 ** 32 },
      { maxStdoutBytes: -1 },
      { maxStdoutBytes: Number.MAX_SAFE_INTEGER + 1 },
      { maxFileBytes: NaN },
      { maxTotalFileBytes: Infinity },
      { uid: 1000, gid: null },
      { uid: null, gid: 5 },
      { uid: 0xffffffff, gid: 0xffffffff },
      { uid: 2 ** 32, gid: 0 },
      { files: [{ path: "/tmp/a", mode: -1, content: new Uint8Array() }] },
    ];
    for (const patch of bad)
      assert.throws(
        () => encodeRequest({ ...baseRequest, ...patch }),
        RangeError,
        JSON.stringify(patch),
      );
  });

  it("refuses a frame over MAX_REQUEST_FRAME and accepts one just under", () => {
    const size = MAX_REQUEST_FRAME - 1000;
    const big = {
      ...baseRequest,
      files: [{ path: "/tmp/big", mode: 0o644, content: new Uint8Array(size) }],
    };
    const q = encodeRequest(big);
    assert.ok(q.length - 4 <= MAX_REQUEST_FRAME);
    const tooBig = {
      ...big,
      files: [{ ...big.files[0]!, content: new Uint8Array(MAX_REQUEST_FRAME) }],
    };
    assert.throws(() => encodeRequest(tooBig), RangeError);
  });

  it("encodes K as an empty frame", () => {
    assert.deepEqual([...encodeKill()], [0, 0, 0, 1, "K".charCodeAt(0)]);
  });
});

describe("FrameDecoder: valid streams", () => {
  const frames: AgentFrame[] = [
    { type: "ready", version: 1 },
    { type: "started", pid: 42 },
    { type: "stdout", data: new Uint8Array([104, 105]) },
    { type: "stderr", data: new Uint8Array(MAX_OUTPUT_CHUNK).fill(7) },
    {
      type: "exit",
      exit: {
        reason: "signaled",
        value: 9,
        stdoutTruncated: true,
        stderrTruncated: false,
        durationMs: 1234,
        oomKills: 2,
        message: "héllo ✓",
      },
    },
    {
      type: "file",
      file: { path: "/tmp/ü.png", status: "ok", size: 3, content: new Uint8Array([1, 2, 3]) },
    },
    {
      type: "file",
      file: { path: "/tmp/big", status: "too_large", size: 2 ** 40, content: new Uint8Array() },
    },
    { type: "display", data: new Uint8Array([123, 10]) },
    { type: "display_end", end: "whole" },
    { type: "display_end", end: "over" },
    { type: "display_end", end: "cut" },
    { type: "done" },
  ];
  const stream = Buffer.concat(frames.map(encodeAgentFrame));

  it("decodes a whole stream in one push", () => {
    assert.deepEqual(decodeAll(stream), { frames, error: null });
  });

  it("decodes the same stream split at every possible point", () => {
    for (let cut = 0; cut <= stream.length; cut += cut < 200 ? 1 : 997) {
      const d = new FrameDecoder();
      const a = d.push(stream.subarray(0, cut));
      const b = d.push(stream.subarray(cut));
      assert.equal(a.error, null);
      assert.equal(b.error, null);
      assert.deepEqual([...a.frames, ...b.frames], frames);
      assert.equal(d.buffered, 0);
    }
  });

  it("decodes byte by byte", () => {
    const d = new FrameDecoder();
    const out: AgentFrame[] = [];
    for (const byte of stream.subarray(0, 5000)) out.push(...d.push(Buffer.from([byte])).frames);
    assert.deepEqual(out, frames.slice(0, 3));
  });

  it("decodes any chunking of any valid frame sequence (property)", () => {
    const frameArb: fc.Arbitrary<AgentFrame> = fc.oneof(
      fc.record({ type: fc.constant("ready" as const), version: fc.nat() }),
      fc.record({
        type: fc.constant("started" as const),
        pid: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
      }),
      fc.record({
        type: fc.constant("stdout" as const),
        data: fc.uint8Array({ minLength: 1, maxLength: 300 }),
      }),
      fc.record({
        type: fc.constant("stderr" as const),
        data: fc.uint8Array({ minLength: 1, maxLength: 300 }),
      }),
      fc.record({
        type: fc.constant("exit" as const),
        exit: fc.record({
          reason: fc.constantFrom("timeout" as const, "output_limit" as const, "killed" as const),
          value: fc.constant(0),
          stdoutTruncated: fc.boolean(),
          stderrTruncated: fc.boolean(),
          durationMs: fc.nat(),
          oomKills: fc.nat(),
          message: fc.string({ maxLength: 100 }).filter((s) => !/[\ud800-\udfff]/.test(s)),
        }),
      }),
      fc.record({
        type: fc.constant("file" as const),
        file: fc.record({
          path: fc
            .string({ minLength: 1, maxLength: 30 })
            .filter((s) => !/[\ud800-\udfff]/.test(s)),
          status: fc.constant("missing" as const),
          size: fc.constant(0),
          content: fc.constant(new Uint8Array()),
        }),
      }),
      fc.record({
        type: fc.constant("display" as const),
        data: fc.uint8Array({ minLength: 1, maxLength: 300 }),
      }),
      fc.record({
        type: fc.constant("display_end" as const),
        end: fc.constantFrom("whole" as const, "over" as const, "cut" as const),
      }),
      fc.constant({ type: "done" as const }),
    );
    fc.assert(
      fc.property(
        fc.array(frameArb, { maxLength: 10 }),
        fc.array(fc.nat(), { maxLength: 8 }),
        (generated, cuts) => {
          const fs = structuredClone(generated);
          const bytes = Buffer.concat(fs.map(encodeAgentFrame));
          const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort(
            (a, b) => a - b,
          );
          const d = new FrameDecoder();
          const out: AgentFrame[] = [];
          let prev = 0;
          for (const p of [...points, bytes.length]) {
            const r = d.push(bytes.subarray(prev, p));
            assert.equal(r.error, null);
            out.push(...r.frames);
            prev = p;
          }
          assert.deepEqual(out, fs);
        },
      ),
    );
  });

  it("holds an incomplete frame without emitting it", () => {
    const d = new FrameDecoder();
    const f = encodeAgentFrame({ type: "stdout", data: new Uint8Array(1000) });
    assert.deepEqual(d.push(f.subarray(0, f.length - 1)), { frames: [], error: null });
    assert.equal(d.buffered, f.length - 1);
    assert.equal(d.push(f.subarray(f.length - 1)).frames.length, 1);
  });
});

describe("FrameDecoder: hostile streams", () => {
  it("rejects length 0", () => expectError(Buffer.from([0, 0, 0, 0, 0x4f]), /length 0/));

  it("rejects a length over MAX_AGENT_FRAME from the header alone", () => {
    const head = Buffer.alloc(5);
    head.writeUInt32BE(MAX_AGENT_FRAME + 1);
    head[4] = "F".charCodeAt(0);
    expectError(head, /out of range/);
    head.writeUInt32BE(0xffffffff);
    expectError(head, /out of range/);
  });

  it("rejects a per-type oversize length before the payload arrives", () => {
    for (const [type, len] of [
      ["R", 6],
      ["S", 6],
      ["D", 2],
      ["O", MAX_OUTPUT_CHUNK + 2],
      ["E", MAX_OUTPUT_CHUNK + 2],
      ["Y", MAX_OUTPUT_CHUNK + 2],
      ["Z", 3],
      ["X", 2000],
    ] as const) {
      const head = Buffer.alloc(5);
      head.writeUInt32BE(len);
      head[4] = type.charCodeAt(0);
      const d = new FrameDecoder();
      assert.match(d.push(head).error ?? "", /too large/, type);
      assert.equal(d.buffered, 0);
    }
  });

  it("rejects every unknown type byte", () => {
    const known = new Set("RSOEXFDYZ".split("").map((c) => c.charCodeAt(0)));
    for (let t = 0; t < 256; t++) {
      if (known.has(t)) continue;
      expectError(raw(t), /unknown frame type/);
    }
  });

  it("rejects host frame types coming from the agent", () => {
    expectError(raw("Q"), /unknown/);
    expectError(raw("K"), /unknown/);
  });

  it("rejects wrong fixed payload sizes", () => {
    expectError(raw("R", [0, 0, 1]), /R: payload/);
    expectError(raw("R", [0, 0, 0]), /R: payload/);
    expectError(raw("S", [0, 0, 0]), /S: payload/);
    expectError(raw("D", [0]), /too large|D: payload/);
    expectError(raw("O"), /O\/E/);
    expectError(raw("E"), /O\/E/);
    expectError(raw("Y"), /Y: chunk/);
    expectError(raw("Z"), /Z: payload/);
    expectError(raw("Z", [3]), /Z: payload/);
    expectError(raw("Z", [255]), /Z: payload/);
  });

  it("rejects pid 0 and pids beyond 2^31-1", () => {
    expectError(raw("S", u32(0)), /pid/);
    expectError(raw("S", u32(0x80000000)), /pid/);
  });

  it("rejects malformed X payloads", () => {
    expectError(raw("X", exitPayload().subarray(0, 18)), /truncated/);
    expectError(raw("X", exitPayload({ extra: Buffer.from([0]) })), /trailing/);
    expectError(raw("X", exitPayload({ reason: 7 })), /unknown reason/);
    expectError(raw("X", exitPayload({ reason: 255 })), /unknown reason/);
    expectError(raw("X", exitPayload({ outT: 2 })), /flags/);
    expectError(raw("X", exitPayload({ errT: 255 })), /flags/);
    expectError(raw("X", exitPayload({ reason: 0, value: 256 })), /exit status/);
    expectError(raw("X", exitPayload({ reason: 0, value: -1 })), /exit status/);
    expectError(raw("X", exitPayload({ reason: 1, value: 0 })), /signal/);
    expectError(raw("X", exitPayload({ reason: 1, value: 65 })), /signal/);
    expectError(raw("X", exitPayload({ reason: 2, value: 1 })), /value/);
    expectError(raw("X", exitPayload({ message: Buffer.from([0xc3]) })), /UTF-8/);
    expectError(raw("X", exitPayload({ message: Buffer.from([0xed, 0xa0, 0x80]) })), /UTF-8/);
    expectError(raw("X", exitPayload({ message: Buffer.from([0xff]) })), /UTF-8/);
    // Message length pointing past the end of the frame.
    const p = exitPayload({ message: Buffer.from("abc") });
    p.writeUInt32BE(4, 15);
    expectError(raw("X", p), /truncated/);
    p.writeUInt32BE(0xffffffff, 15);
    expectError(raw("X", p), /truncated/);
  });

  it("accepts the X edge values", () => {
    for (const [reason, value] of [
      [0, 0],
      [0, 255],
      [1, 1],
      [1, 64],
      [6, 0],
    ] as const)
      assert.equal(decodeAll(raw("X", exitPayload({ reason, value }))).error, null);
  });

  it("rejects malformed F payloads", () => {
    expectError(raw("F", filePayload().subarray(0, 10)), /truncated/);
    expectError(raw("F", filePayload({ extra: Buffer.from([1]) })), /trailing/);
    expectError(raw("F", filePayload({ path: Buffer.alloc(0) })), /path length/);
    expectError(raw("F", filePayload({ path: Buffer.alloc(4001, 0x61) })), /path length/);
    expectError(raw("F", filePayload({ path: Buffer.from([0x2f, 0xc0, 0xaf]) })), /UTF-8/);
    expectError(raw("F", filePayload({ status: 6 })), /unknown status/);
    expectError(raw("F", filePayload({ status: 1 })), /content with status missing/);
    expectError(raw("F", filePayload({ size: 2n })), /size differs/);
    expectError(
      raw("F", filePayload({ status: 3, size: 2n ** 63n, content: Buffer.alloc(0) })),
      /size out of range/,
    );
    const p = filePayload();
    p.writeUInt32BE(0xffffffff, 0); // path length past the end
    expectError(raw("F", p), /truncated/);
  });

  it("keeps the frames before an error and stays failed", () => {
    const good = encodeAgentFrame({ type: "ready", version: 1 });
    const d = new FrameDecoder();
    const r = d.push(Buffer.concat([good, raw("?")]));
    assert.equal(r.frames.length, 1);
    assert.match(r.error ?? "", /unknown/);
    assert.match(d.push(good).error ?? "", /unknown/);
    assert.equal(d.push(good).frames.length, 0);
    assert.equal(d.buffered, 0);
  });

  it("never throws and never buffers more than one frame on random bytes (property)", () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 64 }), { maxLength: 20 }), (chunks) => {
        const d = new FrameDecoder();
        for (const c of chunks) {
          d.push(c);
          assert.ok(d.buffered <= MAX_AGENT_FRAME + 4);
        }
      }),
    );
  });

  it("rejects every single-byte corruption of a valid X or F frame or decodes it validly (property)", () => {
    const frames = [
      raw("X", exitPayload({ reason: 0, value: 3, message: Buffer.from("ok") })),
      raw("F", filePayload()),
    ];
    fc.assert(
      fc.property(
        fc.constantFrom(...frames),
        fc.nat(),
        fc.integer({ min: 0, max: 255 }),
        (f, pos, byte) => {
          const copy = Buffer.from(f);
          copy[pos % copy.length] = byte;
          const r = new FrameDecoder().push(copy);
          // Either an error, an incomplete frame (length grew), or one frame whose re-encoding is
          // the same bytes: the decoder never accepts something it would not produce.
          if (r.error === null && r.frames.length === 1)
            assert.deepEqual(encodeAgentFrame(r.frames[0]!), copy);
          else assert.ok(r.error !== null || r.frames.length === 0);
        },
      ),
    );
  });
});
