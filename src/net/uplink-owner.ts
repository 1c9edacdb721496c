/**
 * One server with public networking per uplink and per prefix on a host. A server's start removes
 * every sandbox network of its prefix that it does not hold (what a killed server left), and its
 * sandboxes take address slots counted only from its own prefix's links: a second server on the
 * same prefix would cut the first's sandboxes, and one on the same uplink with another prefix
 * would hand out the first's addresses. So a server claims both names before it reaps.
 *
 * A claim is an abstract unix socket (`\0scratchrun/net/...`): the kernel gives a name to one
 * socket at a time and frees it when the process ends, killed or not, so nothing stale is left to
 * clean and no start can race another into holding the same name. The holder answers a connection
 * with its pid, for the refusal's message. Abstract names belong to the network namespace the
 * server runs in; servers in different ones share no uplink either, unless the operator points
 * them at one (SCRATCHRUN_UPLINK_NETNS), which this does not see.
 */
import { createConnection, createServer, type Server } from "node:net";
import type { UplinkConfig } from "./uplink.js";

export interface UplinkClaim {
  /** Gives the names back when the last user in this process is done with them. */
  release(): void;
}

export interface UplinkHeld {
  /** The process holding the uplink or the prefix; null when it did not say in time. */
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
      giveBack();
      return { pid: await askHolder(name), what };
    }
    held.set(name, { server, users: 1 });
    taken.push(name);
  }
  let released = false;
  return {
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
    const server = createServer((socket) => {
      socket.end(`${process.pid}\n`);
      socket.on("error", () => undefined);
    });
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

/** The holder's pid, as it answers a connection; null when it does not within a second. */
function askHolder(name: string): Promise<number | null> {
  return new Promise((resolve) => {
    let text = "";
    const socket = createConnection(`\0${name}`);
    const done = (pid: number | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(pid);
    };
    const timer = setTimeout(() => done(null), 1000);
    socket.setEncoding("utf8");
    socket.on("data", (d: string) => (text += d));
    socket.on("end", () => {
      const pid = Number(text.trim());
      done(Number.isInteger(pid) && pid > 0 ? pid : null);
    });
    socket.on("error", () => done(null));
  });
}
