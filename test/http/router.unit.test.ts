// Routes as data: a row answers its method on its path, `{name}` takes one non-empty segment,
// a known path asked with another method is 405 naming the methods it takes, the rest is 404.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { matchRoute, type Route } from "../../src/http/router.js";

const row = (method: Route["method"], path: string, label?: string): Route => ({
  method,
  path,
  handle: () => {},
  ...(label ? { label } : {}),
});

const ROUTES = [
  row("GET", "/v1/info"),
  row("POST", "/v1/exec"),
  row("DELETE", "/v1/sessions/{session_id}"),
  row("GET", "/keys/{key_id}/grants"),
  row("PUT", "/keys/{key_id}/policy"),
  row("GET", "/console"),
  row("GET", "/console/", "/console"),
];

describe("matching a request to its row", () => {
  test("a fixed path and its method", () => {
    const m = matchRoute(ROUTES, "POST", "/v1/exec");
    assert.equal(m.kind, "route");
    assert.equal(m.kind === "route" && m.route.path, "/v1/exec");
  });

  test("a {name} segment is handed over as sent", () => {
    const m = matchRoute(ROUTES, "PUT", "/keys/k%2F1/policy");
    assert.deepEqual(m.kind === "route" && m.params, { key_id: "k%2F1" });
    assert.deepEqual(
      (matchRoute(ROUTES, "DELETE", "/v1/sessions/abc") as { params: object }).params,
      { session_id: "abc" },
    );
  });

  test("a {name} takes exactly one non-empty segment", () => {
    for (const path of ["/v1/sessions/", "/v1/sessions/a/b", "/v1/sessions", "/keys//grants"])
      assert.equal(matchRoute(ROUTES, "DELETE", path).kind, "none", path);
  });

  test("a known path with another method is 405 naming the methods it takes, under its label", () => {
    assert.deepEqual(matchRoute(ROUTES, "GET", "/v1/exec"), {
      kind: "method",
      allow: ["POST"],
      label: "/v1/exec",
    });
    assert.deepEqual(matchRoute(ROUTES, "POST", "/console/"), {
      kind: "method",
      allow: ["GET"],
      label: "/console",
    });
  });

  test("paths are matched whole: no prefix, no trailing slash, no case folding", () => {
    for (const path of ["/v1/exec/", "/v1/exe", "/v1/exec/x", "/V1/exec", "v1/exec", "", "/"])
      assert.equal(matchRoute(ROUTES, "POST", path).kind, "none", path);
  });

  test("the first row that fits answers", () => {
    const first = row("GET", "/a/{x}");
    const second = row("GET", "/a/b");
    const m = matchRoute([first, second], "GET", "/a/b");
    assert.equal(m.kind === "route" && m.route, first);
  });
});
