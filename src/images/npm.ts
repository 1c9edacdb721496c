/**
 * node20's npm packages: fetched on the build host with the operator's own npm (its registry,
 * proxy, CA and credentials) with install scripts OFF, so no package code runs there; copied into
 * the image at /usr/local/lib/scratchrun-npm with its lockfile; `/node_modules` points at it, the
 * one directory both require() and import resolve a bare name from whatever file the code runs
 * in. Packages that have install scripts get them run afterwards by `npm rebuild` inside a build
 * jail: an unprivileged host uid, the image read-only, only the npm directory writable, no network.
 */
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { chmod, lstat, mkdir, readdir, symlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { ImageConfig } from "./config.js";
import { IN_IMAGE, IMAGE_ENV } from "../runtimes/in-image.js";

/** Where the npm tree lives in the image (package.json, package-lock.json, node_modules). */
export const NPM_DIR_IN_IMAGE = "/usr/local/lib/scratchrun-npm";
/** Where the host's npm is mounted: an empty mount point of the image (bwrap cannot create one in a read-only image). */
const NPM_CLI_MOUNT = "/run/scratchrun";
/** How long the install scripts of all packages may take together. */
const SCRIPTS_TIMEOUT_MS = 10 * 60_000;

export interface NpmPackageLock {
  lockfileVersion?: number;
  packages?: Record<string, { version?: string; hasInstallScript?: boolean; dev?: boolean }>;
}

/** The package.json the build installs from: the config's packages, exact, nothing else. */
export function npmPackageJson(packages: Record<string, string>): string {
  return `${JSON.stringify(
    { name: "scratchrun-image-npm", version: "0.0.0", private: true, dependencies: packages },
    null,
    2,
  )}\n`;
}

/** Every package of a lockfile as name -> version (nested copies under their path's last name). */
export function lockedPackages(lock: NpmPackageLock): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [path, entry] of Object.entries(lock.packages ?? {})) {
    if (!path || !entry.version || entry.dev) continue;
    const name = path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length);
    if (!(name in out)) out[name] = entry.version;
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : 1)));
}

/** Paths (relative to the npm dir) of the packages that have install scripts. */
export function packagesWithScripts(lock: NpmPackageLock): string[] {
  return Object.entries(lock.packages ?? {})
    .filter(([path, e]) => path !== "" && e.hasInstallScript === true)
    .map(([path]) => path)
    .sort();
}

/** The npm the build runs: the host's, as the operator configured it. */
export function hostNpmCli(): string {
  const r = spawnSync("npm", ["root", "-g"], { encoding: "utf8" });
  const fromRoot = r.status === 0 ? join(r.stdout.trim(), "npm", "bin", "npm-cli.js") : "";
  if (fromRoot && existsSync(fromRoot)) return fromRoot;
  const which = spawnSync("sh", ["-c", "command -v npm"], { encoding: "utf8" });
  const path = which.stdout.trim();
  if (which.status === 0 && path) {
    const real = realpathSync(path);
    if (real.endsWith(".js")) return real;
  }
  throw new Error("node20 packages need npm on the build host (it comes with Node.js)");
}

function runNpm(
  args: string[],
  cwd: string,
  onProgress: (line: string) => void,
): Promise<{ code: number | null; lines: string[] }> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [hostNpmCli(), ...args], {
      cwd,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, npm_config_update_notifier: "false" },
    });
    const lines: string[] = [];
    const onData = (buf: Buffer) => {
      for (const line of buf.toString("utf8").split("\n")) {
        if (!line.trim()) continue;
        lines.push(line);
        if (lines.length > 200) lines.shift();
        onProgress(`npm: ${line}`);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("error", reject);
    child.on("close", (code) => resolvePromise({ code, lines }));
  });
}

/**
 * Fetches the config's packages into `dir` on the host: `npm ci` against the config's lockfile,
 * or `npm install` (which writes one). --ignore-scripts: nothing of a package runs here. Throws
 * naming the packages npm's errors name. Done before the Debian bootstrap, so a missing package
 * or version fails in seconds, not after minutes.
 */
export async function fetchNpmPackages(
  npm: NonNullable<ImageConfig["npm"]>,
  dir: string,
  onProgress: (line: string) => void,
): Promise<NpmPackageLock> {
  await mkdir(dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), npmPackageJson(npm.packages));
  if (npm.lockfile) copyFileSync(npm.lockfile, join(dir, "package-lock.json"));
  const common = ["--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev", "--loglevel=warn"];
  const { code, lines } = await runNpm(
    npm.lockfile ? ["ci", ...common] : ["install", ...common, "--install-strategy=hoisted"],
    dir,
    onProgress,
  );
  if (code !== 0) {
    const errors = lines.filter((l) => /^npm (error|ERR!)/.test(l));
    const named = Object.keys(npm.packages).filter((name) =>
      errors.some((l) =>
        new RegExp(`(^|[\\s'"/])${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(@|['"\\s]|$)`).test(
          l,
        ),
      ),
    );
    const which = named.length
      ? named
          .map((n) => `node20.packages[${JSON.stringify(n)}] (${n}@${npm.packages[n]})`)
          .join(", ")
      : "node20.packages";
    throw new Error(
      `${which}: npm could not install ${npm.lockfile ? `from the lockfile ${npm.lockfile}` : "it"}:\n${(errors.length ? errors : lines).slice(-12).join("\n")}`,
    );
  }
  return JSON.parse(readFileSync(join(dir, "package-lock.json"), "utf8")) as NpmPackageLock;
}

