import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { takeLease, type Lease } from "./lease.js";
import { parseManifest, type Manifest } from "./manifest.js";
import { MANIFEST_FILE, ROOTFS_PREFIX } from "./paths.js";
import { activeImage } from "./prune.js";
import { baseRecipeHash, recipeHash, resolveHostSources } from "./recipe.js";
import { settingsFrom, type ImageSettings } from "../schema/settings/values.js";

export const BUILD_COMMAND = "node scripts/build-images.mjs";

export interface LocatedRootfs {
  dir: string;
  manifest: Manifest;
}

export type FindResult = ({ ok: true } & LocatedRootfs) | { ok: false; error: string };

/** A served image; `stale` says why it is not the one the current recipe asks for. */
export type SelectResult =
  ({ ok: true; stale: string | null } & LocatedRootfs) | { ok: false; error: string };

function readImage(dir: string): FindResult {
  const manifestPath = join(dir, MANIFEST_FILE);
  if (!existsSync(manifestPath))
    return {
      ok: false,
      error: `no runtime image at ${dir}; build it with \`${BUILD_COMMAND}\` (as root, needs mmdebstrap and bubblewrap)`,
    };
  const parsed = parseManifest(readFileSync(manifestPath, "utf8"));
  if (!parsed.ok)
    return {
      ok: false,
      error: `${manifestPath}: ${parsed.error}; rebuild with \`${BUILD_COMMAND}\``,
    };
  return { ok: true, dir, manifest: parsed.manifest };
}

/**
 * Finds the built image of the current recipe, or says why there is none and how to build it.
 * `images` defaults to this process's settings only for scripts/build-images.mjs, whose bytes are
 * part of the recipe (changing it to pass them would rebuild every host's image); code passes them.
 */
export function findRootfs(images: ImageSettings = settingsFrom(process.env).images): FindResult {
  const src = resolveHostSources(images);
  if (!src.ok) return { ok: false, error: `cannot compute the image recipe: ${src.error}` };
  const hash = recipeHash(src.sources);
  const dir = join(images.dir, `${ROOTFS_PREFIX}${hash}`);
  const found = readImage(dir);
  if (!found.ok)
    return {
      ok: false,
      error: found.error.replace(/^no runtime image at/, `no runtime image for recipe ${hash} at`),
    };
  if (found.manifest.recipeHash !== hash)
    return {
      ok: false,
      error: `${join(dir, MANIFEST_FILE)} is for recipe ${found.manifest.recipeHash}, not ${hash}`,
    };
  return found;
}

/** The current image for the current recipe, or null when it has not been built. */
export function locateRootfs(images: ImageSettings): LocatedRootfs | null {
  const r = findRootfs(images);
  return r.ok ? { dir: r.dir, manifest: r.manifest } : null;
}

/** The recipe hash without the operator's config that an image was built from. */
export function imageBaseHash(manifest: Manifest): string {
  return manifest.baseRecipeHash ?? manifest.recipeHash;
}

/**
 * The image a server serves: the current recipe's if it is built; otherwise, when only the image
 * config differs (changed and not built yet, or invalid, or its build failed), the images
 * directory's active image, the last one a build finished, provided it was built from the same
 * base (same code, same host runtimes). A bad or unbuilt config never stops a server that has an
 * image; `stale` says what it serves instead and how to fix it.
 */
export function selectRootfs(images: ImageSettings): SelectResult {
  const exact = findRootfs(images);
  if (exact.ok) return { ...exact, stale: null };
  const src = resolveHostSources(images);
  const base = src.ok ? src.sources : src.base;
  if (!base) return exact;
  const active = activeImage(images.dir);
  if (!active) return exact;
  const found = readImage(active);
  if (!found.ok || imageBaseHash(found.manifest) !== baseRecipeHash(base)) return exact;
  const why = src.ok
    ? "the image config changed since this image was built and the new one is not built yet"
    : `the image config cannot be used (${src.error})`;
  return {
    ...found,
    stale: `${why}; serving the last image built, ${found.dir.slice(found.dir.lastIndexOf("/") + 1)}${found.manifest.extras?.config ? ` (from ${found.manifest.extras.config})` : ""}. Fix the config and run \`scratchrun image build\``,
  };
}

/**
 * Marks `dir` as in use by this process until the lease is released, so no build's prune removes
 * it; then checks it is still there (a prune renames an image aside before reading the leases
 * again, and gives it back if it finds this lease: wait for that).
 */
export function leaseRootfs(dir: string, root = join(dir, ".."), waitMs = 5000): Lease {
  const lease = takeLease(root, [dir]);
  for (let waited = 0; waited < waitMs && !existsSync(join(dir, MANIFEST_FILE)); waited += 100)
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  if (!existsSync(join(dir, MANIFEST_FILE))) {
    lease.release();
    throw new Error(`the runtime image ${dir} was removed while this server started; start again`);
  }
  return lease;
}
