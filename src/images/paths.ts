import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The package root (holds images/, scripts/, dist/); this file lives at dist/src/images/. */
export const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

/** True in a source checkout (TypeScript beside the build), false in a package npm installed. */
export function isSourceCheckout(root: string = PACKAGE_ROOT): boolean {
  return existsSync(join(root, "tsconfig.json"));
}

/**
 * The one command that installs and builds what local mode needs, for this copy of ScratchRun
 * (`scratchrun setup`, src/cli/setup.ts): the fix a missing image or agent names.
 */
export function setupCommand(root: string = PACKAGE_ROOT): string {
  return isSourceCheckout(root)
    ? "npm run setup (as root)"
    : "npx -y scratchrun-mcp setup (as root)";
}

/** The recipe files of the runtime root filesystem (package list, pins, config). */
export const RECIPE_DIR = join(PACKAGE_ROOT, "images", "rootfs");

/** The command-line entry that builds the image (its content is part of the recipe). */
export const BUILD_SCRIPT = join(PACKAGE_ROOT, "scripts", "build-images.mjs");

// Where built images and the build's caches live are settings (SCRATCHRUN_IMAGES,
// SCRATCHRUN_WHEEL_CACHE): `images` of src/schema/settings/values.ts, parsed with the others.

/**
 * Where the host's npm keeps the pinned Node.js tarballs between builds (images/rootfs/node20.json, node24.json):
 * `node` beside the images directory.
 */
export function nodeCacheDir(imagesDir: string): string {
  return join(dirname(imagesDir), "node");
}

/** The lock of python3.12's stack, installed from the host pip's index at build time. */
export const PYTHON_LOCK_FILE = "python-requirements.lock";

export const ROOTFS_PREFIX = "rootfs-";
export const MANIFEST_FILE = "manifest.json";

/** Where the image keeps matplotlib's prebuilt font cache (relative to the rootfs). */
export const MATPLOTLIB_CACHE_DIR = "usr/share/scratchrun/matplotlib";
