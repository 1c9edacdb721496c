import { spawnSync } from "node:child_process";
import { createHash, type Hash } from "node:crypto";
import { existsSync, readFileSync, realpathSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { ImageConfig } from "./config.js";
import { imageConfigFromEnv } from "./config-load.js";
import { configRecipe } from "./config-hash.js";
import { BUILD_SCRIPT, PYTHON_LOCK_FILE, RECIPE_DIR } from "./paths.js";
import { listWheels } from "./wheels.js";
import { pipIndexFromEnv, type PipIndex } from "./pip-index.js";

/** What the image is built from on this host, besides the Debian packages. */
export interface HostSources {
  /** Prefix of a CPython 3.12 install (bin/python3.12, lib/python3.12). */
  python312Prefix: string;
  python312Version: string;
  /** Real path of a Node.js 20 binary. */
  node20Path: string;
  node20Version: string;
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

const PY312_DEFAULT = "3.12.1";

function candidatePython312Prefixes(env: NodeJS.ProcessEnv): string[] {
  if (env.SCRATCHRUN_PYTHON312) return [env.SCRATCHRUN_PYTHON312];
  const out: string[] = [];
  const pyenv = spawnSync("pyenv", ["prefix", PY312_DEFAULT], { encoding: "utf8" });
  if (pyenv.status === 0 && pyenv.stdout.trim()) out.push(pyenv.stdout.trim());
  out.push(join(homedir(), ".pyenv/versions", PY312_DEFAULT));
  out.push(join("/root/.pyenv/versions", PY312_DEFAULT));
  return out;
}

function versionOf(binary: string, args: string[]): string | null {
  const r = spawnSync(binary, args, { encoding: "utf8", timeout: 30_000 });
  if (r.status !== 0) return null;
  return `${r.stdout}${r.stderr}`.trim();
}

/** Finds the host's CPython 3.12 and Node.js 20 (env overrides first) and reads their versions. */
export function resolveHostSources(env: NodeJS.ProcessEnv = process.env): SourcesResult {
  let python: { prefix: string; version: string } | null = null;
  const tried: string[] = [];
  for (const prefix of candidatePython312Prefixes(env)) {
    tried.push(prefix);
    const bin = join(prefix, "bin", "python3.12");
    if (!existsSync(bin)) continue;
    const out = versionOf(bin, ["--version"]);
    const m = out ? /^Python (3\.12\.\d+)/.exec(out) : null;
    if (m?.[1]) {
      python = { prefix: realpathSync(prefix), version: m[1] };
      break;
    }
  }
  if (!python)
    return {
      ok: false,
      error: `no CPython 3.12 found (tried ${tried.join(", ")}); set SCRATCHRUN_PYTHON312=/path/to/prefix`,
    };

  let node: { path: string; version: string } | null = null;
  if (env.SCRATCHRUN_NODE20) {
    const out = existsSync(env.SCRATCHRUN_NODE20)
      ? versionOf(env.SCRATCHRUN_NODE20, ["--version"])
      : null;
    if (!out || !/^v20\.\d+\.\d+$/.test(out))
      return {
        ok: false,
        error: `SCRATCHRUN_NODE20=${env.SCRATCHRUN_NODE20} is not a Node.js 20 binary (--version said ${JSON.stringify(out)})`,
      };
    node = { path: realpathSync(env.SCRATCHRUN_NODE20), version: out };
  } else if (process.versions.node.startsWith("20.")) {
    node = { path: realpathSync(process.execPath), version: process.version };
  } else {
    return {
      ok: false,
      error: `this Node.js is ${process.version}, not 20; set SCRATCHRUN_NODE20=/path/to/node20/bin/node`,
    };
  }

  let wheelhouse: string | null = null;
  if (env.SCRATCHRUN_WHEELHOUSE) {
    if (
      !existsSync(env.SCRATCHRUN_WHEELHOUSE) ||
      !statSync(env.SCRATCHRUN_WHEELHOUSE).isDirectory()
    )
      return {
        ok: false,
        error: `SCRATCHRUN_WHEELHOUSE=${env.SCRATCHRUN_WHEELHOUSE} is not a directory`,
      };
    wheelhouse = realpathSync(env.SCRATCHRUN_WHEELHOUSE);
  }
  const index = pipIndexFromEnv(env, join(RECIPE_DIR, PYTHON_LOCK_FILE));
  if (!index.ok) return { ok: false, error: index.error };
  const base: HostSources = {
    python312Prefix: python.prefix,
    python312Version: python.version,
    node20Path: node.path,
    node20Version: node.version,
    wheelhouse,
    pipIndex: index.index,
  };
  const config = imageConfigFromEnv(env);
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
export const BUILD_REVISION = 4;

/** The files of images/rootfs/ that the build reads (its README is not one of them). */
export const RECIPE_FILES = [
  "matplotlibrc",
  "packages.txt",
  "purge.txt",
  PYTHON_LOCK_FILE,
] as const;

/**
 * Hash of everything the image is built from: recipe files, the build script, BUILD_REVISION,
 * the host's CPython 3.12 and Node.js 20 (path and version), and the wheelhouse (names, sizes).
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
  h.update(`node20\0${sources.node20Path}\0${sources.node20Version}\0`);
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
