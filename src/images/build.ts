import { existsSync, readFileSync } from "node:fs";
import { copyFile, mkdir, readdir, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { explainAptFailure } from "./apt-errors.js";
import { debianIncludes, type ImageConfig } from "./config.js";
import { parsePackageList, runMmdebstrap } from "./debootstrap.js";
import { installExtraFiles } from "./extra-files.js";
import { verifyExtras, type VerifiedExtras } from "./extras.js";
import { findRootfs, type LocatedRootfs } from "./locate.js";
import type { Manifest } from "./manifest.js";
import {
  fetchNpmPackages,
  NPM_DIR_IN_IMAGE,
  packagesWithScripts,
  placeNpmTree,
  runNpmInstallScripts,
  type NpmPackageLock,
} from "./npm.js";
import { IN_IMAGE, IMAGE_ENV } from "../runtimes/in-image.js";
import {
  MANIFEST_FILE,
  PYTHON_LOCK_FILE,
  RECIPE_DIR,
  ROOTFS_PREFIX,
  nodeCacheDir,
} from "./paths.js";
import { displayIndexUrl, type PipIndex } from "./pip-index.js";
import { settingsFrom, type ImageSettings } from "../schema/settings/values.js";
import { activeImage, imageHolders, pruneImages, setActiveImage } from "./prune.js";
import { baseRecipeHash, recipeHash, resolveHostSources, type HostSources } from "./recipe.js";
import {
  addUserAndMountPoints,
  bakeMatplotlibCache,
  diskBytes,
  purgePackages,
  removeTestSuites,
  slim,
} from "./rootfs-steps.js";
import {
  copiedElfObjects,
  installNode,
  installPython,
  missingSharedLibs,
  type CopiedPython,
} from "./runtimes.js";
import { pinnedNodeBinary } from "./node-binary.js";
import { verifyRuntimes } from "./verify-runtimes.js";
import { LOCK_TARGETS } from "./python-lock.js";
import { lockedWheels, noIndexNote, type LockedWheelsOptions } from "./wheel-cache.js";
import { installFromIndex, installLocked, installWheelhouse } from "./wheelhouse.js";
import { pidAlive } from "../jail/procfs.js";

export interface BuildOptions {
  onProgress?: (line: string) => void;
  /**
   * Where the image is built from and kept; default: `env`'s, for scripts/build-images.mjs (its
   * bytes are part of the recipe: changing it to pass them would rebuild every host's image).
   */
  images?: ImageSettings;
  /** The environment the host's pip and npm run with (their own settings count); default ours. */
  env?: NodeJS.ProcessEnv;
  /** Rebuild even when the image of the current recipe exists. */
  force?: boolean;
}

export interface BuildResult extends LocatedRootfs {
  /** True when the image of this recipe already existed and nothing was built. */
  reused: boolean;
  seconds: number;
}

const BUILDING_PREFIX = ".building-";

/**
 * Builds the runtime rootfs of the current recipe (the image config included) unless it exists.
 * Builds in a temporary directory beside the final one and renames it into place only when
 * complete and verified, so an interrupted or failed build never looks finished and changes
 * nothing a server uses; then marks it the active image and prunes images no live server holds.
 */
export async function buildRootfs(options: BuildOptions = {}): Promise<BuildResult> {
  const log = options.onProgress ?? ((line: string) => process.stderr.write(`[images] ${line}\n`));
  const env = options.env ?? process.env;
  const images = options.images ?? settingsFrom(env).images;
  const started = Date.now();
  const src = resolveHostSources(images);
  if (!src.ok) {
    const active = activeImage(images.dir);
    throw new Error(
      `${src.error}\nnothing changed: ${active ? `servers keep serving ${active}, and start with it` : "no image was built here before"}`,
    );
  }
  const hash = recipeHash(src.sources);
  const root = images.dir;
  const final = join(root, `${ROOTFS_PREFIX}${hash}`);
  const existing = findRootfs(images);
  if (existing.ok && !options.force) {
    const again =
      (await indexAppeared(existing.manifest, src.sources, env, images.wheelCache, log)) &&
      imageHolders(root, existing.dir).length === 0;
    if (!again) {
      log(`image for recipe ${hash} is up to date: ${existing.dir}`);
      setActiveImage(root, existing.dir);
      return { dir: existing.dir, manifest: existing.manifest, reused: true, seconds: 0 };
    }
    log(
      `image ${existing.dir} has python3.12's standard library only and the host's pip reaches an index now: building it again`,
    );
  }
  if (process.getuid?.() !== 0)
    throw new Error("building the runtime image needs root (mmdebstrap --mode=root)");
  // A live server serves from this directory: replacing it would change its image under it.
  const holders = existsSync(final) ? imageHolders(root, final) : [];
  if (holders.length > 0)
    throw new Error(
      `${final} is in use by a running server (pid ${holders.join(", ")}); stop it before rebuilding this image with --force`,
    );

  try {
    return await buildNew(root, final, hash, src.sources, started, { env, images }, log);
  } catch (e) {
    const active = activeImage(root);
    throw new Error(
      `${(e as Error).message}\nnothing changed: ${active ? `servers keep serving ${active}, and start with it` : "no image was built here before"}`,
      { cause: e },
    );
  }
}

async function buildNew(
  root: string,
  final: string,
  hash: string,
  sources: HostSources,
  started: number,
  { env, images }: { env: NodeJS.ProcessEnv; images: ImageSettings },
  log: (line: string) => void,
): Promise<BuildResult> {
  await mkdir(root, { recursive: true });
  await removeAbandonedBuilds(root, log);
  const tmp = join(root, `${BUILDING_PREFIX}${hash}-${process.pid}`);
  const npmStage = join(root, `${BUILDING_PREFIX}npm-${hash}-${process.pid}`);
  const nodeStage = join(root, `${BUILDING_PREFIX}node-${hash}-${process.pid}`);
  try {
    const config = sources.imageConfig ?? null;
    if (config) log(`image config ${config.path}: ${describeConfig(config)}`);
    // Fetched first: a missing npm package or version fails in seconds, not after the bootstrap.
    let npmLock: NpmPackageLock | null = null;
    if (config?.npm) {
      log(`fetching ${Object.keys(config.npm.packages).length} npm package(s) for node20`);
      npmLock = await fetchNpmPackages(config.npm, npmStage, log);
    }
    // Also first: a registry that does not answer, or a tarball that is not the pin, fails now.
    const pinned = (label: "node20" | "node24") => {
      const source = sources[label];
      if ("path" in source) return Promise.resolve(source.path);
      return pinnedNodeBinary({
        label,
        pin: source,
        cacheDir: nodeCacheDir(images.dir),
        workDir: join(nodeStage, label),
        log,
      });
    };
    const node20 = await pinned("node20");
    const node24 = await pinned("node24");
    log(`building image for recipe ${hash} in ${tmp}`);
    const manifest = await buildInto(
      tmp,
      hash,
      sources,
      { config, npmLock, npmStage, env, wheelCache: images.wheelCache, node20, node24 },
      log,
    );
    await writeFile(join(tmp, MANIFEST_FILE), `${JSON.stringify(manifest, null, 2)}\n`);
    if (existsSync(final)) await rm(final, { recursive: true, force: true });
    await rename(tmp, final);
    setActiveImage(root, final);
    pruneImages(root, final, log);
    const seconds = Math.round((Date.now() - started) / 1000);
    log(
      `image ready: ${final} (${(manifest.sizeBytes / 1024 / 1024).toFixed(0)} MiB, ${seconds} s)`,
    );
    return { dir: final, manifest, reused: false, seconds };
  } finally {
    await rm(tmp, { recursive: true, force: true });
    await rm(npmStage, { recursive: true, force: true });
    await rm(nodeStage, { recursive: true, force: true });
  }
}

/**
 * True when an image built without any index (stdlib-only python3.12, from the default path)
 * would now get its stack: the host's pip answers for the lock (and has fetched its wheels into
 * the cache the rebuild then uses). Without this, the first build on a host offline at the time
 * would keep its recipe's image stdlib-only forever.
 */
async function indexAppeared(
  manifest: Manifest,
  sources: HostSources,
  env: NodeJS.ProcessEnv,
  wheelCache: string,
  log: (line: string) => void,
): Promise<boolean> {
  if (manifest.python312PackagesFrom !== "none" || python312Source(sources)) return false;
  const wheels = await lockedWheels(defaultLockWheels(sources, env, wheelCache, log));
  return wheels.kind !== "no-index";
}

function defaultLockWheels(
  sources: HostSources,
  env: NodeJS.ProcessEnv,
  cacheRoot: string,
  log: (line: string) => void,
  minor: CopiedPython = "3.12",
): LockedWheelsOptions {
  const target = LOCK_TARGETS.find((t) => t.python === minor);
  if (!target) throw new Error(`the Python lock has no ${minor} target`);
  const prefix = minor === "3.12" ? sources.python312Prefix : sources.python313Prefix;
  return {
    cacheRoot,
    lockFile: join(RECIPE_DIR, PYTHON_LOCK_FILE),
    target,
    // The target's own interpreter runs pip: its markers and tags are the target's.
    pip: { python: join(prefix, "bin", `python${minor}`), env },
    log,
  };
}

/** One line naming what the config adds. */
export function describeConfig(c: ImageConfig): string {
  const parts = [
    c.debian.length ? `${c.debian.length} Debian package(s)` : "",
    c.python311.length ? `${c.python311.length} python3.11 package(s)` : "",
    c.npm ? `${Object.keys(c.npm.packages).length} npm package(s)` : "",
    c.python312 ? `python3.12 packages from a ${c.python312.kind}` : "",
    c.files.length ? `${c.files.length} extra file entr${c.files.length === 1 ? "y" : "ies"}` : "",
  ].filter(Boolean);
  return parts.length ? parts.join(", ") : "adds nothing";
}

interface ConfigInputs {
  config: ImageConfig | null;
  npmLock: NpmPackageLock | null;
  /** Where the npm packages were fetched on the host. */
  npmStage: string;
  /** The environment the host's pip runs with (its PIP_* settings count). */
  env: NodeJS.ProcessEnv;
  /** Where the lock's wheels are kept between builds. */
  wheelCache: string;
  /** Node.js 20's and 24's binaries on the host (the pinned packages', unpacked, or named). */
  node20: string;
  node24: string;
}

/** Where python3.12's third-party packages come from: the config, else the environment. */
function python312Source(
  sources: HostSources,
): { wheelhouse: string } | { index: PipIndex } | null {
  const py = sources.imageConfig?.python312;
  if (py?.kind === "wheelhouse") return { wheelhouse: py.wheelhouse };
  if (py?.kind === "index") return { index: { url: py.url, requirements: py.requirements } };
  if (sources.wheelhouse) return { wheelhouse: sources.wheelhouse };
  if (sources.pipIndex) return { index: sources.pipIndex };
  return null;
}

async function buildInto(
  rootfs: string,
  hash: string,
  sources: HostSources,
  inputs: ConfigInputs,
  log: (line: string) => void,
): Promise<Manifest> {
  const { config } = inputs;
  const base = parsePackageList(readFileSync(join(RECIPE_DIR, "packages.txt"), "utf8"));
  const extra = debianIncludes(config);
  const packages = [...base, ...extra.filter((p) => !base.includes(p))];
  log(
    `mmdebstrap: ${packages.length} packages from bookworm${extra.length ? ` (${extra.length} from the image config)` : ""} (takes a few minutes)`,
  );
  try {
    await runMmdebstrap(packages, rootfs, log);
  } catch (e) {
    throw config ? new Error(explainAptFailure((e as Error).message, config)) : e;
  }

  await purgePackages(
    rootfs,
    extra.map((p) => p.split("=")[0] ?? p),
    log,
  );
  await slim(rootfs);
  await addUserAndMountPoints(rootfs);
  await copyFile(join(RECIPE_DIR, "matplotlibrc"), join(rootfs, "etc/matplotlibrc"));

  log(`copying CPython ${sources.python312Version} from ${sources.python312Prefix}`);
  await installPython(rootfs, "3.12", sources.python312Prefix, log);
  log(`copying CPython ${sources.python313Version} from ${sources.python313Prefix}`);
  await installPython(rootfs, "3.13", sources.python313Prefix, log);
  log(`copying Node.js ${sources.node20.version} (${inputs.node20})`);
  await installNode(rootfs, inputs.node20, IN_IMAGE.node20, "node");
  log(`copying Node.js ${sources.node24.version} (${inputs.node24})`);
  await installNode(rootfs, inputs.node24, IN_IMAGE.node24, "node24");
  const missing = await missingSharedLibs(rootfs, await copiedElfObjects(rootfs));
  if (missing.length > 0)
    throw new Error(
      `shared libraries missing in the image (add their Debian packages to images/rootfs/packages.txt):\n${missing.join("\n")}`,
    );

  const notes: string[] = [];
  let from: Manifest["python312PackagesFrom"] = "none";
  const py312 = python312Source(sources);
  const via = config?.python312 ? `the image config ${config.path}` : null;
  if (py312 && "wheelhouse" in py312) {
    log(`installing wheels from ${py312.wheelhouse} into python3.12`);
    const wheels = await installWheelhouse({ rootfs, onProgress: log }, py312.wheelhouse);
    notes.push(
      `python3.12: installed ${wheels.length} wheels from ${via ?? "SCRATCHRUN_WHEELHOUSE"}`,
    );
    from = "wheelhouse";
  } else if (py312) {
    log(
      `installing ${py312.index.requirements} from ${displayIndexUrl(py312.index.url)} into python3.12`,
    );
    await installFromIndex({ rootfs, onProgress: log }, py312.index);
    notes.push(
      `python3.12: installed ${py312.index.requirements} (hash-pinned) from ${via ?? "SCRATCHRUN_PIP_INDEX_URL"}`,
    );
    from = "index";
  } else {
    from = await installLockInto("3.12", sources, inputs, rootfs, log, notes);
  }

  // python3.13 gets the same lock through its own host pip, whatever python3.12's source is.
  const from313 = await installLockInto("3.13", sources, inputs, rootfs, log, notes);

  if (config?.npm && inputs.npmLock) {
    log(`placing the npm packages at ${NPM_DIR_IN_IMAGE} (/node_modules)`);
    const npmDir = await placeNpmTree(rootfs, inputs.npmStage);
    const scripted = packagesWithScripts(inputs.npmLock);
    if (scripted.length > 0) {
      log(`running the install scripts of ${scripted.join(", ")} in the build jail`);
      await runNpmInstallScripts(rootfs, npmDir, log);
    }
  }
  // Before the font cache is baked, so matplotlib knows an extra font from the first plot.
  if (config) await installExtraFiles(rootfs, config.files, log);

  log("baking matplotlib's font cache into the image");
  await bakeMatplotlibCache(rootfs, [
    IN_IMAGE.python311,
    ...(from === "none" ? [] : [IN_IMAGE.python312]),
    ...(from313 === "none" ? [] : [IN_IMAGE.python313]),
  ]);

  log("verifying the runtimes inside the image");
  const runtimes = await verifyRuntimes(rootfs, {
    py312Stack: from === "pypi",
    py313Stack: from313 === "pypi",
  });
  if (runtimes["python3.12"].version !== sources.python312Version)
    throw new Error(`python3.12 in the image reports ${runtimes["python3.12"].version}`);
  if (runtimes["python3.13"].version !== sources.python313Version)
    throw new Error(`python3.13 in the image reports ${runtimes["python3.13"].version}`);
  for (const label of ["node20", "node24"] as const)
    if (runtimes[label].version !== `v${sources[label].version.replace(/^v/, "")}`)
      throw new Error(
        `${label} in the image reports ${runtimes[label].version}, not ${sources[label].version}`,
      );
  let verified: VerifiedExtras | null = null;
  if (config) {
    verified = await verifyExtras(
      rootfs,
      config,
      inputs.npmLock,
      config.python312 ? py312 : null,
      log,
    );
    if (Object.keys(verified.node20Packages).length > 0)
      runtimes.node20.packages = verified.node20Packages;
    if (Object.keys(verified.extras.debian).length > 0)
      runtimes.bash.packages = verified.extras.debian;
    notes.push(`image config ${config.path}: ${describeConfig(config)}`);
  }
  return {
    format: 1,
    recipeHash: hash,
    builtAt: new Date().toISOString(),
    sizeBytes: diskBytes(rootfs),
    env: { ...IMAGE_ENV },
    runtimes,
    python312PackagesFrom: from,
    python313PackagesFrom: from313,
    notes,
    baseRecipeHash: baseRecipeHash(sources),
    ...(verified ? { extras: verified.extras } : {}),
  };
}

/**
 * Installs images/rootfs/python-requirements.lock into python3.<minor> from the wheels the host's
 * pip fetched for it (or the cache's), offline and hash-checked, and slims it; with no index,
 * notes that this Python has the standard library only. Returns where its packages came from.
 */
async function installLockInto(
  minor: CopiedPython,
  sources: HostSources,
  inputs: ConfigInputs,
  rootfs: string,
  log: (line: string) => void,
  notes: string[],
): Promise<"pypi" | "none"> {
  const how = defaultLockWheels(sources, inputs.env, inputs.wheelCache, log, minor);
  const wheels = await lockedWheels(how);
  const label = `python${minor}`;
  if (wheels.kind === "no-index") {
    const note = noIndexNote(wheels.reason, label);
    log(note);
    notes.push(note);
    return "none";
  }
  const python = minor === "3.12" ? IN_IMAGE.python312 : IN_IMAGE.python313;
  const site = minor === "3.12" ? IN_IMAGE.python312Site : IN_IMAGE.python313Site;
  log(`installing the ${wheels.wheels} locked wheels into ${label} (offline, hash-checked)`);
  await installLocked({ rootfs, python, onProgress: log }, wheels.dir, how.lockFile);
  const suites = await removeTestSuites(join(rootfs, site));
  log(`${label}: removed ${suites} test suites the packages ship (no import reaches them)`);
  notes.push(
    `${label}: installed images/rootfs/${PYTHON_LOCK_FILE} (${wheels.wheels} wheels, hash-checked) through the host's pip${wheels.kind === "cached" ? " (from the wheel cache)" : ""}`,
  );
  return "pypi";
}

/** Removes half-built images (and npm stages) whose builder process is gone. */
async function removeAbandonedBuilds(root: string, log: (line: string) => void): Promise<void> {
  for (const name of await readdir(root)) {
    if (!name.startsWith(BUILDING_PREFIX)) continue;
    const pid = Number(name.slice(name.lastIndexOf("-") + 1));
    if (Number.isInteger(pid) && pid > 0 && pidAlive(pid)) continue;
    log(`removing abandoned build ${name}`);
    await rm(join(root, name), { recursive: true, force: true });
  }
}