/** Copies the fetched tree into the image (no setuid bit survives) and points /node_modules at it. */
export async function placeNpmTree(rootfs: string, fetched: string): Promise<string> {
  const { copyTree } = await import("./copy-tree.js");
  const dest = join(rootfs, NPM_DIR_IN_IMAGE);
  await copyTree(fetched, dest);
  await stripSpecialBits(dest);
  await symlink(`${NPM_DIR_IN_IMAGE.slice(1)}/node_modules`, join(rootfs, "node_modules"));
  return dest;
}

/**
 * The command line of the install-scripts jail: bwrap started by setpriv as the unprivileged host
 * `uid` (no capabilities, no groups); the image read-only as /, the npm directory the one writable
 * path, the host's npm read-only, no network, no further user namespaces, a fresh /tmp.
 */
export function npmScriptsJailArgs(options: {
  rootfs: string;
  npmDir: string;
  npmPackageDir: string;
  uid: number;
}): string[] {
  const env = { ...IMAGE_ENV, HOME: "/tmp", npm_config_cache: "/tmp/npm-cache" };
  return [
    "/usr/bin/setpriv",
    `--reuid=${options.uid}`,
    `--regid=${options.uid}`,
    "--clear-groups",
    "--inh-caps=-all",
    "--",
    "/usr/bin/bwrap",
    "--ro-bind",
    options.rootfs,
    "/",
    "--bind",
    options.npmDir,
    NPM_DIR_IN_IMAGE,
    "--ro-bind",
    options.npmPackageDir,
    NPM_CLI_MOUNT,
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--tmpfs",
    "/tmp",
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
    "--clearenv",
    ...Object.entries(env).flatMap(([k, v]) => ["--setenv", k, v]),
    "--chdir",
    NPM_DIR_IN_IMAGE,
    "--",
    IN_IMAGE.node20,
    `${NPM_CLI_MOUNT}/bin/npm-cli.js`,
    "rebuild",
    "--offline",
    "--foreground-scripts",
    "--no-audit",
    "--no-fund",
  ];
}

async function chownTree(path: string, uid: number): Promise<void> {
  const r = spawnSync("chown", ["-R", "--no-dereference", `${uid}:${uid}`, path], {
    encoding: "utf8",
  });
  if (r.status !== 0) throw new Error(`chown -R ${uid} ${path}: ${r.stderr.trim()}`);
}

/** Clears setuid, setgid and sticky bits and write access for others under `path`. */
export async function stripSpecialBits(path: string): Promise<void> {
  const st = await lstat(path);
  if (st.isSymbolicLink()) return;
  const mode = st.mode & 0o7777;
  if (mode & 0o7002) await chmod(path, mode & ~0o7002);
  if (st.isDirectory())
    for (const name of await readdir(path)) await stripSpecialBits(join(path, name));
}

/**
 * Runs the install scripts of the tree at `npmDir` (inside the image being built) in the jail of
 * npmScriptsJailArgs, as a host uid reserved from the sandbox pool (never a live sandbox's). The
 * tree is owned by that uid only while the scripts run, then by root again.
 */
export async function runNpmInstallScripts(
  rootfs: string,
  npmDir: string,
  onProgress: (line: string) => void,
): Promise<void> {
  const { UidPool } = await import("../jail/uids.js");
  const pool = new UidPool();
  const uid = pool.acquire();
  try {
    await chownTree(npmDir, uid);
    const argv = npmScriptsJailArgs({
      rootfs,
      npmDir,
      npmPackageDir: dirname(dirname(hostNpmCli())),
      uid,
    });
    const lines: string[] = [];
    const code = await new Promise<number | string>((resolvePromise, reject) => {
      const child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", "pipe", "pipe"], env: {} });
      const timer = setTimeout(() => child.kill("SIGKILL"), SCRIPTS_TIMEOUT_MS);
      const onData = (buf: Buffer) => {
        for (const line of buf.toString("utf8").split("\n")) {
          if (!line.trim()) continue;
          lines.push(line);
          if (lines.length > 60) lines.shift();
          onProgress(`npm scripts: ${line}`);
        }
      };
      child.stdout.on("data", onData);
      child.stderr.on("data", onData);
      child.on("error", (e) => {
        clearTimeout(timer);
        reject(e);
      });
      child.on("close", (c, signal) => {
        clearTimeout(timer);
        resolvePromise(c ?? signal ?? "unknown");
      });
    });
    if (code !== 0)
      throw new Error(
        `node20.packages: an install script failed in the build jail (exit ${code}):\n${lines.slice(-15).join("\n")}`,
      );
  } finally {
    await chownTree(npmDir, 0);
    await stripSpecialBits(npmDir);
    pool.release(uid);
  }
}
