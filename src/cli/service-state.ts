/**
 * The local service's place on the machine (decision 0018): the group whose members may open its
 * socket, and the state file it writes beside the socket while it runs (which version, where its
 * log goes), which `doctor` reads as any user, also one who cannot open the socket.
 */
import { spawnSync } from "node:child_process";
import { readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { readProcStat } from "../jail/procfs.js";

/** The group that may open the local socket: root's and its members'. */
export const SERVICE_GROUP = "scratchrun";

/** The group's gid, or null when the machine has no such group (getent: files, LDAP, …). */
export function groupGid(name: string = SERVICE_GROUP): number | null {
  const r = spawnSync("getent", ["group", name], { encoding: "utf8" });
  if (r.status !== 0) return null;
  const gid = Number(r.stdout.split(":")[2]);
  return Number.isInteger(gid) ? gid : null;
}

/** The group's gid, made (a system group) when missing, as setup makes it. */
export function ensureServiceGroup(name: string = SERVICE_GROUP): number {
  const found = groupGid(name);
  if (found !== null) return found;
  const r = spawnSync("groupadd", ["--system", name], { encoding: "utf8" });
  const made = groupGid(name);
  if (made === null)
    throw new Error(`cannot make the group ${name}: ${r.stderr.trim() || r.error?.message}`);
  return made;
}

/** What the running service says about itself, in `service.json` beside its socket. */
export interface ServiceState {
  pid: number;
  /** The pid's start time (/proc/PID/stat), so a reused pid is not taken for the service. */
  start_time: string;
  version: string;
  socket: string;
  /** Where its log goes: a file, "journal" (under systemd) or "stderr". */
  log: string;
  isolation: string;
  /** The TCP listener's URL when it has one. */
  url: string | null;
}

export const stateFileFor = (socket: string): string => join(dirname(socket), "service.json");

/** Writes the state file (0644, whole or not at all) and removes it when this process exits. */
export function writeServiceState(state: ServiceState): void {
  const file = stateFileFor(state.socket);
  const tmp = `${file}.${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o644 });
  renameSync(tmp, file);
  process.once("exit", () => {
    try {
      const now = JSON.parse(readFileSync(file, "utf8")) as ServiceState;
      if (now.pid === process.pid) rmSync(file, { force: true });
    } catch {
      // gone, or another service's
    }
  });
}

/**
 * The state file beside `socket`, and whether the process it names still runs (same pid, same
 * start time); null when there is none or it does not parse.
 */
export function readServiceState(socket: string): { state: ServiceState; live: boolean } | null {
  let state: ServiceState;
  try {
    state = JSON.parse(readFileSync(stateFileFor(socket), "utf8")) as ServiceState;
  } catch {
    return null;
  }
  if (typeof state.pid !== "number" || typeof state.version !== "string") return null;
  return { state, live: readProcStat(state.pid)?.startTime === state.start_time };
}
