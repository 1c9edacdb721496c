import { createHash } from "node:crypto";
import { lstatSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import type { ImageConfig } from "./config.js";
import { listWheels } from "./wheels.js";

export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/**
 * sha256 over a file or directory tree: every entry's relative path, kind, permission bits and
 * content (a symlink: its target, never followed), in sorted order. What the image would get.
 */
export function treeDigest(path: string): string {
  const h = createHash("sha256");
  const walk = (abs: string, rel: string): void => {
    const st = lstatSync(abs);
    const mode = (st.mode & 0o777).toString(8);
    if (st.isSymbolicLink()) h.update(`l\0${rel}\0${readlinkSync(abs)}\0`);
    else if (st.isDirectory()) {
      h.update(`d\0${rel}\0${mode}\0`);
      for (const name of readdirSync(abs).sort())
        walk(join(abs, name), rel ? `${rel}/${name}` : name);
    } else if (st.isFile()) h.update(`f\0${rel}\0${mode}\0${sha256Hex(readFileSync(abs))}\0`);
    else h.update(`o\0${rel}\0`);
  };
  walk(path, "");
  return h.digest("hex");
}

/**
 * The config as the image's recipe sees it: what it asks for and the content of every file it
 * names, never where the config or its files live (moving them rebuilds nothing; changing a byte
 * of a wheel, a lockfile or an extra file does). Canonical JSON, stable across key order.
 */
export function configRecipe(config: ImageConfig): string {
  const py = config.python312;
  const recipe = {
    debian: config.debian.map((p) => (p.version ? `${p.name}=${p.version}` : p.name)),
    python311: config.python311.map((p) => (p.version ? `${p.name}=${p.version}` : p.name)),
    npm: config.npm
      ? {
          packages: Object.entries(config.npm.packages).sort(([a], [b]) => (a < b ? -1 : 1)),
          lockfile: config.npm.lockfile ? sha256Hex(readFileSync(config.npm.lockfile)) : null,
        }
      : null,
    python312: !py
      ? null
      : py.kind === "wheelhouse"
        ? {
            wheelhouse: listWheels(py.wheelhouse).map((w) => [
              w,
              sha256Hex(readFileSync(join(py.wheelhouse, w))),
            ]),
          }
        : { index: py.url, requirements: sha256Hex(readFileSync(py.requirements)) },
    files: config.files.map((f) => [f.target, treeDigest(f.source)]),
  };
  return JSON.stringify(recipe);
}
