import { homedir } from "node:os";
import { join } from "node:path";
import { setting } from "../schema/settings/read.js";

/**
 * Where the service keeps its state (database, lock): SCRATCHRUN_HOME, else /var/lib/scratchrun
 * for root, else the per-user data directory (XDG_DATA_HOME or ~/.local/share).
 */
export function scratchrunHome(env: NodeJS.ProcessEnv = process.env): string {
  const set = setting("SCRATCHRUN_HOME", env);
  if (set) return set;
  if (process.getuid?.() === 0) return "/var/lib/scratchrun";
  const data = env.XDG_DATA_HOME || join(env.HOME || homedir(), ".local", "share");
  return join(data, "scratchrun");
}

export const DATABASE_FILE = "scratchrun.db";
export const LOCK_FILE = "server.pid";
