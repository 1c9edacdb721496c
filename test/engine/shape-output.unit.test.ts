import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { headTail, MIN_REDACT_LENGTH, redactSecrets } from "../../src/engine/shape-output.js";

describe("redactSecrets", () => {
  test("replaces every occurrence of each value by its name", () => {
    assert.equal(
      redactSecrets("key=sk-abc123 again sk-abc123", { API_KEY: "sk-abc123" }),
      "key=[redacted:API_KEY] again [redacted:API_KEY]",
    );
  });

  test(`leaves values shorter than ${MIN_REDACT_LENGTH} characters alone`, () => {
    assert.equal(redactSecrets("debug=1 true", { DEBUG: "1", FLAG: "true" }), "debug=1 true");
  });

  test("the longer of two overlapping secrets wins", () => {
    assert.equal(
      redactSecrets("tok-123456-extra", { SHORT: "tok-123456", LONG: "tok-123456-extra" }),
      "[redacted:LONG]",
    );
  });

  test("property: no secret value survives in the output", () => {
    const name = fc.stringMatching(/^[A-Z_]{1,12}$/);
    const value = fc.stringMatching(/^[a-z]{0,6}[0-9][a-z0-9-]{5,20}$/);
    fc.assert(
      fc.property(
        fc.dictionary(name, value, { maxKeys: 5 }),
        fc.array(fc.string()),
        (env, noise) => {
          const values = Object.values(env);
          const text = noise
            .map((n, i) => `${n}${values[i % Math.max(values.length, 1)] ?? ""}`)
            .join(" ");
          const out = redactSecrets(text, env);
          for (const v of values) assert.ok(!out.includes(v), `${v} leaked in ${out}`);
        },
      ),
    );
  });
});

describe("headTail", () => {
  test("keeps short text whole", () => {
    assert.deepEqual(headTail("hello", 10), { text: "hello", omittedBytes: 0 });
  });

  test("keeps head and tail and counts the bytes left out", () => {
    const text = `${"a".repeat(1000)}${"m".repeat(5000)}${"z".repeat(1000)}`;
    const shaped = headTail(text, 2000);
    assert.equal(shaped.omittedBytes, 5000);
    assert.ok(shaped.text.startsWith("a".repeat(1000)));
    assert.ok(shaped.text.endsWith("z".repeat(1000)));
    assert.match(shaped.text, /\[\.\.\. 5000 bytes omitted \.\.\.\]/);
  });

  test("property: never cuts a character in two, never exceeds the budget plus the marker", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: "grapheme", maxLength: 400 }),
        fc.integer({ min: 4, max: 300 }),
        (s, max) => {
          const shaped = headTail(s, max);
          assert.ok(!shaped.text.includes("\uFFFD") || s.includes("\uFFFD"));
          const kept = Buffer.byteLength(
            shaped.text.replace(/\n\[\.\.\. \d+ bytes omitted \.\.\.\]\n/, ""),
          );
          if (shaped.omittedBytes > 0) assert.ok(kept <= max, `${kept} > ${max}`);
          assert.equal(kept + shaped.omittedBytes, Buffer.byteLength(s));
        },
      ),
    );
  });
});
