// The egress a call gets and which pooled sandboxes may serve it (src/backends/egress.ts). The
// rule that matters for security: a call with an allowlist never lands on a pooled network that
// is not proxied (its code would reach every public destination), and a call without one never
// lands on a proxied network (it would be refused names it may reach).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  egressAllowlist,
  egressFor,
  networkModeOf,
  poolServes,
  type Egress,
} from "../../src/backends/egress.js";
import { parseAllowlist } from "../../src/net/allowlist.js";

const pypi = parseAllowlist("pypi.org,files.pythonhosted.org");
const github = parseAllowlist("*.github.com");

describe("egress", () => {
  test("a call's egress: none whatever the allowlist, public without one, the allowlist with one", () => {
    assert.deepEqual(egressFor("none", pypi), { kind: "none" });
    assert.deepEqual(egressFor("public", null), { kind: "public" });
    assert.deepEqual(egressFor("public"), { kind: "public" });
    const e = egressFor("public", pypi);
    assert.deepEqual(e, { kind: "allowlist", names: pypi });
    assert.equal(networkModeOf(e), "public");
    assert.equal(egressAllowlist(e), pypi);
    assert.equal(egressAllowlist(egressFor("none", pypi)), null);
    assert.equal(networkModeOf(egressFor("none", pypi)), "none");
  });

  test("a pooled network serves a call only when both are proxied or neither is", () => {
    const calls: [string, Egress][] = [
      ["none", egressFor("none")],
      ["public", egressFor("public")],
      ["pypi", egressFor("public", pypi)],
      ["github", egressFor("public", github)],
    ];
    const pools: [string, typeof pypi | null][] = [
      ["unrestricted", null],
      ["pypi", pypi],
    ];
    const served = calls.flatMap(([c, e]) =>
      pools.filter(([, p]) => poolServes(e, p)).map(([p]) => `${c} on ${p}`),
    );
    assert.deepEqual(served, [
      "none on unrestricted",
      "none on pypi",
      "public on unrestricted",
      // A proxied pool takes any allowlisted call: its allowlist is set before the code runs.
      "pypi on pypi",
      "github on pypi",
    ]);
  });
});
