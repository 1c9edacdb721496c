// One mapping of the engine's errors to HTTP answers, for the API and the worker alike.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ERROR_CODES, ScratchRunError } from "../../src/errors.js";
import { refusalOf, RetryLater } from "../../src/http/respond.js";

describe("an engine's error as every server answers it", () => {
  test("each code has its status, and its code and message go out as they are", () => {
    const want = {
      INVALID_INPUT: 400,
      NOT_READY: 503,
      BUSY: 429,
      SANDBOX_FAILED: 500,
      WORKER_LOST: 502,
      SESSION_NOT_FOUND: 404,
      SESSION_LOST: 410,
      INTERNAL: 500,
    };
    assert.deepEqual(Object.keys(want).sort(), [...ERROR_CODES].sort());
    for (const code of ERROR_CODES) {
      const r = refusalOf(new ScratchRunError(code, `m-${code}`));
      assert.deepEqual([r.status, r.code, r.message], [want[code], code, `m-${code}`]);
    }
  });

  test("NOT_READY and a RetryLater say when to retry; nothing else does", () => {
    assert.deepEqual(refusalOf(new ScratchRunError("NOT_READY", "x")).headers, {
      "Retry-After": "2",
    });
    const later = refusalOf(new RetryLater("key busy", 7));
    assert.deepEqual(
      [later.status, later.code, later.headers],
      [429, "BUSY", { "Retry-After": "7" }],
    );
    assert.equal(refusalOf(new ScratchRunError("BUSY", "x")).headers, undefined);
    assert.equal(refusalOf(new ScratchRunError("INVALID_INPUT", "x")).headers, undefined);
  });
});
