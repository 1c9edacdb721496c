import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import {
  appendFile,
  chown,
  copyFile,
  mkdir,
  readdir,
  readFile,
  rename,
  rm,
  writeFile,
} from "node:fs/promises";
import { join } from "node:path";
import { parsePackageList, runMmdebstrap } from "./debootstrap.js";
import { findRootfs, type LocatedRootfs } from "./locate.js";
import { IMAGE_ENV, runtimeArgv, type Manifest } from "./manifest.js";
import {
  IN_IMAGE,
  imagesDir,
  MANIFEST_FILE,
  MATPLOTLIB_CACHE_DIR,
  RECIPE_DIR,
  ROOTFS_PREFIX,
} from "./paths.js";
import { recipeHash, resolveHostSources, type HostSources } from "./recipe.js";
import { checkInRootfs } from "./rootfs-exec.js";
import {
  copiedElfObjects,
  installNode20,
  installPython312,
  missingSharedLibs,
} from "./runtimes.js";
import {
  installedPackages,
  installFromPypi,
  installWheelhouse,
  pypiReachable,
} from "./wheelhouse.js";

export interface BuildOptions {
  onProgress?: (line: string) => void;
  env?: NodeJS.ProcessEnv;
  /** Rebuild even when the image of the current recipe exists. */
  force?: boolean;
}

export interface BuildResult extends LocatedRootfs {
  /** True when the image of this recipe already existed and nothing was built. */
  reused: boolean;
  seconds: number;
}

export const NO_PYPI_NOTE =
  "PyPI not reachable: python3.12 has the standard library only (set SCRATCHRUN_WHEELHOUSE to install wheels)";

const BUILDING_PREFIX = ".building-";
/** dpkg wants the sbin directories (ldconfig, start-stop-daemon) that a sandbox's PATH omits. */
const ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * Builds the runtime rootfs of the current recipe unless it exists. Builds in a temporary
 * directory beside the final one and renames it into place only when complete and verified, so an
 * interrupted build never looks finished; then prunes images of older recipes.
 */
