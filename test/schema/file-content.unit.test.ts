import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { toAgentRequest } from "../../src/engine/request.js";
import { isScratchRunError } from "../../src/errors.js";
import { asFileContent, decodeBase64 } from "../../src/schema/file-content.js";
import { LIMITS } from "../../src/schema/limits.js";
import type { SandboxPath } from "../../src/schema/exec.js";
import { parseExecRequest } from "../../src/schema/validate.js";

const ALL_BYTES = Buffer.from(Array.from({ length: 256 }, (_, i) => i));

function refusal(files: unknown): string {
  try {
    parseExecRequest({ runtime: "bash", code: ":", files });
  } catch (e) {
    assert.ok(isScratchRunError(e) && e.code === "INVALID_INPUT", String(e));
    return e.message;
  }
  assert.fail(`accepted ${JSON.stringify(files).slice(0, 80)}`);
}

describe('files values: UTF-8 text or { "base64": … } (binary inputs)', () => {
  it("bytes 0-255 go in as base64 and reach the agent unchanged", () => {
    const req = parseExecRequest({
      runtime: "python3.11",
      code: "pass",
      files: { "all.bin": { base64: ALL_BYTES.toString("base64") }, "t.txt": "héllo" },
    });
    const agent = toAgentRequest(req, 1000);
    const bin = agent.files.find((f) => f.path === "/home/user/all.bin");
    assert.ok(bin && Buffer.from(bin.content).equals(ALL_BYTES));
    const txt = agent.files.find((f) => f.path === "/home/user/t.txt");
    assert.equal(Buffer.from(txt!.content).toString("utf8"), "héllo");
  });

  it("only canonical standard base64 is accepted, each refusal naming the path", () => {
    for (const [bad, why] of [
      ["QUJD\nREVG", /character "\\n" at offset 4/],
      ["QUJD REVG", /character " "/],
      ["-_-_", /character "-"/],
      ["QQ", /multiple of 4/],
      ["QQ===", /multiple of 4|padding/],
      ["Q===", /padding/],
      ["QR==", /bits after the last byte/],
      ["QQ==QQ==", /padding/],
    ] as const) {
      assert.equal(decodeBase64(bad).ok, false, bad);
      assert.match(
        refusal({ "in/data.bin": { base64: bad } }),
        /files\["in\/data\.bin"\]: not valid base64/,
      );
      assert.match(refusal({ "x.bin": { base64: bad } }), why, bad);
    }
  });

  it("the object form takes base64 and nothing else", () => {
    assert.match(refusal({ "a.bin": { base64: "QQ==", encoding: "x" } }), /files/);
    assert.match(refusal({ "a.bin": { data: "QQ==" } }), /files/);
    assert.match(refusal({ "a.bin": { base64: 42 } }), /files/);
    assert.match(refusal({ "a.bin": ["QQ=="] }), /files/);
  });

  it("limits count decoded bytes, not base64 text", () => {
    const max = LIMITS.files.maxFileBytes;
    const ok = parseExecRequest({
      runtime: "bash",
      code: ":",
      files: { "big.bin": { base64: Buffer.alloc(max).toString("base64") } },
    });
    assert.equal(ok.files["/home/user/big.bin" as SandboxPath]!.length, max);
    assert.match(
      refusal({ "big.bin": { base64: Buffer.alloc(max + 1).toString("base64") } }),
      new RegExp(`${max + 1} bytes; at most ${max}`),
    );
    const half = Buffer.alloc(Math.ceil(LIMITS.files.maxTotalBytes / 2) + 1).toString("base64");
    assert.match(refusal({ a: { base64: half }, b: { base64: half } }), /files total/);
  });

  it("an empty value is an empty file", () => {
    const req = parseExecRequest({ runtime: "bash", code: ":", files: { e: { base64: "" } } });
    assert.equal(req.files["/home/user/e" as SandboxPath]!.length, 0);
  });

  it("the CLI sends a local file as text when it is UTF-8 and as base64 otherwise", () => {
    assert.equal(asFileContent(Buffer.from("plain ✓\n")), "plain ✓\n");
    assert.deepEqual(asFileContent(ALL_BYTES), { base64: ALL_BYTES.toString("base64") });
    assert.deepEqual(asFileContent(Buffer.from([0xc3])), { base64: "ww==" });
  });
});
