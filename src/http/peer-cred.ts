/**
 * Who is at the other end of a unix socket, as the kernel recorded it when the client connected
 * (SO_PEERCRED, read by the small addon src/http/peer-cred.c that setup builds into
 * build/host/). The local service's only notion of a caller (decision 0018): nothing the client
 * sends is asked. A connection whose credentials cannot be read has no caller.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import type { Socket } from "node:net";
import { fileURLToPath } from "node:url";

export interface Peer {
  pid: number;
  uid: number;
  gid: number;
}

/** Where setup builds the addon (scripts/build-guest.mjs), from this file at dist/src/http/. */
export const PEERCRED_ADDON = fileURLToPath(
  new URL("../../../build/host/scratchrun-peercred.node", import.meta.url),
);

type Addon = { peerCredentials(fd: number): [number, number, number] };
let addon: Addon | undefined;

/**
 * Loads the addon (once); throws, naming the file and the command that builds it, when it is not
 * there or does not load. The local service calls this before it listens.
 */
export function loadPeerCredentials(path: string = PEERCRED_ADDON): void {
  if (addon) return;
  if (!existsSync(path))
    throw new Error(
      `the peer-credentials addon is not built (${path}); run scratchrun setup (as root), or npm run build in a checkout`,
    );
  addon = createRequire(import.meta.url)(path) as Addon;
}

/**
 * The kernel's credentials of the process that connected `socket` (a unix stream socket the
 * server accepted). Throws when the socket is gone, is not a unix socket, or has no peer.
 */
export function peerOf(socket: Socket): Peer {
  loadPeerCredentials();
  // net.Socket keeps its libuv handle here; a Pipe's fd is the accepted connection's.
  const fd = (socket as unknown as { _handle?: { fd?: unknown } | null })._handle?.fd;
  if (typeof fd !== "number" || fd < 0) throw new Error("the connection has no descriptor");
  const [pid, uid, gid] = addon!.peerCredentials(fd);
  return { pid, uid, gid };
}
