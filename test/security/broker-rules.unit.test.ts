// The rules each request a broker forwards must pass (src/net/proxy/request-rules.ts, issue 43):
// every request of a bound connection, not only its first, is held to the first request's head
// rules, and its body's framing is named so the broker writes it out itself. Adversarial cases:
// what a smuggler sends to make the broker and the bound host read a request differently.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { allowlistOf } from "../../src/net/allowlist.js";
import { checkBrokeredRequest } from "../../src/net/proxy/request-rules.js";
import { substituteHead, type HeldSecret } from "../../src/net/proxy/substitute.js";

const NAME = "api.test";
const h = (...pairs: string[]) => ["Host", NAME, ...pairs];

describe("checkBrokeredRequest: what may go on to a bound host", () => {
  it("an ordinary request of any method but TRACE and CONNECT passes, with its framing", () => {
    for (const m of ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND"]) {
      assert.deepEqual(checkBrokeredRequest(NAME, m, "/a?b=c", h()), {
        ok: true,
        framing: { kind: "none" },
      });
      assert.deepEqual(checkBrokeredRequest(NAME, m, "/", h("Content-Length", "12")), {
        ok: true,
        framing: { kind: "length", bytes: 12 },
      });
      assert.deepEqual(checkBrokeredRequest(NAME, m, "/", h("Transfer-Encoding", "Chunked")), {
        ok: true,
        framing: { kind: "chunked" },
      });
    }
    // The Host's port and case, and a trailing dot, are the same name.
    for (const host of ["api.test:443", "API.Test", "api.test.", "api.test:"])
      assert.equal(checkBrokeredRequest(NAME, "GET", "/", ["Host", host]).ok, true, host);
  });

  it("TRACE (it echoes the head, value and all) and CONNECT (a tunnel) are refused", () => {
    for (const m of ["TRACE", "trace", "CONNECT", "Connect"])
      assert.deepEqual(
        { ...checkBrokeredRequest(NAME, m, "/", h()), why: "" },
        { ok: false, reason: "protocol", why: "" },
        m,
      );
  });

  it("every target but origin-form is refused: absolute-form names a host of its own", () => {
    const cases: Array<[string, string]> = [
      ["http://other.test/collect", "host_mismatch"],
      ["http://api.test/same-host", "host_mismatch"],
      ["https://api.test:443/", "host_mismatch"],
      ["HTTP://other.test/", "host_mismatch"],
      ["*", "protocol"],
      ["other.test:443", "protocol"],
      ["", "protocol"],
      ["x/y", "protocol"],
    ];
    for (const [target, reason] of cases) {
      const v = checkBrokeredRequest(NAME, "GET", target, h());
      assert.equal(v.ok, false, target);
      if (!v.ok) assert.equal(v.reason, reason, target);
    }
  });

  it("exactly one Host, and it is the bound name", () => {
    const cases: string[][] = [
      [],
      ["Host", NAME, "Host", NAME],
      ["Host", NAME, "host", "other.test"],
      ["host", "other.test", "Host", NAME],
      ["Host", "other.test"],
      ["Host", "sub.api.test"],
      ["Host", "api.test.other.test"],
      ["Host", ""],
      ["Host", "127.0.0.1"],
      ["Host", "api.test:80:90"],
      ["Host", "api.test@other.test"],
      ["Host", `${NAME} other.test`],
    ];
    for (const headers of cases) {
      const v = checkBrokeredRequest(NAME, "GET", "/", headers);
      assert.equal(v.ok, false, JSON.stringify(headers));
      if (!v.ok) assert.equal(v.reason, "host_mismatch", JSON.stringify(headers));
    }
  });

  it("framing the broker cannot write out exactly is refused", () => {
    const cases: string[][] = [
      ["Transfer-Encoding", "chunked", "Content-Length", "5"],
      ["Content-Length", "5", "Transfer-Encoding", "chunked"],
      ["Transfer-Encoding", "chunked", "Transfer-Encoding", "chunked"],
      ["Transfer-Encoding", "gzip, chunked"],
      ["Transfer-Encoding", "chunked, gzip"],
      ["Transfer-Encoding", "gzip"],
      ["Transfer-Encoding", "identity"],
      ["Transfer-Encoding", "xchunked"],
      ["Transfer-Encoding", ""],
      ["Content-Length", "5", "Content-Length", "5"],
      ["Content-Length", "5", "Content-Length", "6"],
      ["Content-Length", "5, 5"],
      ["Content-Length", "-1"],
      ["Content-Length", "+5"],
      ["Content-Length", "0x10"],
      ["Content-Length", "5.0"],
      ["Content-Length", ""],
      ["Content-Length", "1".repeat(16)],
    ];
    for (const extra of cases) {
      const v = checkBrokeredRequest(NAME, "POST", "/", h(...extra));
      assert.equal(v.ok, false, JSON.stringify(extra));
      if (!v.ok) assert.equal(v.reason, "protocol", JSON.stringify(extra));
    }
  });

  it("the order of the checks: a refused method or target is refused before its headers are read", () => {
    const v = checkBrokeredRequest(NAME, "TRACE", "http://other.test/", ["Host", "x.test"]);
    assert.ok(!v.ok && v.reason === "protocol");
  });
});

describe("substituteHead with write off: a head over plain HTTP", () => {
  const P = `scratchrun-secret-${"c".repeat(64)}`;
  const secrets: HeldSecret[] = [
    { placeholder: P, value: "the-value", hosts: allowlistOf([NAME]) },
  ];

  it("a bound placeholder is not written and refuses the request; a head without one passes", () => {
    assert.deepEqual(substituteHead(NAME, "/", ["Authorization", `Bearer ${P}`], secrets, false), {
      ok: false,
    });
    assert.deepEqual(substituteHead(NAME, `/?k=${P}`, [], secrets, false), { ok: false });
    assert.deepEqual(substituteHead(NAME, "/?k=1", ["A", "b"], secrets, false), {
      ok: true,
      target: "/?k=1",
      headers: ["A", "b"],
    });
    // Written when allowed, as before.
    const r = substituteHead(NAME, "/", ["Authorization", `Bearer ${P}`], secrets, true);
    assert.ok(r.ok);
    assert.equal(r.headers[1], "Bearer the-value");
  });
});
