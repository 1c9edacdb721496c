import { closeSync, openSync, readFileSync, readlinkSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { LOCK_FILE } from "./home.js";

/**
 * One server per state directory: the database's "running" rows and the orphan reaper both assume
 * that whoever holds this lock is the only writer. A lock whose pid is gone (crash, kill -9) is
 * taken over; a live holder makes the second server refuse to start.
 */
export function acquireHomeLock(home: string): { release(): void; previousPid: number | null } {
  const path = join(home, LOCK_FILE);
  let previousPid: number | null = null;
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, "wx", 0o600);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      let released = false;
      return {
        previousPid,
        release() {
          if (released) return;
          released = true;
          try {
            if (readFileSync(path, "utf8").trim() === String(process.pid)) unlinkSync(path);
          } catch {
            // already gone
          }
        },
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      const pid = Number(readFileSync(path, "utf8").trim());
      if (Number.isInteger(pid) && pid > 0 && isLiveNode(pid))
        throw new Error(
          `another scratchrun server (pid ${pid}) uses ${home}; stop it or set SCRATCHRUN_HOME`,
        );
      previousPid = Number.isInteger(pid) && pid > 0 ? pid : null;
      unlinkSync(path);
    }
  }
  throw new Error(`cannot take the lock ${path}`);
}

function isLiveNode(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    return readlinkSync(`/proc/${pid}/exe`) === readlinkSync("/proc/self/exe");
  } catch {
    return false;
  }
}