export async function buildRootfs(options: BuildOptions = {}): Promise<BuildResult> {
  const log = options.onProgress ?? ((line: string) => process.stderr.write(`[images] ${line}\n`));
  const env = options.env ?? process.env;
  const started = Date.now();
  const src = resolveHostSources(env);
  if (!src.ok) throw new Error(src.error);
  const hash = recipeHash(src.sources);
  const root = imagesDir(env);
  const final = join(root, `${ROOTFS_PREFIX}${hash}`);
  const existing = findRootfs(env);
  if (existing.ok && !options.force) {
    log(`image for recipe ${hash} is up to date: ${existing.dir}`);
    return { dir: existing.dir, manifest: existing.manifest, reused: true, seconds: 0 };
  }
  if (process.getuid?.() !== 0)
    throw new Error("building the runtime image needs root (mmdebstrap --mode=root)");

  await mkdir(root, { recursive: true });
  await removeAbandonedBuilds(root, log);
  const tmp = join(root, `${BUILDING_PREFIX}${hash}-${process.pid}`);
  try {
    log(`building image for recipe ${hash} in ${tmp}`);
    const manifest = await buildInto(tmp, hash, src.sources, log);
    await writeFile(join(tmp, MANIFEST_FILE), `${JSON.stringify(manifest, null, 2)}\n`);
    if (existsSync(final)) await rm(final, { recursive: true, force: true });
    await rename(tmp, final);
    await pruneOtherImages(root, final, log);
    const seconds = Math.round((Date.now() - started) / 1000);
    log(
      `image ready: ${final} (${(manifest.sizeBytes / 1024 / 1024).toFixed(0)} MiB, ${seconds} s)`,
    );
    return { dir: final, manifest, reused: false, seconds };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

async function buildInto(
  rootfs: string,
  hash: string,
  sources: HostSources,
  log: (line: string) => void,
): Promise<Manifest> {
  const packages = parsePackageList(readFileSync(join(RECIPE_DIR, "packages.txt"), "utf8"));
  log(`mmdebstrap: ${packages.length} packages from bookworm (takes a few minutes)`);
  await runMmdebstrap(packages, rootfs, log);

  await purgePackages(rootfs, log);
  await slim(rootfs);
  await addUserAndMountPoints(rootfs);
  await copyFile(join(RECIPE_DIR, "matplotlibrc"), join(rootfs, "etc/matplotlibrc"));

  log(`copying CPython ${sources.python312Version} from ${sources.python312Prefix}`);
  await installPython312(rootfs, sources.python312Prefix, log);
  log(`copying Node.js ${sources.node20Version} from ${sources.node20Path}`);
  await installNode20(rootfs, sources.node20Path);
  const missing = await missingSharedLibs(rootfs, await copiedElfObjects(rootfs));
  if (missing.length > 0)
    throw new Error(
      `shared libraries missing in the image (add their Debian packages to images/rootfs/packages.txt):\n${missing.join("\n")}`,
    );

  const notes: string[] = [];
  let from: Manifest["python312PackagesFrom"] = "none";
  if (sources.wheelhouse) {
    log(`installing wheels from ${sources.wheelhouse} into python3.12`);
    const wheels = await installWheelhouse({ rootfs, onProgress: log }, sources.wheelhouse);
    notes.push(`python3.12: installed ${wheels.length} wheels from SCRATCHRUN_WHEELHOUSE`);
    from = "wheelhouse";
  } else if (await pypiReachable()) {
    log("installing pinned python3.12 packages from PyPI");
    await installFromPypi(
      { rootfs, onProgress: log },
      join(RECIPE_DIR, "python312-requirements.txt"),
    );
    notes.push("python3.12: installed images/rootfs/python312-requirements.txt from PyPI");
    from = "pypi";
  } else {
    log(NO_PYPI_NOTE);
    notes.push(NO_PYPI_NOTE);
  }

  log("baking matplotlib's font cache into the image");
  await bakeMatplotlibCache(rootfs);

  log("verifying the runtimes inside the image");
  const runtimes = await verifyRuntimes(rootfs);
  if (runtimes["python3.12"].version !== sources.python312Version)
    throw new Error(`python3.12 in the image reports ${runtimes["python3.12"].version}`);
  return {
    format: 1,
    recipeHash: hash,
    builtAt: new Date().toISOString(),
    sizeBytes: diskBytes(rootfs),
    env: { ...IMAGE_ENV },
    runtimes,
    python312PackagesFrom: from,
    notes,
  };
}

/**
 * matplotlib scans every font on first use and caches the result in its (writable) cache dir:
 * ~0.4 s on the host per fresh sandbox, seconds under TCG. The scan is done once here, inside the
 * image so its paths are the sandbox's; the engine seeds the file into each python sandbox.
 */
async function bakeMatplotlibCache(rootfs: string): Promise<void> {
  await mkdir(join(rootfs, MATPLOTLIB_CACHE_DIR), { recursive: true });
  await checkInRootfs({
    rootfs,
    writable: true,
    env: { MPLCONFIGDIR: `/${MATPLOTLIB_CACHE_DIR}` },
    argv: ["/usr/bin/python3.11", "-c", "import matplotlib.font_manager"],
  });
}

async function purgePackages(rootfs: string, log: (line: string) => void): Promise<void> {
  const wanted = parsePackageList(readFileSync(join(RECIPE_DIR, "purge.txt"), "utf8"));
  const status = await readFile(join(rootfs, "var/lib/dpkg/status"), "utf8");
  const installed = new Set([...status.matchAll(/^Package: (\S+)$/gm)].map((m) => m[1]));
  const purge = wanted.filter((p) => installed.has(p));
  if (purge.length === 0) return;
  log(`purging ${purge.length} build-only packages`);
  await checkInRootfs({
    rootfs,
    writable: true,
    env: { PATH: ROOT_PATH },
    argv: ["/usr/bin/dpkg", "--purge", "--force-depends", ...purge],
  });
}

/** Drops what a sandbox never reads: apt lists and caches, logs. */
async function slim(rootfs: string): Promise<void> {
  for (const dir of ["var/cache/apt", "var/lib/apt/lists", "var/log", "var/cache/debconf"]) {
    const p = join(rootfs, dir);
    if (!existsSync(p)) continue;
    for (const name of await readdir(p)) {
      if (name === "partial" || name === "lock") continue;
      await rm(join(p, name), { recursive: true, force: true });
    }
  }
}

async function addUserAndMountPoints(rootfs: string): Promise<void> {
  const passwd = await readFile(join(rootfs, "etc/passwd"), "utf8");
  if (/^[^:]*:[^:]*:1000:/m.test(passwd)) throw new Error("uid 1000 already exists in the image");
  await appendFile(
    join(rootfs, "etc/passwd"),
    "user:x:1000:1000:ScratchRun:/home/user:/bin/bash\n",
  );
  await appendFile(join(rootfs, "etc/group"), "user:x:1000:\n");
  if (existsSync(join(rootfs, "etc/shadow")))
    await appendFile(join(rootfs, "etc/shadow"), "user:!:19000:0:99999:7:::\n");
  for (const dir of IN_IMAGE.mountPoints) await mkdir(join(rootfs, dir), { recursive: true });
  await chown(join(rootfs, "home/user"), 1000, 1000);
  // Nothing of the build host: its name and resolvers stay out of the image. resolv.conf is a
  // file so a sandbox with network can get its own bound over it.
  await writeFile(join(rootfs, "etc/hostname"), "sandbox\n");
  await writeFile(
    join(rootfs, "etc/hosts"),
    "127.0.0.1 localhost\n127.0.1.1 sandbox\n::1 localhost\n",
  );
  await writeFile(
    join(rootfs, "etc/resolv.conf"),
    "# no network; a sandbox with network gets its own\n",
  );
}

const CHECK_PY312 =
  "import ssl, sqlite3, ctypes, zlib, bz2, lzma, json, decimal, hashlib, readline, curses, uuid, platform\n" +
  "print(platform.python_version())";
const CHECK_PY311 =
  "import platform, numpy, scipy.linalg, pandas, PIL, matplotlib\n" +
  "import matplotlib.pyplot as plt\n" +
  "assert matplotlib.get_backend().lower() == 'agg', matplotlib.get_backend()\n" +
  "plt.plot([0, 1], [1, 0]); plt.savefig('/tmp/check.png')\n" +
  "assert open('/tmp/check.png', 'rb').read(8) == b'\\x89PNG\\r\\n\\x1a\\n'\n" +
  "print(platform.python_version())";

/** Runs every interpreter inside the read-only image and records what it reports. */
export async function verifyRuntimes(rootfs: string): Promise<Manifest["runtimes"]> {
  const run = (argv: string[]) => checkInRootfs({ rootfs, argv }).then((s) => s.trim());
  const py312 = await run([...runtimeArgv("python3.12"), "-c", CHECK_PY312]);
  const py311 = await run([...runtimeArgv("python3.11"), "-c", CHECK_PY311]);
  const node = await run([...runtimeArgv("node20"), "--version"]);
  const bash = await run([...runtimeArgv("bash"), "-c", 'echo "$BASH_VERSION"']);
  if (!node.startsWith("v20.")) throw new Error(`node in the image reports ${node}, not v20`);
  return {
    "python3.12": {
      argv: runtimeArgv("python3.12"),
      version: py312,
      packages: await installedPackages(rootfs, IN_IMAGE.python312),
    },
    "python3.11": {
      argv: runtimeArgv("python3.11"),
      version: py311,
      packages: await installedPackages(rootfs, IN_IMAGE.python311),
    },
    node20: { argv: runtimeArgv("node20"), version: node },
    bash: { argv: runtimeArgv("bash"), version: bash },
  };
}

function diskBytes(dir: string): number {
  const r = spawnSync("du", ["-sb", dir], { encoding: "utf8" });
  const n = Number.parseInt(r.stdout, 10);
  return Number.isFinite(n) ? n : 0;
}

/** Removes half-built images whose builder process is gone. */
async function removeAbandonedBuilds(root: string, log: (line: string) => void): Promise<void> {
  for (const name of await readdir(root)) {
    if (!name.startsWith(BUILDING_PREFIX)) continue;
    const pid = Number(name.slice(name.lastIndexOf("-") + 1));
    if (Number.isInteger(pid) && pid > 0 && processAlive(pid)) continue;
    log(`removing abandoned build ${name}`);
    await rm(join(root, name), { recursive: true, force: true });
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

async function pruneOtherImages(
  root: string,
  keep: string,
  log: (line: string) => void,
): Promise<void> {
  for (const name of await readdir(root)) {
    const p = join(root, name);
    if (!name.startsWith(ROOTFS_PREFIX) || p === keep) continue;
    log(`pruning old image ${name}`);
    await rm(p, { recursive: true, force: true });
  }
}
