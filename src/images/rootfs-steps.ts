/**
 * The steps that shape the bootstrapped Debian tree into the runtime image: purge what only the
 * build needed, drop caches, add the sandbox user and mount points, bake matplotlib's font cache.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { appendFile, chown, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parsePackageList } from "./debootstrap.js";
import { parseDpkgStatus, purgeList } from "./dpkg-status.js";
import { IN_IMAGE } from "../runtimes/in-image.js";
import { MATPLOTLIB_CACHE_DIR, RECIPE_DIR } from "./paths.js";
import { checkInRootfs } from "./rootfs-exec.js";

/** dpkg wants the sbin directories (ldconfig, start-stop-daemon) that a sandbox's PATH omits. */
const ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * matplotlib scans every font on first use and caches the result in its (writable) cache dir:
 * ~0.4 s on the host per fresh sandbox, seconds under TCG. The scan is done once here, inside the
 * image so its paths are the sandbox's; the engine seeds the file into each python sandbox.
 */
export async function bakeMatplotlibCache(
  rootfs: string,
  interpreters: readonly string[] = [IN_IMAGE.python311],
): Promise<void> {
  await mkdir(join(rootfs, MATPLOTLIB_CACHE_DIR), { recursive: true });
  // Each matplotlib version writes its own fontlist-v<version>.json (Debian 3.6: v330; 3.11:
  // v3.11.0); they sit side by side.
  for (const python of interpreters)
    await checkInRootfs({
      rootfs,
      writable: true,
      env: { MPLCONFIGDIR: `/${MATPLOTLIB_CACHE_DIR}` },
      // An interpreter without matplotlib (a wheelhouse without it) has no cache to bake.
      argv: [
        python,
        "-c",
        "import importlib.util\nif importlib.util.find_spec('matplotlib'): import matplotlib.font_manager",
      ],
    });
}

/**
 * Removes purge.txt's packages, except those the config's packages need (its packages and their
 * dependencies, transitively): an operator asking for a package that needs perl keeps perl.
 */
export async function purgePackages(
  rootfs: string,
  keep: readonly string[],
  log: (line: string) => void,
): Promise<void> {
  const wanted = parsePackageList(readFileSync(join(RECIPE_DIR, "purge.txt"), "utf8"));
  const installed = parseDpkgStatus(await readFile(join(rootfs, "var/lib/dpkg/status"), "utf8"));
  const purge = purgeList(wanted, installed, keep);
  const kept = wanted.filter((p) => installed.has(p) && !purge.includes(p));
  if (kept.length > 0)
    log(
      `keeping ${kept.length} otherwise purged package(s) the image config needs: ${kept.join(", ")}`,
    );
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
export async function slim(rootfs: string): Promise<void> {
  for (const dir of ["var/cache/apt", "var/lib/apt/lists", "var/log", "var/cache/debconf"]) {
    const p = join(rootfs, dir);
    if (!existsSync(p)) continue;
    for (const name of await readdir(p)) {
      if (name === "partial" || name === "lock") continue;
      await rm(join(p, name), { recursive: true, force: true });
    }
  }
}

export async function addUserAndMountPoints(rootfs: string): Promise<void> {
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

export function diskBytes(dir: string): number {
  const r = spawnSync("du", ["-sb", dir], { encoding: "utf8" });
  const n = Number.parseInt(r.stdout, 10);
  return Number.isFinite(n) ? n : 0;
}

/**
 * Removes the test suites the lock's packages ship inside themselves (pandas/tests, scipy's,
 * statsmodels', …: 169 MiB of the stack's 715, measured on the lock of 2026-12): no import of
 * the packages reaches them (the build then imports every top-level module to prove it).
 */
export async function removeTestSuites(sitePackages: string): Promise<number> {
  let removed = 0;
  const walk = async (dir: string, depth: number): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const p = join(dir, entry.name);
      if (depth > 0 && entry.name === "tests") {
        await rm(p, { recursive: true, force: true });
        removed++;
      } else if (!entry.name.endsWith(".dist-info")) await walk(p, depth + 1);
    }
  };
  await walk(sitePackages, 0);
  return removed;
}
