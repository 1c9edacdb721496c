// The one body reader: every refusal it makes is decided here, once, with its status, code and
// headers, and every server answers it as it is (src/http/respond.ts `refuse`).
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { describe, test } from "node:test";
import { readFormBody, readJsonBody } from "../../src/http/body.js";

function request(headers: Record<string, string>, chunks: string[]): IncomingMessage {
  return Object.assign(Readable.from(chunks.map((c) => Buffer.from(c))), {
    headers,
  }) as unknown as IncomingMessage;
}

const JSON_TYPE = { "content-type": "application/json; charset=utf-8" };
const FORM_TYPE = { "content-type": "application/x-www-form-urlencoded" };

describe("the body reader", () => {
  test("a JSON body within the cap is its value", async () => {
    assert.deepEqual(await readJsonBody(request(JSON_TYPE, ['{"a":', "1}"]), 16), {
      ok: true,
      value: { a: 1 },
    });
  });

  test("refusals carry the wire's code, and the connection closes after them", async () => {
    const cases: [Promise<unknown>, number, string][] = [
      [
        readJsonBody(request({ "content-type": "text/plain" }, ["{}"]), 16),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
      ],
      [readJsonBody(request(JSON_TYPE, ["{nope"]), 16), 400, "INVALID_INPUT"],
      // Declared too large: refused before a byte is read.
      [
        readJsonBody(request({ ...JSON_TYPE, "content-length": "17" }, []), 16),
        413,
        "PAYLOAD_TOO_LARGE",
      ],
      // Chunked: counted as it arrives, dropped at the cap.
      [
        readJsonBody(request(JSON_TYPE, ['{"a":"', "x".repeat(20), '"}']), 16),
        413,
        "PAYLOAD_TOO_LARGE",
      ],
      [readFormBody(request(JSON_TYPE, ["a=1"]), 16), 415, "UNSUPPORTED_MEDIA_TYPE"],
      [readFormBody(request(FORM_TYPE, ["a=1&a=2"]), 16), 400, "INVALID_INPUT"],
      [readFormBody(request(FORM_TYPE, ["a=".padEnd(17, "x")]), 16), 413, "PAYLOAD_TOO_LARGE"],
    ];
    for (const [read, status, code] of cases) {
      const r = (await read) as {
        ok: false;
        refusal: { status: number; code: string; headers: object };
      };
      assert.equal(r.ok, false);
      assert.deepEqual(
        [r.refusal.status, r.refusal.code, r.refusal.headers],
        [status, code, { Connection: "close" }],
      );
    }
  });

  test("a form's fields, each given once", async () => {
    assert.deepEqual(await readFormBody(request(FORM_TYPE, ["a=1&b=%20x"]), 64), {
      ok: true,
      value: { a: "1", b: " x" },
    });
  });
});
