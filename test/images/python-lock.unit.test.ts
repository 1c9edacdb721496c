import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { unpinnedRequirements } from "../../src/images/pip-index.js";
import {
  LOCK_TARGETS,
  listNames,
  lockDisagreements,
  lockLinesFor,
  mergeResolutions,
  parseLock,
  parseReport,
  pipTargetArgs,
  renderLock,
  targetPlatforms,
  type ResolvedWheel,
} from "../../src/images/python-lock.js";

// The Python stack's lock against its list: the shipped pair agrees, and each way they can
// drift apart is caught. The functions are pure; pip's side is test/images/wheel-cache.test.ts.
const recipe = (name: string) => readFileSync(join(process.cwd(), "images/rootfs", name), "utf8");
const h = (c: string) => c.repeat(64);

describe("the shipped lock", () => {
  const list = recipe("python-requirements.in");
  const lockText = recipe("python-requirements.lock");
  const lock = parseLock(lockText);

  test("agrees with the list (run node scripts/lock-python.mjs when this fails)", () => {
    assert.deepEqual(lockDisagreements(list, lockText), []);
  });

  test("pins every package exactly, with a hash, and nothing pip would read as an option", () => {
    assert.deepEqual(unpinnedRequirements(lockText), []);
    assert.ok(lock.packages.length >= listNames(list).length);
    for (const p of lock.packages) assert.ok(p.hashes.length >= 1, p.name);
  });

  test("covers every target, and the issue's stack is in it at current majors", () => {
    assert.deepEqual(
      lock.targets,
      LOCK_TARGETS.map((t) => t.python),
    );
    const version = (n: string) => lock.packages.find((p) => p.name === n)?.version ?? "";
    assert.match(version("numpy"), /^2\./);
    assert.match(version("pandas"), /^3\./);
    assert.match(version("matplotlib"), /^3\.(1[1-9]|[2-9]\d)\./);
    for (const n of ["scipy", "pillow", "scikit-learn", "sympy", "seaborn", "statsmodels"])
      assert.ok(version(n), `${n} is locked`);
  });
});

describe("lock and list (pure)", () => {
  const t312 = LOCK_TARGETS[0]!;
  const t313 = LOCK_TARGETS[1]!;
  const wheel = (name: string, version: string, file: string, c: string): ResolvedWheel => ({
    name,
    version,
    file,
    sha256: h(c),
  });
  const list = "# the list\nalpha\nBeta_Pkg>=2\n";
  const resolved = new Map([
    [
      t312,
      [
        wheel("alpha", "1.0", "alpha-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", "a"),
        wheel("beta-pkg", "2.1", "beta_pkg-2.1-py3-none-any.whl", "b"),
        wheel("gamma", "0.5", "gamma-0.5-py3-none-any.whl", "c"),
      ],
    ],
    [
      t313,
      [
        wheel("alpha", "1.0", "alpha-1.0-cp313-cp313-manylinux_2_17_x86_64.whl", "d"),
        wheel("beta-pkg", "2.1", "beta_pkg-2.1-py3-none-any.whl", "b"),
        wheel("gamma", "0.6", "gamma-0.6-py3-none-any.whl", "e"),
      ],
    ],
  ]);

  test("one pin per package with every target's hashes; a split version is marked per target", () => {
    const lock = mergeResolutions(list, resolved);
    const text = renderLock(lock);
    assert.deepEqual(parseLock(text), lock, "renders and parses back");
    const alpha = lock.packages.find((p) => p.name === "alpha")!;
    assert.deepEqual(alpha.hashes, [h("a"), h("d")]);
    assert.equal(alpha.marker, null);
    const gammas = lock.packages.filter((p) => p.name === "gamma");
    assert.deepEqual(
      gammas.map((g) => [g.version, g.marker]),
      [
        ["0.5", 'python_version == "3.12"'],
        ["0.6", 'python_version == "3.13"'],
      ],
    );
    assert.equal(lock.probe, "beta-pkg", "the probe is a pure-Python wheel");
    assert.match(lockLinesFor(lock, "gamma"), /gamma==0\.5 ; python_version == "3\.12" --hash/);
    assert.deepEqual(lockDisagreements(list, text), []);
  });

  test("a changed list, a name not locked, a missing target and a bad line are each caught", () => {
    const text = renderLock(mergeResolutions(list, resolved));
    assert.match(lockDisagreements(`${list}delta\n`, text).join("\n"), /changed since/);
    assert.match(
      lockDisagreements(`${list}delta\n`, text).join("\n"),
      /delta is listed but not locked/,
    );
    const one = renderLock(mergeResolutions(list, new Map([[t312, resolved.get(t312)!]])));
    assert.match(lockDisagreements(list, one).join("\n"), /no wheels for python 3\.13/);
    assert.throws(() => parseLock(`${text}evil --index-url http://x/\n`), /cannot read: evil/);
    assert.throws(() => parseLock(text.replace(/^# probe:.*$/m, "")), /no "# probe:" line/);
    assert.throws(() => listNames("-e .\n"), /not a requirement: -e \./);
  });

  test("pip's report: wheels only, each with its sha256", () => {
    const item = (url: string, sha?: string) => ({
      metadata: { name: "Alpha_X", version: "1.0" },
      download_info: { url, archive_info: sha ? { hashes: { sha256: sha } } : {} },
    });
    const ok = parseReport(
      JSON.stringify({
        install: [item("https://f/alpha_x-1.0-py3-none-any.whl#sha256=x", h("a"))],
      }),
    );
    assert.deepEqual(ok, [
      { name: "alpha-x", version: "1.0", file: "alpha_x-1.0-py3-none-any.whl", sha256: h("a") },
    ]);
    assert.throws(
      () =>
        parseReport(JSON.stringify({ install: [item("https://f/alpha_x-1.0.tar.gz", h("a"))] })),
      /not a wheel/,
    );
    assert.throws(
      () =>
        parseReport(JSON.stringify({ install: [item("https://f/alpha_x-1.0-py3-none-any.whl")] })),
      /no sha256/,
    );
  });

  test("the target's platforms are the image's glibc and older, binary wheels only", () => {
    const tags = targetPlatforms();
    assert.equal(tags[0], "manylinux_2_36_x86_64");
    assert.ok(tags.includes("manylinux_2_17_x86_64") && tags.includes("manylinux2014_x86_64"));
    assert.ok(
      !tags.some((t) => /manylinux_2_(3[7-9]|[4-9]\d)_/.test(t)),
      "nothing newer than bookworm",
    );
    const args = pipTargetArgs(t313);
    assert.ok(args.includes("--only-binary=:all:"));
    assert.equal(args[args.indexOf("--abi") + 1], "cp313");
  });
});
