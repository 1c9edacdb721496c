/**
 * One server with public networking per uplink and per prefix on a host. A server's start removes
 * every sandbox network of its prefix that it does not hold (what a killed server left), and its
 * sandboxes take address slots counted only from its own prefix's links: a second server on the
 * same prefix would cut the first's sandboxes, and one on the same uplink with another prefix
 * would hand out the first's addresses. So a server claims both names before it reaps.
 *
 * A claim is an abstract unix socket (`\0scratchrun/net/...`): the kernel gives a name to one
 * socket at a time and frees it when the process ends, killed or not, so nothing stale is left to
 * clean and no start can race another into holding the same name. Abstract names belong to the
 * network namespace the server runs in; servers in different ones share no uplink either, unless
 * the operator points them at one (SCRATCHRUN_UPLINK_NETNS), which this does not see.
 *
 * Any local user may bind an abstract name (no permission guards it), so a held name's holder is
 * looked up in the kernel's tables (its listening socket's inode in /proc/net/unix, the process
 * holding that inode), never asked: a holder running as another user than root and this process
 * is not a server (public networking needs root) but a squatter, and the claim goes on without
 * that name, naming the process, rather than let any user keep every server off the network.
 */
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { createServer, type Server } from "node:net";
import type { UplinkConfig } from "./uplink.js";

/** A process holding a claim's name, from the kernel's tables. */
export interface NameHolder {
  pid: number;
  uid: number;
  /** Its command line (at most 200 characters). */
  command: string;
}

export interface UplinkClaim {
  /** Gives the names back when the last user in this process is done with them. */
  release(): void;
  /**
   * Names a process that cannot be a server (another user's) holds: this claim goes on without
   * them, so the one-server check is off for each until that process ends. For the startup log.
   */
  squatted: (NameHolder & { what: string })[];
}

export interface UplinkHeld {
  /** The server holding the uplink or the prefix; null when the kernel's tables did not say. */
  pid: number | null;
  /** Which name is taken, in words: `prefix "sr-"` or `the host's uplink`. */
  what: string;
}

/** Claims held by this process: a second engine in one process shares them. */
const held = new Map<string, { server: Server; users: number }>();

/** The abstract socket names a server with this uplink claims (tested in uplink-owner.test.ts). */
export function claimNames(u: UplinkConfig): { name: string; what: string }[] {
  return [
    { name: `scratchrun/net/prefix/${u.prefix}`, what: `prefix "${u.prefix}"` },
    {
      name: `scratchrun/net/uplink/${u.netns ?? "-host-"}`,
      what: u.netns === null ? "the host's uplink" : `uplink namespace "${u.netns}"`,
    },
  ];
}

/**
 * Claims the uplink and the prefix for this process, or says who holds one of them. Names this
 * process holds already are shared (counted), never refused.
 */
export async function claimUplink(u: UplinkConfig): Promise<UplinkClaim | UplinkHeld> {
  const names = claimNames(u);
  const taken: string[] = [];
  const squatted: UplinkClaim["squatted"] = [];
  const giveBack = () => {
    for (const n of taken.splice(0)) releaseName(n);
  };
  for (const { name, what } of names) {
    const mine = held.get(name);
    if (mine) {
      mine.users++;
      taken.push(name);
      continue;
    }
    // Whatever happens to this name, the names taken before it go back with it.
    const server = await listenAbstract(name).catch((e: unknown) => {
      giveBack();
      throw e;
    });
    if (server === null) {
      const holder = holderOf(name);
      if (holder && !mayBeServer(holder.uid)) {
        squatted.push({ ...holder, what });
        continue;
      }
      giveBack();
      return { pid: holder?.pid ?? null, what };
    }
    held.set(name, { server, users: 1 });
    taken.push(name);
  }
  let released = false;
  return {
    squatted,
    release() {
      if (released) return;
      released = true;
      giveBack();
    },
  };
}

function releaseName(name: string): void {
  const h = held.get(name);
  if (!h) return;
  if (--h.users > 0) return;
  held.delete(name);
  h.server.close();
}

/** Listens on the abstract name; null when another socket has it. */
function listenAbstract(name: string): Promise<Server | null> {
  return new Promise((resolve, reject) => {
    // Nothing is said on it: a claim is the name alone (holderOf finds who holds one).
    const server = createServer((socket) => socket.destroy());
    server.once("error", (e: NodeJS.ErrnoException) => {
      if (e.code === "EADDRINUSE") resolve(null);
      else reject(e);
    });
    server.listen(`\0${name}`, () => {
      // A claim never keeps a process alive that has nothing else to do.
      server.unref();
      resolve(server);
    });
  });
}

/** A server runs as root (public networking needs it); a test's claims run as this process's user. */
function mayBeServer(uid: number): boolean {
  return uid === 0 || uid === (process.getuid?.() ?? 0);
}

/**
 * The process listening on the abstract socket `name`, from the kernel's tables; null when none is
 * found (it ended meanwhile, or its fds are not readable by this user).
 */
export function holderOf(name: string): NameHolder | null {
  const inodes = listeningInodes(name);
  if (inodes.size === 0) return null;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${entry}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (!m || !inodes.has(m[1]!)) continue;
      try {
        const status = readFileSync(`/proc/${entry}/status`, "utf8");
        const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
        const command = readFileSync(`/proc/${entry}/cmdline`, "utf8")
          .replace(/\0+$/, "")
          .replace(/\0/g, " ")
          .slice(0, 200);
        return { pid: Number(entry), uid, command };
      } catch {
        return null;
      }
    }
  }
  return null;
}

/**
 * Inodes of the listening unix sockets bound to the abstract `name`, shown with a leading "@" and
 * the NULs a binder padded it with as "@" too: Node pads to the address's full 108 bytes, so a
 * name padded so is the one that collides with ours; an unpadded one only where none is.
 */
function listeningInodes(name: string): Set<string> {
  const padded = new Set<string>();
  const found = new Set<string>();
  let table: string;
  try {
    table = readFileSync("/proc/net/unix", "utf8");
  } catch {
    return found;
  }
  for (const line of table.split("\n").slice(1)) {
    // Num RefCount Protocol Flags Type St Inode Path
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const listening = (parseInt(f[3]!, 16) & 0x10000) !== 0;
    const path = f.slice(7).join(" ");
    if (!listening || path.replace(/@+$/, "") !== `@${name}`) continue;
    (path.length === 108 ? padded : found).add(f[6]!);
  }
  return padded.size > 0 ? padded : found;
}
