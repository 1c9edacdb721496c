import { createHash } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, resolve } from "node:path";
import { GUEST_SCRIPTS } from "../runtimes/table.js";

const OTHERS_EXEC = 0o001;
const OTHERS_READ = 0o004;

/** True when a uid that is neither owner nor group can reach and run `dir/agent`. */
export function reachableByEveryone(dir: string): boolean {
  const agent = join(dir, "agent");
  try {
    const mode = statSync(agent).mode;
    if ((mode & (OTHERS_READ | OTHERS_EXEC)) !== (OTHERS_READ | OTHERS_EXEC)) return false;
    for (let d = resolve(dir); ; d = dirname(d)) {
      if ((statSync(d).mode & OTHERS_EXEC) === 0) return false;
      if (d === dirname(d)) return true;
    }
  } catch {
    return false;
  }
}

/**
 * What a jail uses from the agent's directory besides the agent: the pre-start and session
 * scripts and the display modules every Python imports (GUEST_SCRIPTS), the reseed addon.
 */
const BESIDE_AGENT = [...GUEST_SCRIPTS, "scratchrun-reseed.node"];

/**
 * A directory holding the agent that every sandbox uid can reach, for the jail to bind-mount:
 * `dir` itself, or (when `dir` sits under a private directory, as npx's cache under /root does)
 * a copy in `cacheRoot` of the agent and what sits beside it for jails, named by their hash so each
 * build gets its own and reruns reuse it.
 */
export function jailReadableAgentDir(dir: string, cacheRoot: string): string {
  if (reachableByEveryone(dir)) return dir;
  const names = ["agent", ...BESIDE_AGENT.filter((n) => existsSync(join(dir, n)))];
  const contents = names.map((n) => readFileSync(join(dir, n)));
  const digest = createHash("sha256");
  names.forEach((n, i) => digest.update(`${n}\0${contents[i]!.length}\0`).update(contents[i]!));
  const staged = join(cacheRoot, `agent-${digest.digest("hex").slice(0, 16)}`);
  // Reused only if it is still the same bytes (a copy from an interrupted or tampered run is not).
  const same = (n: string, i: number) =>
    existsSync(join(staged, n)) && readFileSync(join(staged, n)).equals(contents[i]!);
  if (names.every(same)) return staged;
  mkdirSync(staged, { recursive: true, mode: 0o755 });
  for (let d = staged; d !== dirname(d) && d.startsWith(cacheRoot); d = dirname(d))
    chmodSync(d, 0o755);
  names.forEach((n, i) => {
    const dest = join(staged, n);
    mkdirSync(dirname(dest), { recursive: true, mode: 0o755 });
    chmodSync(dirname(dest), 0o755);
    const tmp = `${dest}.tmp-${process.pid}`;
    writeFileSync(tmp, contents[i]!);
    chmodSync(tmp, n === "agent" ? 0o755 : 0o444);
    renameSync(tmp, dest);
  });
  return staged;
}
