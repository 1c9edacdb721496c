/**
 * The locked wheels of one target interpreter, downloaded once by the host's pip into a cache
 * keyed by the lock's content: a rebuild (and CI) with the same lock downloads nothing. Whether an
 * index is there is pip's answer to a one-wheel download (the lock's probe), never a fetch of our
 * own: pip's config, certificates and proxy are the ones that count.
 */
import { existsSync, readdirSync } from "node:fs";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  classifyPipFailure,
  downloadArgs,
  explainPipFailure,
  runHostPip,
  type HostPip,
} from "./host-pip.js";
import { lockLinesFor, parseLock, sha256Hex, type LockTarget } from "./python-lock.js";
import { pidAlive } from "../jail/procfs.js";

const PARTIAL = ".partial-";

const NO_INDEX = "no package index answered the host's pip";

/** The one line a build without any package index (and no cached wheels) leaves in the manifest. */
export function noIndexNote(reason: string, python = "python3.12"): string {
  const also = python === "python3.12" ? ", or set SCRATCHRUN_WHEELHOUSE" : "";
  return `${NO_INDEX} (${reason}): ${python} has the standard library only; configure pip to reach one (pip.conf, PIP_INDEX_URL, PIP_PROXY)${also}, and build again`;
}

/** pip's reason in a manifest's notes, when its build found no index; else null. */
export function noIndexReason(notes: readonly string[]): string | null {
  for (const n of notes) {
    if (!n.startsWith(`${NO_INDEX} (`)) continue;
    const end = n.search(/\): python3\.\d+ has the standard library only/);
    if (end > 0) return n.slice(NO_INDEX.length + 2, end);
  }
  return null;
}

/** pip's lines worth a build log: what it fetches and what goes wrong (not its config chatter). */
function progressLine(line: string, log: (line: string) => void): void {
  if (/^\s*(Collecting|Saved|ERROR|WARNING: Retrying)/.test(line)) log(`pip: ${line.trim()}`);
}

/** Removes downloads a builder that is gone left half done. */
async function removeAbandonedDownloads(root: string): Promise<void> {
  for (const name of readdirSync(root)) {
    const at = name.indexOf(PARTIAL);
    if (at < 0) continue;
    const pid = Number(name.slice(at + PARTIAL.length));
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && pidAlive(pid)) continue;
    await rm(join(root, name), { recursive: true, force: true });
  }
}

/** Written last into a complete cache directory; lists the wheels. */
const COMPLETE = "complete.txt";

export type LockedWheels =
  | { kind: "cached" | "downloaded"; dir: string; wheels: number }
  | { kind: "no-index"; reason: string };

export interface LockedWheelsOptions {
  /** The cache's root (one directory per lock and target below it). */
  cacheRoot: string;
  lockFile: string;
  target: LockTarget;
  pip: HostPip;
  log: (line: string) => void;
  /** Timeout of the probe (pip's own --timeout is 1/3 of it); default 60 s. */
  probeTimeoutMs?: number;
}

/** The cache directory of a lock's text and a target. */
export function cacheDirFor(cacheRoot: string, lockText: string, target: LockTarget): string {
  return join(cacheRoot, `${sha256Hex(lockText).slice(0, 16)}-${target.abi}`);
}

/**
 * The directory holding every wheel the lock pins for `target`: the cache's when complete, else
 * downloaded by the host's pip after the probe says an index answers. No index: `no-index` with
 * pip's reason. An index that answers the probe and then fails (a hash that does not match, a
 * wheel missing for this platform, a download that breaks) throws naming the package.
 */
export async function lockedWheels(o: LockedWheelsOptions): Promise<LockedWheels> {
  const lockText = await readFile(o.lockFile, "utf8");
  const lock = parseLock(lockText);
  const dir = cacheDirFor(o.cacheRoot, lockText, o.target);
  const label = `python${o.target.python}`;
  if (existsSync(join(dir, COMPLETE))) {
    const wheels = readdirSync(dir).filter((n) => n.endsWith(".whl")).length;
    o.log(`${label}: ${wheels} locked wheels from the cache ${dir}`);
    return { kind: "cached", dir, wheels };
  }
  await mkdir(o.cacheRoot, { recursive: true });
  await removeAbandonedDownloads(o.cacheRoot);
  const work = `${dir}${PARTIAL}${process.pid}`;
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true });
  try {
    const probeFile = join(work, "probe.txt");
    await writeFile(probeFile, lockLinesFor(lock, lock.probe));
    const probeMs = o.probeTimeoutMs ?? 60_000;
    o.log(
      `${label}: asking pip for one locked wheel (${lock.probe}) to see whether an index answers`,
    );
    const probe = await runHostPip(
      o.pip,
      [
        ...downloadArgs(o.target, probeFile, join(work, "probe"), { noDeps: true }),
        "--timeout",
        String(Math.max(1, Math.round(probeMs / 3000))),
        "--retries",
        "1",
      ],
      probeMs,
    );
    if (probe.code !== 0) {
      // Only silence means "no index": an index that answers with a wrong file or without this
      // platform's wheel is a failure to fix, not a reason to ship the standard library alone.
      const failure = classifyPipFailure(probe.stderr);
      if (failure.kind === "unreachable") return { kind: "no-index", reason: failure.message };
      throw new Error(`${label}: ${failure.message}`);
    }
    await rm(join(work, "probe"), { recursive: true, force: true });
    o.log(`${label}: downloading the ${lock.packages.length} locked packages with the host's pip`);
    const got = await runHostPip(
      { ...o.pip, onLine: (l) => (o.pip.onLine ? o.pip.onLine(l) : progressLine(l, o.log)) },
      downloadArgs(o.target, o.lockFile, work),
      30 * 60_000,
    );
    if (got.code !== 0)
      throw new Error(
        `${label}: the locked wheels could not be downloaded: ${explainPipFailure(got.stderr)}`,
      );
    const wheels = readdirSync(work)
      .filter((n) => n.endsWith(".whl"))
      .sort();
    await rm(probeFile, { force: true });
    await writeFile(join(work, COMPLETE), `${wheels.join("\n")}\n`);
    await rm(dir, { recursive: true, force: true });
    await rename(work, dir);
    await pruneOtherLocks(o.cacheRoot, dir, o.target, o.log);
    return { kind: "downloaded", dir, wheels: wheels.length };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** Removes this target's cache directories of other locks (an old lock's wheels are dead weight). */
async function pruneOtherLocks(
  root: string,
  keep: string,
  target: LockTarget,
  log: (line: string) => void,
): Promise<void> {
  for (const name of readdirSync(root)) {
    const p = join(root, name);
    if (p === keep || !new RegExp(`^[0-9a-f]{16}-${target.abi}$`).test(name)) continue;
    log(`removing the wheel cache of an earlier lock: ${p}`);
    await rm(p, { recursive: true, force: true });
  }
}
