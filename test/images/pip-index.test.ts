import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { copyTree } from "../../src/images/copy-tree.js";
import type { LocatedRootfs } from "../../src/images/locate.js";
import { IN_IMAGE } from "../../src/runtimes/in-image.js";
import { pipIndexOf, unpinnedRequirements } from "../../src/images/pip-index.js";
import { recipeHash, resolveHostSources } from "../../src/images/recipe.js";
import { checkInRootfs, type Bind } from "../../src/images/rootfs-exec.js";
import { installedPackages, installFromIndex } from "../../src/images/wheelhouse.js";
import { requireImage } from "./built-image.js";
import { serveIndex, sha256File, type LocalIndex } from "./pep503-index.js";
import { writeWheel } from "./wheel-fixture.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

/** The index SCRATCHRUN_PIP_INDEX_URL and SCRATCHRUN_PYTHON312_REQUIREMENTS of `env` name. */
const pipIndexFrom = (env: Record<string, string>, defaultRequirements: string) =>
  pipIndexOf(settingsFrom(env).images, defaultRequirements);

// python3.12's packages from a package index (a PyPI mirror) with hash-pinned requirements: the
// build's own install function against a PEP 503 index this test serves on 127.0.0.1 from
// fixture wheels, into a scratch copy of the image's CPython 3.12 (the image is not written).
const H = "0".repeat(64);
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-pip-index-"));

describe("hash-pinned requirements (pure)", () => {
  test("every requirement needs an exact pin and a hash; options are refused", () => {
    const ok = `# comment\nnumpy==1.26.4 \\\n    --hash=sha256:${H}\n\nsix==1.16.0 --hash=sha256:${H}  # trailing\n`;
    assert.deepEqual(unpinnedRequirements(ok), []);
    const bad = [
      "numpy==1.26.4",
      `numpy>=1.26 --hash=sha256:${H}`,
      `numpy --hash=sha256:${H}`,
      `--index-url https://elsewhere/simple`,
      `--extra-index-url https://elsewhere/simple`,
      `-r other.txt`,
      `numpy==1.26.4 --hash=md5:${"0".repeat(32)}`,
      `https://example.com/x.whl --hash=sha256:${H}`,
    ];
    for (const line of bad) assert.deepEqual(unpinnedRequirements(line), [line], line);
  });

  test("the environment: unset is no index; bad URL, missing or unhashed file are errors", () => {
    const reqs = join(tmp, "pure-reqs.txt");
    writeFileSync(reqs, `six==1.16.0 --hash=sha256:${H}\n`);
    const unhashed = join(tmp, "unhashed.txt");
    writeFileSync(unhashed, "six==1.16.0\n");
    assert.deepEqual(pipIndexFrom({}, unhashed), { ok: true, index: null });
    const got = pipIndexFrom(
      {
        SCRATCHRUN_PIP_INDEX_URL: "https://m.example/simple",
        SCRATCHRUN_PYTHON312_REQUIREMENTS: reqs,
      },
      unhashed,
    );
    assert.ok(got.ok && got.index?.url === "https://m.example/simple");
    const errors = [
      pipIndexFrom({ SCRATCHRUN_PIP_INDEX_URL: "ftp://m.example/" }, reqs),
      pipIndexFrom({ SCRATCHRUN_PIP_INDEX_URL: "https://m.example/simple" }, unhashed),
      pipIndexFrom(
        {
          SCRATCHRUN_PIP_INDEX_URL: "https://m.example/simple",
          SCRATCHRUN_PYTHON312_REQUIREMENTS: join(tmp, "none"),
        },
        reqs,
      ),
      pipIndexFrom({ SCRATCHRUN_PYTHON312_REQUIREMENTS: reqs }, reqs),
    ];
    for (const e of errors) assert.equal(e.ok, false);
    const unhashedError = errors[1]!;
    assert.ok(
      !unhashedError.ok &&
        /--hash=sha256/.test(unhashedError.error) &&
        /six==1\.16\.0/.test(unhashedError.error),
    );
  });

  test("the shipped lock is hash-pinned: a private index installs it as it is", () => {
    const r = pipIndexFrom(
      { SCRATCHRUN_PIP_INDEX_URL: "https://m.example/simple" },
      join(process.cwd(), "images/rootfs/python-requirements.lock"),
    );
    assert.ok(r.ok && r.index, r.ok ? "" : r.error);
  });

  test("the index and its requirements are part of the image's recipe, only when set", () => {
    const reqs = join(tmp, "recipe-reqs.txt");
    writeFileSync(reqs, `six==1.16.0 --hash=sha256:${H}\n`);
    const plain = resolveHostSources(
      settingsFrom({ ...process.env, SCRATCHRUN_PIP_INDEX_URL: "" }).images,
    );
    assert.ok(plain.ok);
    assert.equal(plain.sources.pipIndex, null);
    const withIndex = resolveHostSources(
      settingsFrom({
        ...process.env,
        SCRATCHRUN_PIP_INDEX_URL: "https://m.example/simple",
        SCRATCHRUN_PYTHON312_REQUIREMENTS: reqs,
      }).images,
    );
    assert.ok(withIndex.ok);
    const a = recipeHash(withIndex.sources);
    assert.notEqual(a, recipeHash(plain.sources));
    assert.equal(recipeHash({ ...plain.sources, pipIndex: undefined }), recipeHash(plain.sources));
    writeFileSync(reqs, `six==1.16.0 --hash=sha256:${"1".repeat(64)}\n`);
    assert.notEqual(recipeHash(withIndex.sources), a, "a new hash in the file is a new image");
  });
});

