import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseManifest, type Manifest } from "./manifest.js";
import { imagesDir, MANIFEST_FILE, ROOTFS_PREFIX } from "./paths.js";
import { recipeHash, resolveHostSources } from "./recipe.js";

export const BUILD_COMMAND = "node scripts/build-images.mjs";

export interface LocatedRootfs {
  dir: string;
  manifest: Manifest;
}

export type FindResult = ({ ok: true } & LocatedRootfs) | { ok: false; error: string };

/** Finds the built image of the current recipe, or says why there is none and how to build it. */
export function findRootfs(env: NodeJS.ProcessEnv = process.env): FindResult {
  const src = resolveHostSources(env);
  if (!src.ok) return { ok: false, error: `cannot compute the image recipe: ${src.error}` };
  const hash = recipeHash(src.sources);
  const dir = join(imagesDir(env), `${ROOTFS_PREFIX}${hash}`);
  const manifestPath = join(dir, MANIFEST_FILE);
  if (!existsSync(manifestPath))
    return {
      ok: false,
      error: `no runtime image for recipe ${hash} at ${dir}; build it with \`${BUILD_COMMAND}\` (as root, needs mmdebstrap and bubblewrap)`,
    };
  const parsed = parseManifest(readFileSync(manifestPath, "utf8"));
  if (!parsed.ok)
    return {
      ok: false,
      error: `${manifestPath}: ${parsed.error}; rebuild with \`${BUILD_COMMAND}\``,
    };
  if (parsed.manifest.recipeHash !== hash)
    return {
      ok: false,
      error: `${manifestPath} is for recipe ${parsed.manifest.recipeHash}, not ${hash}`,
    };
  return { ok: true, dir, manifest: parsed.manifest };
}

/** The current image for the current recipe, or null when it has not been built. */
export function locateRootfs(env: NodeJS.ProcessEnv = process.env): LocatedRootfs | null {
  const r = findRootfs(env);
  return r.ok ? { dir: r.dir, manifest: r.manifest } : null;
}
