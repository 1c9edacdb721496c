import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Manifest } from "../../src/images/manifest.js";
import { python312PackagesCheck, python313PackagesCheck } from "../../src/cli/doctor-checks.js";

// What `scratchrun doctor` says about python3.12's packages, from the image's manifest.
function manifest(
  from: Manifest["python312PackagesFrom"],
  packages: Record<string, string>,
  py313: { from: Manifest["python313PackagesFrom"]; packages?: Record<string, string> } = {
    from: "none",
  },
) {
  return {
    format: 1,
    recipeHash: "x",
    builtAt: "2024-01-01T00:00:00.000Z",
    sizeBytes: 1,
    env: {},
    runtimes: {
      "python3.12": { argv: ["/p"], version: "3.12.1", packages },
      "python3.11": { argv: ["/p"], version: "3.11.2" },
      node20: { argv: ["/n"], version: "v20.0.0" },
      bash: { argv: ["/b"], version: "5" },
      "python3.13": { argv: ["/p13"], version: "3.13.0", packages: py313.packages ?? {} },
      node24: { argv: ["/n24"], version: "v24.22.3" },
    },
    python312PackagesFrom: from,
    python313PackagesFrom: py313.from,
    notes: [],
  } as Manifest;
}

const STACK = {
  numpy: "1.26.4",
  pandas: "2.2.3",
  matplotlib: "3.9.2",
  Pillow: "11.0.0",
  scipy: "1.14.1",
};

describe("doctor: python3.12's packages", () => {
  test("standard library only: a warning naming what is missing and both ways to get it", () => {
    const c = python312PackagesCheck(manifest("none", { pip: "23.2.1" }));
    assert.equal(c.ok, false);
    assert.match(c.detail, /standard library only \(no numpy, pandas, matplotlib, pillow, scipy\)/);
    assert.match(c.fix ?? "", /SCRATCHRUN_WHEELHOUSE=/);
    assert.match(c.fix ?? "", /SCRATCHRUN_PIP_INDEX_URL=.*SCRATCHRUN_PYTHON312_REQUIREMENTS=/);
    assert.match(c.fix ?? "", /setup/);
  });

  test("a wheelhouse that left one out: a warning naming it", () => {
    const { scipy: _, ...partial } = STACK;
    const c = python312PackagesCheck(manifest("wheelhouse", partial));
    assert.equal(c.ok, false);
    assert.match(c.detail, /lacks scipy \(packages from wheelhouse\)/);
  });

  test("the whole stack: ok with the versions (package names in any case)", () => {
    const c = python312PackagesCheck(manifest("index", STACK));
    assert.equal(c.ok, true);
    assert.equal(
      c.detail,
      "from index: numpy 1.26.4, pandas 2.2.3, matplotlib 3.9.2, pillow 11.0.0, scipy 1.14.1",
    );
  });
});

describe("doctor: python3.13's packages", () => {
  test("standard library only: a warning saying the host's pip reached no index, and the fix", () => {
    const c = python313PackagesCheck(manifest("pypi", STACK, { from: "none" }));
    assert.equal(c.ok, false);
    assert.match(c.detail, /^python3\.13 has the standard library only \(no numpy, pandas, /);
    assert.match(c.detail, /the host's pip reached no package index/);
    assert.match(c.fix ?? "", /package index.*then run .*setup/);
  });

  test("the lock's stack: ok with the versions", () => {
    const c = python313PackagesCheck(manifest("none", {}, { from: "pypi", packages: STACK }));
    assert.equal(c.ok, true);
    assert.match(c.detail, /^from the lock: numpy 1\.26\.4, pandas 2\.2\.3, /);
  });
});
