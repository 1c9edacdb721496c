import { findRootfs, type LocatedRootfs } from "../../src/images/locate.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

/**
 * The built image of the current recipe. Missing is a failure, not a skip: CI builds the image
 * before the tests, and a developer is told the one command that builds it.
 */
export function requireImage(): LocatedRootfs {
  const found = findRootfs(settingsFrom(process.env).images);
  if (!found.ok) throw new Error(`runtime image missing: ${found.error}`);
  return { dir: found.dir, manifest: found.manifest };
}
