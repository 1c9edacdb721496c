import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import fc from "fast-check";
import { redactSecrets } from "../../src/engine/shape-output.js";
import { LineStreamer } from "../../src/mcp/stream-log.js";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { serverForSuite } from "../helpers/suite.js";
import { PY } from "../helpers/pythons.js";

/**
 * Output streamed as logging messages is redacted exactly as the result is, wherever the stream is
 * cut (threat model H14, API-LOGGING): a secret straddling a chunk boundary, a line-length cut or
 * a line end (a multi-line value) never goes out whole or in pieces.
 */

type Sent = { stream: "stdout" | "stderr"; text: string };

/** Feeds `bytes` to a streamer in the given chunk sizes; returns what it sent before and after flush. */
function stream(
  bytes: Buffer,
  chunkSizes: number[],
  env: Record<string, string>,
  maxLine: number,
): { sent: Sent[]; beforeFlush: string } {
  const sent: Sent[] = [];
  const s = new LineStreamer((stream, text) => sent.push({ stream, text }), env, maxLine);
  let at = 0;
  for (let i = 0; at < bytes.length; i++) {
    const size = Math.max(1, chunkSizes[i % Math.max(1, chunkSizes.length)] ?? bytes.length);
    s.push("stdout", bytes.subarray(at, at + size));
    at += size;
  }
  const beforeFlush = sent.map((m) => m.text).join("");
  s.flush();
  return { sent, beforeFlush };
}

const TOKEN = "sk-live-0123456789abcdef";

describe("streamed output redaction (pure)", () => {
  test("the issue's case: a secret straddling the 8192-character cut, at every offset and chunking", () => {
    for (let pad = 8160; pad <= 8200; pad++) {
      const text = `${"A".repeat(pad)}${TOKEN}\n`;
      for (const chunks of [[1], [7], [1000], [4096], [text.length]]) {
        const { sent } = stream(Buffer.from(text), chunks, { TOKEN }, 8192);
        const joined = sent.map((m) => m.text).join("");
        assert.equal(joined, redactSecrets(text, { TOKEN }), `pad ${pad}, chunks ${chunks[0]}`);
        for (const m of sent) assert.doesNotMatch(m.text, /sk-live|cdef/, `pad ${pad}`);
        for (const m of sent) assert.ok(m.text.length <= 8192);
      }
    }
  });

  test("a secret with a newline inside is held across the line end", () => {
    const env = { KEY: "-----BEGIN KEY-----\nMIIEabc\n-----END KEY-----" };
    const text = `head\n${env.KEY}\ntail\n`;
    for (const size of [1, 3, 5, 64]) {
      const { sent } = stream(Buffer.from(text), [size], env, 16);
      assert.equal(sent.map((m) => m.text).join(""), "head\n[redacted:KEY]\ntail\n");
      for (const m of sent) assert.doesNotMatch(m.text, /BEGIN|MIIE|END KEY/);
    }
  });

  test("property: over any cuts, what goes out joins to the redacted stream and no piece holds a secret", () => {
    const secretChar = fc.constantFrom(..."ABCDEFGHJKLMNPQRSTUVWXYZ0123456789-\n".split(""));
    const secret = fc
      .array(secretChar, { minLength: 6, maxLength: 90 })
      .map((c) => c.join(""))
      .filter((v) => v.trim().length >= 6);
    const filler = fc.oneof(
      fc.string({ maxLength: 30 }),
      fc.constantFrom("\n", "é", "日本", "😀", "A", "[redacted:S0]", "\r\n"),
    );
    fc.assert(
      fc.property(
        fc.array(secret, { minLength: 1, maxLength: 4 }),
        fc.array(
          fc.oneof(
            filler,
            fc.nat(3).map((i) => i),
          ),
          { maxLength: 40 },
        ),
        fc.array(fc.integer({ min: 1, max: 50 }), { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 4, max: 64 }),
        (values, pieces, chunks, maxLine) => {
          const env = Object.fromEntries(values.map((v, i) => [`S${i}`, v]));
          const text = pieces
            .map((p) => (typeof p === "number" ? values[p % values.length]! : p))
            .join("");
          const bytes = Buffer.from(text, "utf8");
          const { sent, beforeFlush } = stream(bytes, chunks, env, maxLine);
          const whole = redactSecrets(bytes.toString("utf8"), env);
          const joined = sent.map((m) => m.text).join("");
          assert.equal(joined, whole);
          assert.ok(whole.startsWith(beforeFlush));
          for (const m of sent) {
            assert.ok(m.text.length > 0 && m.text.length <= maxLine, JSON.stringify(m.text));
            for (const v of values) assert.ok(!m.text.includes(v), "a piece holds a secret");
          }
          for (let i = 1; i < sent.length; i++)
            for (const v of values)
              assert.ok(
                !(sent[i - 1]!.text + sent[i]!.text).includes(v),
                "two pieces join a secret",
              );
        },
      ),
      { numRuns: 1500 },
    );
  });

  test("property: lines go out as they end, not only at the end (secrets without newlines)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.stringMatching(/^[a-z ]{0,40}$/), { minLength: 1, maxLength: 20 }),
        fc.integer({ min: 1, max: 30 }),
        (lines, chunk) => {
          const env = { T: "SECRETVALUE" };
          const text = `${lines.map((l) => `${l} SECRETVALUE`).join("\n")}\n`;
          const { beforeFlush } = stream(Buffer.from(text), [chunk], env, 8192);
          assert.equal(beforeFlush, redactSecrets(text, env), "every whole line sent before flush");
        },
      ),
    );
  });

  test("no secrets: lines and long-line pieces, unchanged", () => {
    const text = `${"x".repeat(20)}\nshort\n`;
    const { sent } = stream(Buffer.from(text), [3], {}, 8);
    assert.deepEqual(
      sent.map((m) => m.text),
      ["xxxxxxxx", "xxxxxxxx", "xxxx\n", "short\n"],
    );
  });
});

for (const backend of TEST_BACKENDS) {
  describe(`streamed output redaction over MCP [${backend}]`, () => {
    const h = serverForSuite(backend);

    test("H14: a secret at the 8192-character cut never reaches the logging messages", async () => {
      const messages: { logger?: string; data: unknown }[] = [];
      h.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
        messages.push({ logger: n.params.logger, data: n.params.data });
      });
      await h.client.setLoggingLevel("info");
      try {
        const { s } = await h.exec({
          runtime: PY,
          code: "import os\nprint('A' * 8180 + os.environ['TOKEN'])\nprint('after')",
          env: { TOKEN },
        });
        assert.equal(s.stdout, `${"A".repeat(8180)}[redacted:TOKEN]\nafter\n`);
        const out = messages.filter((m) => m.logger === "stdout").map((m) => String(m.data));
        assert.equal(out.join(""), s.stdout, "the stream says what the result says");
        assert.doesNotMatch(JSON.stringify(messages), /sk-live|0123456789abcdef|89abcdef/);
      } finally {
        await h.client.setLoggingLevel("warning");
      }
    });
  });
}
