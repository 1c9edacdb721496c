import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { liveLeases } from "../../src/images/lease.js";
import { findRootfs } from "../../src/images/locate.js";
import { activeImage, pruneImages } from "../../src/images/prune.js";
import { recipeHash, resolveHostSources } from "../../src/images/recipe.js";
import { checkInRootfs } from "../../src/images/rootfs-exec.js";
import {
  CUSTOM_IMAGES_DIR,
  customConfig,
  customImage,
  EXTRAS,
  FIXTURE_DIR,
  type CustomImage,
} from "../helpers/custom-image.js";
import { REPO_ROOT, startServer, textOf } from "../helpers/mcp-client.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

// The shared test image (test/helpers/custom-image.ts: one Debian package, one python3.11 Debian
// package, one npm package, a fixture wheel and a directory of data files), checked inside the
// image; then invalid configs, each of which must fail with a clear error and change nothing, and
// a server that keeps its image while a build prunes.
let image: CustomImage;
before(async () => {
  image = await customImage();
});
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-custom-image-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");
const inImage = (argv: string[]) =>
  checkInRootfs({ rootfs: image.dir, argv, cwd: "/home/user" }).then((s) => s.trim());

/** Runs the CLI, streaming nothing; resolves with its exit code and output. */
function cli(args: string[], env: Record<string, string>) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("the test image holds what its config asked for", () => {
  test("the manifest lists each extra with the version the image holds", async () => {
    const m = image.manifest;
    const e = m.extras;
    assert.ok(e, "extras recorded");
    assert.equal(e.config, join(FIXTURE_DIR, "image.json"));
    const jq = await inImage(["/usr/bin/dpkg-query", "-W", "-f=${Version}", "jq"]);
    assert.deepEqual(e.debian, { jq });
    assert.deepEqual(m.runtimes.bash.packages, { jq }, "bash lists its Debian extras");
    const tab = await inImage([
      "/usr/bin/dpkg-query",
      "-W",
      "-f=${Version}",
      EXTRAS.python311.package,
    ]);
    assert.deepEqual(e["python3.11"], { [EXTRAS.python311.package]: tab });
    assert.match(m.runtimes["python3.11"].packages?.tabulate ?? "", /^\d/);
    assert.deepEqual(e.node20, { [EXTRAS.npm.name]: EXTRAS.npm.version });
    assert.deepEqual(m.runtimes.node20.packages, { [EXTRAS.npm.name]: EXTRAS.npm.version });
    assert.deepEqual(e["python3.12"], { [EXTRAS.wheel.name]: EXTRAS.wheel.version });
    assert.equal(m.runtimes["python3.12"].packages?.[EXTRAS.wheel.name], EXTRAS.wheel.version);
    assert.equal(e.files.length, 1);
    assert.equal(e.files[0]?.path, EXTRAS.files.target);
    assert.equal(e.files[0]?.files, 2);
    assert.equal(m.python312PackagesFrom, "wheelhouse");
  });

  test("its base is the default image's: same code, same host runtimes, only the config differs", () => {
    const src = resolveHostSources(
      settingsFrom({ ...process.env, SCRATCHRUN_IMAGE_CONFIG: "" }).images,
    );
    assert.ok(src.ok);
    assert.equal(image.manifest.baseRecipeHash, recipeHash(src.sources));
    assert.notEqual(image.manifest.recipeHash, image.manifest.baseRecipeHash);
  });

  test("each runtime uses its extra inside the image", async () => {
    assert.equal(await inImage(["/bin/bash", "-c", "jq -n '[1,2] | add'"]), "3");
    assert.equal(
      await inImage([
        "/usr/bin/python3.11",
        "-c",
        "import tabulate; print(tabulate.tabulate([[1]], tablefmt='plain'))",
      ]),
      "1",
    );
    assert.equal(
      await inImage([
        "/opt/python3.12/bin/python3.12",
        "-c",
        `import ${EXTRAS.wheel.name} as f; print(f.greet())`,
      ]),
      EXTRAS.wheel.answer,
    );
    assert.equal(
      await inImage([
        "/opt/node20/bin/node",
        "-e",
        `console.log(require("${EXTRAS.npm.name}")(5))`,
      ]),
      "true",
    );
    assert.equal(
      await inImage(["/bin/cat", `${EXTRAS.files.target}/greeting.txt`]),
      EXTRAS.files.contents["greeting.txt"].trim(),
    );
  });

  test("the npm tree: its lockfile pins the package by integrity, /node_modules points at it", () => {
    const lock = JSON.parse(
      readFileSync(join(image.dir, "usr/local/lib/scratchrun-npm/package-lock.json"), "utf8"),
    ) as { packages: Record<string, { version: string; integrity: string }> };
    const entry = lock.packages[`node_modules/${EXTRAS.npm.name}`];
    assert.equal(entry?.version, EXTRAS.npm.version);
    assert.match(entry?.integrity ?? "", /^sha512-/);
    assert.equal(
      readlinkSync(join(image.dir, "node_modules")),
      "usr/local/lib/scratchrun-npm/node_modules",
    );
    assert.equal(
      lstatSync(join(image.dir, "usr/local/lib/scratchrun-npm/node_modules", EXTRAS.npm.name)).uid,
      0,
    );
  });

  test("the default recipe's purge still ran: no compiler, and no mount point was written", () => {
    assert.throws(() => lstatSync(join(image.dir, "usr/bin/gcc")));
    for (const d of ["home/user", "run/scratchrun", "opt/scratchrun"])
      assert.deepEqual(readdirSync(join(image.dir, d)), [], d);
  });
});

