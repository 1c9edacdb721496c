import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureRootDisk } from "../../src/images/vm/build.js";
import { buildRootfs } from "../../src/images/build.js";
import type { Manifest } from "../../src/images/manifest.js";
import { settingsFrom } from "../../src/schema/settings/values.js";
import { setting } from "../../src/schema/settings/read.js";
import { writeWheel } from "../images/wheel-fixture.js";

/**
 * The one test image with every kind of extra, built on first use and shared by every test file
 * (a build takes minutes; cached by its recipe hash, later uses take a second). It lives in its
 * own images directory beside the default one, so building or pruning it never touches the image
 * the other suites use; its config and fixtures are written to a stable place with the same bytes
 * every time, so its hash only changes when the code or the recipe does.
 */
export const CUSTOM_IMAGES_DIR =
  setting("SCRATCHRUN_TEST_CUSTOM_IMAGES", process.env) ??
  `${settingsFrom(process.env).images.dir}-custom`;
export const FIXTURE_DIR = `${CUSTOM_IMAGES_DIR}-fixture`;
export const CUSTOM_CONFIG = join(FIXTURE_DIR, "image.json");

/** What the test image adds, as the tests check it. */
export const EXTRAS = {
  /** A Debian package used from bash. */
  debian: "jq",
  /** A Debian python3-* package for python3.11, and the module it provides. */
  python311: { package: "python3-tabulate", module: "tabulate" },
  /** A tiny dependency-free npm package for node20. */
  npm: { name: "is-number", version: "7.0.0" },
  /** A fixture wheel for python3.12 (test/images/wheel-fixture.ts). */
  wheel: { name: "scratchrun_fixture", version: "1.0.0", answer: "hello from a wheel" },
  /** An extra directory of data files. */
  files: {
    target: "/usr/local/share/scratchrun-test",
    contents: { "greeting.txt": "hello from an extra file\n", "nested/n.csv": "a,b\n1,2\n" },
  },
} as const;

/** The config text of the test image (also the base of the invalid-config tests). */
export function customConfig(): Record<string, unknown> {
  return {
    debian: [EXTRAS.debian],
    "python3.11": [EXTRAS.python311.package],
    node20: { packages: { [EXTRAS.npm.name]: EXTRAS.npm.version } },
    "python3.12": { wheelhouse: "wheels" },
    files: { [EXTRAS.files.target]: "data" },
  };
}

/** Writes the config and its fixtures (same bytes every time) and returns the config's path. */
export function writeCustomFixture(dir = FIXTURE_DIR): string {
  mkdirSync(join(dir, "wheels"), { recursive: true });
  writeWheel(join(dir, "wheels"), {
    name: EXTRAS.wheel.name,
    version: EXTRAS.wheel.version,
    files: {
      [`${EXTRAS.wheel.name}/__init__.py`]: `def greet():\n    return ${JSON.stringify(EXTRAS.wheel.answer)}\n`,
    },
  });
  for (const [rel, text] of Object.entries(EXTRAS.files.contents)) {
    const path = join(dir, "data", rel);
    mkdirSync(join(path, ".."), { recursive: true, mode: 0o755 });
    writeFileSync(path, text, { mode: 0o644 });
  }
  const config = join(dir, "image.json");
  writeFileSync(config, `${JSON.stringify(customConfig(), null, 2)}\n`);
  return config;
}

export interface CustomImage {
  dir: string;
  manifest: Manifest;
  /** The environment a server (or a build) needs to use this image. */
  env: Record<string, string>;
}

let built: Promise<CustomImage> | undefined;

/**
 * Builds the test image unless its recipe's image exists, and its microVM root disk, once per
 * process. Progress goes to stderr (a first build takes a few minutes).
 */
export function customImage(): Promise<CustomImage> {
  built ??= (async () => {
    const config = writeCustomFixture();
    const env = { SCRATCHRUN_IMAGES: CUSTOM_IMAGES_DIR, SCRATCHRUN_IMAGE_CONFIG: config };
    const result = await buildRootfs({
      images: settingsFrom({ ...process.env, ...env }).images,
      env: { ...process.env, ...env },
      onProgress: (line) => process.stderr.write(`[custom image] ${line}\n`),
    });
    ensureRootDisk(result.dir, settingsFrom(process.env).images.vmCache);
    return { dir: result.dir, manifest: result.manifest, env };
  })();
  return built;
}
