import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { copyTree } from "../../src/images/copy-tree.js";
import type { LocatedRootfs } from "../../src/images/locate.js";
import { IN_IMAGE } from "../../src/runtimes/in-image.js";
import { checkInRootfs, type Bind } from "../../src/images/rootfs-exec.js";
import { installedPackages, installWheelhouse } from "../../src/images/wheelhouse.js";
import { requireImage } from "./built-image.js";
import { writeWheel } from "./wheel-fixture.js";

// Installs hand-written wheels into a scratch copy of the image's CPython 3.12, mounted over
// /opt/python3.12 of the read-only image: the same function the build uses, without a rebuild.
let image: LocatedRootfs;
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-wheelhouse-"));
const pythonDir = join(tmp, "python3.12");
const binds: Bind[] = [{ src: pythonDir, dest: IN_IMAGE.python312Prefix }];

before(async () => {
  image = requireImage();
  await copyTree(join(image.dir, IN_IMAGE.python312Prefix), pythonDir);
});
after(() => rmSync(tmp, { recursive: true, force: true }));

function wheelhouse(name: string): string {
  const dir = join(tmp, name);
  mkdirSync(dir);
  return dir;
}

describe("wheelhouse install into python3.12", () => {
  test("installs every wheel present, dependencies resolved offline", async () => {
    const wh = wheelhouse("good");
    writeWheel(wh, {
      name: "scratchrun_probe",
      version: "1.2.3",
      requires: ["scratchrun_dep==0.1"],
      files: {
        "scratchrun_probe/__init__.py": "from scratchrun_dep import VALUE\nANSWER = VALUE * 2\n",
      },
    });
    writeWheel(wh, {
      name: "scratchrun_dep",
      version: "0.1",
      files: { "scratchrun_dep.py": "VALUE = 21\n" },
    });
    const installed = await installWheelhouse({ rootfs: image.dir, pythonDir }, wh);
    assert.equal(installed.length, 2);

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

  test("the built image itself was not written", () => {
    const site = join(image.dir, IN_IMAGE.python312Prefix, "lib/python3.12/site-packages");
    assert.deepEqual(
      readdirSync(site).filter((n) => n.startsWith("scratchrun")),
      [],
    );
  });

  test("a wheel whose dependency is absent fails the install (no index to fall back on)", async () => {
    const wh = wheelhouse("missing-dep");
    writeWheel(wh, {
      name: "scratchrun_lonely",
      version: "1.0",
      requires: ["scratchrun_nowhere>=1"],
      files: { "scratchrun_lonely.py": "" },
    });
    await assert.rejects(
      installWheelhouse({ rootfs: image.dir, pythonDir }, wh),
      /scratchrun_nowhere|failed/,
    );
    assert.equal(
      existsSync(join(pythonDir, "lib/python3.12/site-packages/scratchrun_lonely.py")),
      false,
    );
  });

  test("an empty wheelhouse is an error, not a silent no-op", async () => {
    const wh = wheelhouse("empty");
    await assert.rejects(installWheelhouse({ rootfs: image.dir, pythonDir }, wh), /no \.whl/);
  });
});