/** A config in its own directory, its relative paths pointed at the fixture's wheels and data. */
function badConfig(name: string, value: Record<string, unknown>): string {
  const dir = join(tmp, name);
  mkdirSync(dir, { recursive: true });
  const path = join(dir, "image.json");
  const fixed = { ...value };
  if (fixed["python3.12"]) fixed["python3.12"] = { wheelhouse: join(FIXTURE_DIR, "wheels") };
  if (fixed.files)
    fixed.files = Object.fromEntries(
      Object.entries(fixed.files as Record<string, string>).map(([k, v]) => [
        k,
        join(FIXTURE_DIR, v),
      ]),
    );
  writeFileSync(path, JSON.stringify(fixed));
  return path;
}

describe("invalid configs: a clear error, and nothing changes", () => {
  const cases: [string, Record<string, unknown>, RegExp][] = [
    [
      "an unknown key",
      { ...customConfig(), packages: ["jq"] },
      /unknown key "packages" \(allowed: debian, python3\.11, node20, python3\.12, files\)/,
    ],
    [
      "a bad version",
      { ...customConfig(), node20: { packages: { "is-number": "^7.0.0" } } },
      /node20\.packages\["is-number"\]: "\^7\.0\.0" is not an exact version/,
    ],
    [
      "a path outside the image",
      { ...customConfig(), files: { "/usr/../../root/x": "data" } },
      /files\["\/usr\/\.\.\/\.\.\/root\/x"\]: leads outside the image/,
    ],
    [
      "a missing npm package",
      { ...customConfig(), node20: { packages: { "scratchrun-no-such-package-zz": "1.0.0" } } },
      /node20\.packages\["scratchrun-no-such-package-zz"\] \(scratchrun-no-such-package-zz@1\.0\.0\): npm could not install it:[\s\S]*404/,
    ],
    [
      "an npm version that does not exist",
      { ...customConfig(), node20: { packages: { "is-number": "99.0.0" } } },
      /node20\.packages\["is-number"\] \(is-number@99\.0\.0\): npm could not install it:[\s\S]*No matching version/,
    ],
    [
      "a missing Debian package",
      { ...customConfig(), debian: ["jq", "scratchrun-no-such-package"] },
      /debian\[1\]: bookworm has no Debian package "scratchrun-no-such-package" \(apt: Unable to locate package scratchrun-no-such-package\)/,
    ],
  ];
  for (const [why, value, message] of cases)
    test(`${why}: scratchrun image build fails naming the entry; the image and the active pointer stay`, async () => {
      const before = readdirSync(CUSTOM_IMAGES_DIR).sort();
      const config = badConfig(why.replace(/\W+/g, "-"), value);
      const r = await cli(["image", "build", "--image-config", config], {
        SCRATCHRUN_IMAGES: CUSTOM_IMAGES_DIR,
      });
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, message);
      assert.match(
        r.stderr,
        new RegExp(`nothing changed: servers keep serving ${image.dir}, and start with it`),
      );
      assert.equal(r.stdout, "");
      assert.deepEqual(
        readdirSync(CUSTOM_IMAGES_DIR).sort(),
        before,
        "no image added, none removed",
      );
      assert.equal(activeImage(CUSTOM_IMAGES_DIR), image.dir);
      assert.ok(findRootfs(settingsFrom(image.env).images).ok, "the good config's image is intact");
    });
});

