import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { basename, join, resolve } from "node:path";
import { PACKAGE_ROOT } from "../images/paths.js";
import { requireRoot } from "../jail/root.js";
import { setting } from "../schema/settings/read.js";
import { VERSION } from "../version.js";
import { DEFAULT_LOG_FILE } from "./daemon.js";
import {
  copyPlan,
  findPackageDir,
  installId,
  installPlan,
  reachableByOthers,
} from "./install-tree.js";
import { ensureServiceGroup, readServiceState, SERVICE_GROUP } from "./service-state.js";
import { renderServiceUnit, renderWrapper } from "./service-unit.js";

export const SERVICE_USAGE = `scratchrun service install

As root (setup runs it last): copies this ScratchRun and the packages it needs to
SCRATCHRUN_PREFIX/lib/scratchrun (default /usr/local), world-readable, puts scratchrun and
scratchrun-mcp in SCRATCHRUN_PREFIX/bin for every user, makes the group ${SERVICE_GROUP} and adds
the user who ran it through sudo, and writes the local service's systemd unit (enabled and
started where systemd runs; elsewhere run scratchrun daemon under your supervisor).
`;

/** Where systemd looks for units (systemd-analyze unit-paths): only there is one enabled. */
const SYSTEMD_UNIT_DIRS = [
  "/etc/systemd/system",
  "/usr/local/lib/systemd/system",
  "/usr/lib/systemd/system",
  "/lib/systemd/system",
];

/** Writes `text` to `path` whole (a temporary file renamed over it). */
function writeWhole(path: string, text: string, mode: number): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, text, { mode });
  renameSync(tmp, path);
}

/** Points `link` at `target` in one step (a new link renamed over the old). */
function relink(link: string, target: string): void {
  const tmp = `${link}.tmp-${process.pid}`;
  rmSync(tmp, { force: true });
  symlinkSync(target, tmp);
  renameSync(tmp, link);
}

const run = (cmd: string, args: string[]) => spawnSync(cmd, args, { encoding: "utf8" });

/** `scratchrun service install`: see SERVICE_USAGE. Progress on stderr, one line a step. */
export async function runService(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  if (argv[0] !== "install" || argv.length > 1) {
    process.stderr.write(SERVICE_USAGE);
    return argv[0] === "--help" || argv[0] === "-h" ? 0 : 2;
  }
  requireRoot();
  const say = (s: string) => process.stderr.write(`scratchrun service: ${s}\n`);
  const prefix = resolve(setting("SCRATCHRUN_PREFIX", env) ?? "/usr/local");

  // 1. The copy, named by what it holds; `current` points at it, the one before is kept.
  const lib = join(prefix, "lib", "scratchrun");
  mkdirSync(lib, { recursive: true, mode: 0o755 });
  const plan = installPlan(PACKAGE_ROOT);
  const id = installId(VERSION, plan);
  const dest = join(lib, id);
  if (existsSync(dest)) say(`${dest} is up to date`);
  else {
    copyPlan(plan, dest);
    say(`copied ScratchRun ${VERSION} and its ${plan.size} files to ${dest} (world-readable)`);
  }
  const current = join(lib, "current");
  let previous: string | null = null;
  try {
    previous = basename(readlinkSync(current));
  } catch {
    previous = null;
  }
  relink(current, id);
  for (const name of readdirSync(lib))
    if (name !== "current" && name !== id && name !== previous)
      rmSync(join(lib, name), { recursive: true, force: true });

  // 2. The commands every user runs, on the Node that ran setup.
  const bin = join(prefix, "bin");
  mkdirSync(bin, { recursive: true, mode: 0o755 });
  for (const name of ["scratchrun", "scratchrun-mcp"])
    writeWhole(
      join(bin, name),
      renderWrapper(process.execPath, join(current, "dist", "src", "bin", `${name}.js`)),
      0o755,
    );
  say(`${join(bin, "scratchrun")} and ${join(bin, "scratchrun-mcp")} run it, for every user`);
  if (!reachableByOthers(process.execPath))
    say(
      `warning: other users cannot run ${process.execPath} (a directory on its path is closed to them); install Node.js where every user can (e.g. /usr/bin/node) and run setup again`,
    );

  // 3. The group that may open the socket, and the user who ran setup through sudo.
  const gid = ensureServiceGroup();
  const invoker = env.SUDO_USER;
  if (invoker && invoker !== "root") {
    const groups = run("id", ["-nG", invoker]).stdout.trim().split(/\s+/);
    if (groups.includes(SERVICE_GROUP))
      say(`${invoker} is in the group ${SERVICE_GROUP} (gid ${gid}) already`);
    else if (run("usermod", ["-aG", SERVICE_GROUP, invoker]).status === 0)
      say(
        `added ${invoker} to the group ${SERVICE_GROUP} (gid ${gid}): log in again (or run newgrp ${SERVICE_GROUP}) to use the local service`,
      );
    else say(`warning: could not add ${invoker} to ${SERVICE_GROUP}: usermod -aG failed`);
  } else
    say(
      `users in the group ${SERVICE_GROUP} (gid ${gid}) use the local service: usermod -aG ${SERVICE_GROUP} NAME, then they log in again`,
    );

  // 4. The unit, and the service itself where systemd runs.
  const unitDir = join(prefix, "lib", "systemd", "system");
  mkdirSync(unitDir, { recursive: true, mode: 0o755 });
  const unit = join(unitDir, "scratchrun.service");
  writeWhole(unit, renderServiceUnit(join(bin, "scratchrun")), 0o644);
  const sqlite = findPackageDir(dest, "better-sqlite3");
  if (!sqlite || !existsSync(join(sqlite, "build", "Release", "better_sqlite3.node"))) {
    say(
      "warning: the local service keeps its records in SQLite, and better-sqlite3 is not built in this package (npm held back its install script): npm install -g scratchrun-mcp --allow-scripts=better-sqlite3, then scratchrun setup again",
    );
    return 0;
  }
  if (existsSync("/run/systemd/system") && SYSTEMD_UNIT_DIRS.includes(unitDir)) {
    const steps = [
      ["daemon-reload"],
      ["enable", "scratchrun.service"],
      ["restart", "scratchrun.service"],
    ];
    for (const step of steps) {
      const r = run("systemctl", step);
      if (r.status !== 0) {
        say(`warning: systemctl ${step.join(" ")} failed: ${r.stderr.trim()}`);
        return 0;
      }
    }
    say(`systemd runs the local service (${unit}); its log: journalctl -u scratchrun`);
    return 0;
  }
  say(
    `wrote ${unit}; systemd does not run here: start the local service as root under your supervisor with ${join(bin, "scratchrun")} daemon (log: ${DEFAULT_LOG_FILE})`,
  );
  const running = readServiceState(setting("SCRATCHRUN_SOCKET", env));
  if (running?.live && previous !== id)
    say(
      `a local service runs now (pid ${running.state.pid}, ${running.state.version}): restart it to run this copy`,
    );
  return 0;
}
