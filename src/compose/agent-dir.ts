import { createHash } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  statSync,
} from "node:fs";
import { dirname, join, resolve } from "node:path";

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
 * A directory holding the agent that every sandbox uid can reach, for the jail to bind-mount:
 * `dir` itself, or (when `dir` sits under a private directory, as npx's cache under /root does)
 * a copy in `cacheRoot`, named by the agent's hash so each build gets its own and reruns reuse it.
 */
export function jailReadableAgentDir(dir: string, cacheRoot: string): string {
  if (reachableByEveryone(dir)) return dir;
  const content = readFileSync(join(dir, "agent"));
  const hash = createHash("sha256").update(content).digest("hex").slice(0, 16);
  const staged = join(cacheRoot, `agent-${hash}`);
  // Reused only if it is still the same bytes (a copy from an interrupted or tampered run is not).
  if (
    existsSync(join(staged, "agent")) &&
    createHash("sha256")
      .update(readFileSync(join(staged, "agent")))
      .digest("hex")
      .slice(0, 16) === hash
  )
    return staged;
  mkdirSync(staged, { recursive: true, mode: 0o755 });
  for (let d = staged; d !== dirname(d) && d.startsWith(cacheRoot); d = dirname(d))
    chmodSync(d, 0o755);
  const tmp = join(staged, `agent.tmp-${process.pid}`);
  copyFileSync(join(dir, "agent"), tmp);
  chmodSync(tmp, 0o755);
  renameSync(tmp, join(staged, "agent"));
  return staged;
}
