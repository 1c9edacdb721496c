import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { wireErrorSchema, wireToError } from "../../src/api/wire.js";
import { ERROR_CODES } from "../../src/errors.js";

describe("wire errors: a remote error arrives as the error the engine threw", () => {
  it("every engine code round-trips with its code and message (INTERNAL included)", () => {
    for (const code of ERROR_CODES) {
      const body = { error: { code, message: `m-${code}` } };
      assert.ok(wireErrorSchema.safeParse(body).success, code);
      const e = wireToError(500, body);
      assert.equal(e.code, code);
      assert.match(e.message, new RegExp(`m-${code}`));
    }
  });

  it("HTTP-only codes become NOT_READY with the fix that names the setting", () => {
    const e = wireToError(401, { error: { code: "UNAUTHORIZED", message: "bad key" } });
    assert.equal(e.code, "NOT_READY");
    assert.match(e.fix ?? "", /SCRATCHRUN_API_KEY/);
    const other = wireToError(404, { error: { code: "NOT_FOUND", message: "no" } });
    assert.match(other.fix ?? "", /SCRATCHRUN_URL/);
  });

  it("a body the server refused (too large, wrong media type) is the caller's INVALID_INPUT", () => {
    for (const [status, code] of [
      [413, "PAYLOAD_TOO_LARGE"],
      [415, "UNSUPPORTED_MEDIA_TYPE"],
    ] as const) {
      const e = wireToError(status, { error: { code, message: "Body is larger than 9 bytes" } });
      assert.equal(e.code, "INVALID_INPUT", code);
      assert.equal(e.message, "Body is larger than 9 bytes");
    }
  });

  it("a body that is not an error document is INTERNAL naming the HTTP status", () => {
    const e = wireToError(502, "<html>bad gateway</html>");
    assert.equal(e.code, "INTERNAL");
    assert.match(e.message, /502/);
  });
});
