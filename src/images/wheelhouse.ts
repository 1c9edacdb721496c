import { basename, dirname } from "node:path";
import { IN_IMAGE } from "../runtimes/in-image.js";
import type { PipIndex } from "./pip-index.js";
import { listWheels } from "./recipe.js";
import { checkInRootfs, type Bind } from "./rootfs-exec.js";

/**
 * Where build steps see host inputs (a wheelhouse, the recipe directory) inside the image: an
 * existing empty mount point, so it also works when the rootfs is mounted read-only.
 */
const INPUT_MOUNT = "/run/scratchrun";

export interface Python312Target {
  rootfs: string;
  /**
   * A host copy of the 3.12 prefix to install into, mounted over /opt/python3.12 while the rootfs
   * stays read-only; omitted, the rootfs's own /opt/python3.12 is written.
   */
  pythonDir?: string;
  /** The interpreter inside the image to install into (default python3.12's). */
  python?: string;
  onProgress?: (line: string) => void;
}

function targetBinds(t: Python312Target): { writable: boolean; binds: Bind[] } {
  return t.pythonDir
    ? { writable: false, binds: [{ src: t.pythonDir, dest: IN_IMAGE.python312Prefix, rw: true }] }
    : { writable: true, binds: [] };
}

const PIP_COMMON = [
  "-m",
  "pip",
  "install",
  "--no-cache-dir",
  "--disable-pip-version-check",
  "--no-warn-script-location",
  "--root-user-action=ignore",
];

/**
 * Installs every wheel in `wheelhouse` into python3.12, offline (--no-index): the wheels present
 * are the pins. Dependencies must be in the wheelhouse too, or pip fails and so does the build.
 */
export async function installWheelhouse(
  target: Python312Target,
  wheelhouse: string,
): Promise<string[]> {
  const wheels = listWheels(wheelhouse);
  if (wheels.length === 0)
    throw new Error(`SCRATCHRUN_WHEELHOUSE ${wheelhouse} holds no .whl file`);
  const { writable, binds } = targetBinds(target);
  const inside = INPUT_MOUNT;
  await checkInRootfs({
    rootfs: target.rootfs,
    writable,
    binds: [...binds, { src: wheelhouse, dest: inside }],
    argv: [
      IN_IMAGE.python312,
      ...PIP_COMMON,
      "--no-index",
      "--find-links",
      inside,
      ...wheels.map((w) => `${inside}/${w}`),
    ],
    onStderr: (s) => target.onProgress?.(`pip: ${s.trimEnd()}`),
  });
  return wheels;
}

/**
 * Installs a lock's wheels, already downloaded to `wheels` by the host's pip (wheel-cache.ts),
 * offline: no index, every wheel checked against the lock's hashes, and nothing the lock does not
 * pin (--require-hashes refuses an unpinned dependency).
 */
export async function installLocked(
  target: Python312Target,
  wheels: string,
  lockFile: string,
): Promise<void> {
  const { writable, binds } = targetBinds(target);
  // /tmp is the jail's own tmpfs, where bwrap can make the lock file's mount point.
  const lockInside = `/tmp/${basename(lockFile)}`;
  await checkInRootfs({
    rootfs: target.rootfs,
    writable,
    binds: [...binds, { src: wheels, dest: INPUT_MOUNT }, { src: lockFile, dest: lockInside }],
    argv: [
      target.python ?? IN_IMAGE.python312,
      ...PIP_COMMON,
      "--no-index",
      "--find-links",
      INPUT_MOUNT,
      "--only-binary=:all:",
      "--require-hashes",
      "-r",
      lockInside,
    ],
    onStderr: (s) => target.onProgress?.(`pip: ${s.trimEnd()}`),
  });
}

/**
 * Installs the hash-pinned requirements from a package index (a PyPI mirror) into python3.12:
 * binary wheels only, every file checked against its pinned hash (--require-hashes, which also
 * refuses any dependency the file does not pin). Needs the index reachable at build time.
 */
export async function installFromIndex(target: Python312Target, index: PipIndex): Promise<void> {
  const { writable, binds } = targetBinds(target);
  const inside = `${INPUT_MOUNT}/${basename(index.requirements)}`;
  await checkInRootfs({
    rootfs: target.rootfs,
    writable,
    network: true,
    binds: [...binds, { src: dirname(index.requirements), dest: INPUT_MOUNT }],
    argv: [
      IN_IMAGE.python312,
      ...PIP_COMMON,
      "--only-binary=:all:",
      "--require-hashes",
      "--index-url",
      index.url,
      "-r",
      inside,
    ],
    onStderr: (s) => target.onProgress?.(`pip: ${s.trimEnd()}`),
  });
}

const LIST_DISTRIBUTIONS =
  "import importlib.metadata as m, json\n" +
  "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}, sort_keys=True))";

/** Distributions (name -> version) an interpreter in the image sees, read by running it. */
export async function installedPackages(
  rootfs: string,
  interpreter: string,
  binds: Bind[] = [],
): Promise<Record<string, string>> {
  const out = await checkInRootfs({ rootfs, binds, argv: [interpreter, "-c", LIST_DISTRIBUTIONS] });
  const parsed: unknown = JSON.parse(out);
  if (typeof parsed !== "object" || parsed === null) throw new Error(`bad package list: ${out}`);
  return Object.fromEntries(
    Object.entries(parsed).filter((e): e is [string, string] => typeof e[1] === "string"),
  );
}