describe("install from a local PEP 503 index into python3.12", () => {
  let image: LocatedRootfs;
  let index: LocalIndex;
  const pythonDir = join(tmp, "python3.12");
  const binds: Bind[] = [{ src: pythonDir, dest: IN_IMAGE.python312Prefix }];
  const wheels = join(tmp, "wheels");
  let probeHash: string;
  let depHash: string;

  before(async () => {
    image = requireImage();
    await copyTree(join(image.dir, IN_IMAGE.python312Prefix), pythonDir);
    mkdirSync(wheels);
    const probe = writeWheel(wheels, {
      name: "scratchrun_probe",
      version: "1.2.3",
      requires: ["scratchrun_dep==0.1"],
      files: {
        "scratchrun_probe/__init__.py": "from scratchrun_dep import VALUE\nANSWER = VALUE * 2\n",
      },
    });
    const dep = writeWheel(wheels, {
      name: "scratchrun_dep",
      version: "0.1",
      files: { "scratchrun_dep.py": "VALUE = 21\n" },
    });
    probeHash = sha256File(join(wheels, probe));
    depHash = sha256File(join(wheels, dep));
    index = await serveIndex(wheels);
  });
  after(async () => {
    await index?.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  function requirements(name: string, text: string) {
    const dir = join(tmp, name);
    mkdirSync(dir);
    writeFileSync(join(dir, "requirements.txt"), text);
    const r = pipIndexFrom(
      {
        SCRATCHRUN_PIP_INDEX_URL: index.url,
        SCRATCHRUN_PYTHON312_REQUIREMENTS: join(dir, "requirements.txt"),
      },
      "",
    );
    assert.ok(r.ok && r.index, r.ok ? "" : r.error);
    return r.index;
  }

  const sitePackages = () => join(pythonDir, "lib/python3.12/site-packages");

  test("a wrong hash is refused and nothing is installed", async () => {
    const idx = requirements(
      "wrong",
      `scratchrun-probe==1.2.3 --hash=sha256:${H}\nscratchrun-dep==0.1 --hash=sha256:${depHash}\n`,
    );
    await assert.rejects(
      installFromIndex({ rootfs: image.dir, pythonDir }, idx),
      /DO NOT MATCH THE HASHES/,
    );
    assert.equal(existsSync(join(sitePackages(), "scratchrun_probe")), false);
    assert.equal(existsSync(join(sitePackages(), "scratchrun_dep.py")), false);
  });

  test("a dependency the file does not pin is refused (--require-hashes)", async () => {
    const idx = requirements("nodep", `scratchrun-probe==1.2.3 --hash=sha256:${probeHash}\n`);
    await assert.rejects(
      installFromIndex({ rootfs: image.dir, pythonDir }, idx),
      /scratchrun.dep|hash/i,
    );
    assert.equal(existsSync(join(sitePackages(), "scratchrun_probe")), false);
  });

  test("the pinned set installs from the index, and python3.12 imports it", async () => {
    index.requests.length = 0;
    const idx = requirements(
      "good",
      `scratchrun-probe==1.2.3 \\\n  --hash=sha256:${probeHash}\nscratchrun-dep==0.1 --hash=sha256:${depHash}\n`,
    );
    await installFromIndex({ rootfs: image.dir, pythonDir }, idx);
    assert.ok(index.requests.includes("/simple/scratchrun-probe/"), index.requests.join(" "));
    assert.ok(index.requests.some((p) => p.startsWith("/files/scratchrun_dep-0.1")));
    const answer = await checkInRootfs({
      rootfs: image.dir,
      binds,
      argv: [IN_IMAGE.python312, "-c", "import scratchrun_probe; print(scratchrun_probe.ANSWER)"],
    });
    assert.equal(answer.trim(), "42");
    const pkgs = await installedPackages(image.dir, IN_IMAGE.python312, binds);
    assert.equal(pkgs.scratchrun_probe, "1.2.3");
    assert.equal(pkgs.scratchrun_dep, "0.1");
  });
});
