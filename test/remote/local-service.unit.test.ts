// How the stdio server reads connect(2) on the local socket, and what a local principal may be
// called (decision 0018), pure. Live: test/e2e/local-service.test.ts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { connectOutcome, localRefusal } from "../../src/remote/local-service.js";
import { PRINCIPAL } from "../../src/store/keys.js";

describe("connectOutcome", () => {
  test("no service: no file, nothing listening, not a socket, a file in the path", () => {
    for (const code of ["ENOENT", "ECONNREFUSED", "ENOTSOCK", "ENOTDIR"])
      assert.equal(connectOutcome(code), "absent", code);
  });
  test("a socket this uid may not open: denied (the group's, not this user's)", () => {
    assert.equal(connectOutcome("EACCES"), "denied");
    assert.equal(connectOutcome("EPERM"), "denied");
  });
  test("anything else is an error said as it is, never taken for no service", () => {
    for (const code of ["EAGAIN", "ELOOP", "ENAMETOOLONG", undefined])
      assert.equal(connectOutcome(code), "error", String(code));
  });
});

describe("the refusals are one line that says what to do", () => {
  for (const kind of ["absent", "denied"] as const)
    test(kind, () => {
      const e = localRefusal(kind, "/run/scratchrun/scratchrun.sock");
      assert.equal(e.code, "NOT_READY");
      assert.doesNotMatch(e.message, /\n/);
      assert.match(e.message, /SCRATCHRUN_URL/, "remote mode is named as the other way");
      assert.match(
        e.message,
        kind === "denied" ? /usermod -aG scratchrun .*log in again/ : /must run as root.*setup/,
      );
    });
});

describe("PRINCIPAL: uid:N, and nothing a key name or a trick could pass for one", () => {
  test("decimal uids", () => {
    for (const ok of ["uid:0", "uid:1", "uid:1000", "uid:65534", "uid:4294967294"])
      assert.ok(PRINCIPAL.test(ok), ok);
  });
  test("refused", () => {
    for (const bad of [
      "uid:",
      "uid:01",
      "uid:-1",
      "uid:1e3",
      "uid:0x10",
      "uid:1 ",
      " uid:1",
      "UID:1",
      "uid:1\n",
      "uid:1:2",
      "uid:12345678901",
      "uid:１",
      "user:1",
      "uid:1000\u0000",
    ])
      assert.equal(PRINCIPAL.test(bad), false, JSON.stringify(bad));
  });
});
