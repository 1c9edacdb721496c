/**
 * How many connections the egress proxy holds. Every connection it accepts (HTTPS, HTTP, DNS over
 * TCP) counts once against its sandbox's bound and once against the proxy's own; the dialled
 * upstream of a spliced connection is not counted again (a sandbox gets the number below, not
 * half of it). The proxy runs with its own file limit (not the server's), and its bound leaves
 * room in that limit for every accepted connection's upstream and for the proxy itself, so one
 * sandbox cannot take another's egress and a busy proxy refuses by name instead of failing to
 * accept.
 */
import type net from "node:net";
import type { Assignment } from "./assignments.js";

/** Connections one sandbox may hold through the proxy at once: HTTPS, HTTP and DNS over TCP together. */
export const MAX_CONNECTIONS_PER_SANDBOX = 256;
/** The proxy child's file limit (RLIMIT_NOFILE, set when it is started). */
export const PROXY_MAX_FILES = 65_536;
/** Descriptors kept for the proxy itself: listeners, stdio, resolver sockets, node's own. */
export const RESERVED_FILES = 256;

/** Connections the whole proxy may hold at once with `maxFiles` descriptors: two per connection. */
export function totalConnectionBound(maxFiles: number): number {
  return Math.max(0, Math.floor((maxFiles - RESERVED_FILES) / 2));
}

/** Why a connection was not taken: the sandbox's bound, or the proxy's. */
export type AdmissionRefusal = "connection_limit" | "proxy_busy";

/** The proxy's count of the connections it holds, against its total bound. */
export class Admission {
  private open = 0;
  constructor(readonly total: number) {}

  /** Connections held now (for tests and diagnostics). */
  get held(): number {
    return this.open;
  }

  /**
   * Takes a connection just accepted on `port` for sandbox `a` (counted out again when it closes),
   * or resets it: no sandbox or a released one; the sandbox's bound reached (connection_limit) or
   * the proxy's (proxy_busy), both named in the sandbox's record.
   */
  take(a: Assignment | undefined, sock: net.Socket, port: number): a is Assignment {
    sock.on("error", () => undefined);
    if (!a || a.released) {
      sock.resetAndDestroy();
      return false;
    }
    const refused: AdmissionRefusal | null =
      a.accepted >= MAX_CONNECTIONS_PER_SANDBOX
        ? "connection_limit"
        : this.open >= this.total
          ? "proxy_busy"
          : null;
    if (refused) {
      a.log.add(null, port, refused);
      sock.resetAndDestroy();
      return false;
    }
    a.accepted += 1;
    this.open += 1;
    a.conns.add(sock);
    sock.once("close", () => {
      a.accepted -= 1;
      this.open -= 1;
      a.conns.delete(sock);
    });
    return true;
  }
}
