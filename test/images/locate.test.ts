import assert from "node:assert/strict";
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { copyTree } from "../../src/images/copy-tree.js";
import { BUILD_COMMAND, findRootfs, locateRootfs } from "../../src/images/locate.js";
import { recipeHash, resolveHostSources } from "../../src/images/recipe.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

const tmp = mkdtempSync(join(tmpdir(), "scratchrun-locate-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

describe("locating the image of the current recipe", () => {
  const sources = resolveHostSources(settingsFrom(process.env).images);
  if (!sources.ok) throw new Error(sources.error);
  const hash = recipeHash(sources.sources);
  const manifest = (recipe: string) =>
    JSON.stringify({
      format: 1,
      recipeHash: recipe,
      builtAt: "2024-01-01T00:00:00.000Z",
      sizeBytes: 1,
      env: {},
      runtimes: {
        "python3.12": { argv: ["/p"], version: "3.12.1" },
        "python3.11": { argv: ["/p"], version: "3.11.2" },
        node20: { argv: ["/n"], version: "v20.0.0" },
        bash: { argv: ["/b"], version: "5" },
        "python3.13": { argv: ["/p"], version: "3.13.0" },
        node24: { argv: ["/n"], version: "v24.0.0" },
      },
      python312PackagesFrom: "none",
      python313PackagesFrom: "none",
      notes: [],
    });
  const imagesAt = (name: string) => {
    const dir = join(tmp, name);
    mkdirSync(dir);
    return { env: { ...process.env, SCRATCHRUN_IMAGES: dir }, dir };
  };

  test("nothing built: the error names the build command", () => {
    const { env } = imagesAt("empty");
    const r = findRootfs(settingsFrom(env).images);
    assert.equal(r.ok, false);
    assert.ok(!r.ok && r.error.includes(BUILD_COMMAND));
    assert.equal(locateRootfs(settingsFrom(env).images), null);
  });

  test("a half-built image (no manifest, or still under its temp name) is not found", () => {
    const { env, dir } = imagesAt("half");
    mkdirSync(join(dir, `rootfs-${hash}`));
    mkdirSync(join(dir, `.building-${hash}-1`));
    writeFileSync(join(dir, `.building-${hash}-1`, "manifest.json"), manifest(hash));
    assert.equal(locateRootfs(settingsFrom(env).images), null);
  });

  test("a damaged manifest is not trusted", () => {
    const { env, dir } = imagesAt("damaged");
    mkdirSync(join(dir, `rootfs-${hash}`));
    writeFileSync(join(dir, `rootfs-${hash}`, "manifest.json"), manifest(hash).slice(0, 40));
    assert.equal(locateRootfs(settingsFrom(env).images), null);
  });

  test("a manifest for another recipe is not trusted", () => {
    const { env, dir } = imagesAt("foreign");
    mkdirSync(join(dir, `rootfs-${hash}`));
    writeFileSync(join(dir, `rootfs-${hash}`, "manifest.json"), manifest("ffffffffffffffff"));
    assert.equal(locateRootfs(settingsFrom(env).images), null);
  });

  test("an image of an older recipe is not the current one", () => {
    const { env, dir } = imagesAt("older");
    mkdirSync(join(dir, "rootfs-0000000000000000"));
    writeFileSync(
      join(dir, "rootfs-0000000000000000", "manifest.json"),
      manifest("0000000000000000"),
    );
    assert.equal(locateRootfs(settingsFrom(env).images), null);
  });

  test("the complete image of this recipe is found", () => {
    const { env, dir } = imagesAt("complete");
    mkdirSync(join(dir, `rootfs-${hash}`));
    writeFileSync(join(dir, `rootfs-${hash}`, "manifest.json"), manifest(hash));
    const found = locateRootfs(settingsFrom(env).images);
    assert.equal(found?.dir, join(dir, `rootfs-${hash}`));
    assert.equal(found?.manifest.recipeHash, hash);
  });
});

describe("copying a tree", () => {
  test("keeps modes, mtimes and symlinks verbatim; skips what is excluded", async () => {
    const src = join(tmp, "src");
    mkdirSync(join(src, "bin"), { recursive: true });
    mkdirSync(join(src, "skip/deep"), { recursive: true });
    writeFileSync(join(src, "bin/tool"), "#!/bin/sh\n");
    chmodSync(join(src, "bin/tool"), 0o751);
    utimesSync(join(src, "bin/tool"), 1_000_000, 1_000_000);
    writeFileSync(join(src, "skip/deep/x"), "x");
    symlinkSync("/etc/shadow", join(src, "abs-link"));
    symlinkSync("bin/tool", join(src, "rel-link"));
    symlinkSync("missing", join(src, "dangling"));
    const dest = join(tmp, "dest");
    const stats = await copyTree(src, dest, { exclude: (rel) => rel === "skip" });
    assert.equal(stats.files, 1);
    assert.equal(statSync(join(dest, "bin/tool")).mode & 0o7777, 0o751);
    assert.equal(statSync(join(dest, "bin/tool")).mtimeMs, 1_000_000_000);
    assert.equal(readFileSync(join(dest, "bin/tool"), "utf8"), "#!/bin/sh\n");
    // Symlinks are recreated, never followed: the host's /etc/shadow is not copied.
    assert.ok(lstatSync(join(dest, "abs-link")).isSymbolicLink());
    assert.equal(readlinkSync(join(dest, "abs-link")), "/etc/shadow");
    assert.equal(readlinkSync(join(dest, "rel-link")), "bin/tool");
    assert.equal(readlinkSync(join(dest, "dangling")), "missing");
    assert.throws(() => lstatSync(join(dest, "skip")), /ENOENT/);
  });
});