describe("a server keeps serving through bad configs and builds", () => {
  test("started with an invalid config it serves the last image built, and says why", async () => {
    const config = badConfig("server-invalid", { ...customConfig(), debain: ["jq"] });
    const h = await startServer({
      SCRATCHRUN_ISOLATION: "namespace",
      SCRATCHRUN_POOL_SIZE: "0",
      SCRATCHRUN_IMAGES: CUSTOM_IMAGES_DIR,
      SCRATCHRUN_IMAGE_CONFIG: config,
    });
    try {
      assert.match(
        h.stderr(),
        /warning: the image config cannot be used \(image config .*unknown key "debain".*serving the last image built, rootfs-/,
      );
      const { s } = await h.exec({ runtime: "bash", code: "jq -n 1+1" });
      assert.equal(s.stdout, "2\n", s.stderr);
      const runtimes = textOf(
        (await h.client.callTool({ name: "scratchrun_runtimes", arguments: {} })) as Parameters<
          typeof textOf
        >[0],
      );
      assert.match(runtimes, /^note: the image config cannot be used/m);

      // While it serves, its image is leased: a build's prune in this directory keeps it.
      const held = liveLeases(CUSTOM_IMAGES_DIR).get(image.dir) ?? [];
      assert.equal(held.length, 1, "one live server holds the image");
      const outcome = pruneImages(CUSTOM_IMAGES_DIR, join(CUSTOM_IMAGES_DIR, "rootfs-none"));
      assert.deepEqual(outcome.removed, []);
      assert.deepEqual(
        outcome.inUse.map((u) => u.dir),
        [image.dir],
      );
      const again = await h.exec({ runtime: "bash", code: "jq -n 2+2" });
      assert.equal(again.s.stdout, "4\n");

      // A build that fails while it serves changes nothing it uses.
      const failing = badConfig("server-failing", {
        ...customConfig(),
        node20: { packages: { "scratchrun-no-such-package-zz": "1.0.0" } },
      });
      const r = await cli(["image", "build", "--image-config", failing], {
        SCRATCHRUN_IMAGES: CUSTOM_IMAGES_DIR,
      });
      assert.equal(r.code, 1);
      const after = await h.exec({
        runtime: "node20",
        code: 'console.log(require("is-number")(3))',
      });
      assert.equal(after.s.stdout, "true\n", after.s.stderr);
    } finally {
      await h.close();
    }
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(
      liveLeases(CUSTOM_IMAGES_DIR).get(image.dir),
      undefined,
      "released when it stopped",
    );
  });

  test("doctor: what the image holds per runtime with versions, and the stale config as a warning", async () => {
    const good = await cli(["doctor"], image.env);
    assert.match(
      good.stdout,
      new RegExp(
        `^ok\\s+image config: ${FIXTURE_DIR}/image\\.json: built; adds 1 Debian, 1 python3\\.11, 1 python3\\.12 and 1 npm package\\(s\\), 1 file entry$`,
        "m",
      ),
    );
    assert.match(
      good.stdout,
      /^ok\s+runtime node20: v20\.\d+\.\d+; packages: is-number 7\.0\.0 \(image config\)$/m,
    );
    assert.match(good.stdout, /^ok\s+runtime bash: 5\.[^;]*; packages: jq \S+ \(image config\)$/m);
    assert.match(
      good.stdout,
      /^ok\s+runtime python3\.12: 3\.12\.\d+; packages: .*scratchrun_fixture 1\.0\.0 \(image config\)/m,
    );
    assert.match(
      good.stdout,
      /^ok\s+runtime python3\.11: 3\.11\.\d+; packages: .*tabulate \S+.*; from the image config: python3-tabulate \S+$/m,
    );
    const changed = badConfig("doctor-changed", { ...customConfig(), debian: ["jq", "bc"] });
    const stale = await cli(["doctor", "--image-config", changed], {
      SCRATCHRUN_IMAGES: CUSTOM_IMAGES_DIR,
    });
    assert.match(
      stale.stdout,
      /^warn\s+image config: the image config changed since this image was built and the new one is not built yet; serving the last image built/m,
    );
    assert.match(stale.stdout, /fix: fix .* if it is invalid, then scratchrun image build/);
  });
});
