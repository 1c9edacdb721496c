/**
 * The egress proxy's TCP side: a connection redirected from a sandbox's port 443 or 80 is held
 * until its first bytes say which name it is for (TLS ClientHello SNI, HTTP Host), checked against
 * that sandbox's allowlist, then dialled by name (the proxy's own resolution, every address checked
 * against the blocked ranges and the host's neighbourhood) and spliced. Where the code sent it is
 * never used: an allowed SNI sent to any address reaches that name's own addresses only.
 *
 * A refusal is fast and says so where the protocol can: a fatal TLS `access_denied` alert, an HTTP
 * 403 naming the reason; a connection that is not TLS/HTTP, or whose name cannot be dialled, is
 * reset. Each refusal is recorded for the sandbox's result.
 */
import net from "node:net";
import type { Admission } from "./admission.js";
import { HelloReader, type ReadWork } from "./client-hello.js";
import {
  decideHttp,
  decideTls,
  dialable,
  type Decision,
  type HostBlock,
  type RefusalReason,
} from "./decide.js";
import { HeadReader } from "./http-head.js";
import type { Assignment } from "./assignments.js";
import type { FirstBytesWork } from "./control.js";
import type { NameResolver } from "./resolve.js";

/**
 * How long a connection may take to send its hello or request head, from its accept: the time to
 * a verdict, however the bytes trickle in (the bytes are bounded by the readers: MAX_PEEK_BYTES,
 * MAX_HEAD_BYTES).
 */
export const FIRST_BYTES_TIMEOUT_MS = 5000;
/** Per address dialled, and for all of a name's addresses together. */
const CONNECT_TIMEOUT_MS = 5000;
const DIAL_BUDGET_MS = 10_000;
const MAX_DIAL_ADDRESSES = 4;

/** TLS alert record: fatal (2) access_denied (49), TLS 1.2 record version. */
const TLS_ACCESS_DENIED = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49]);

export interface StreamContext {
  assignmentOf(addr: string | undefined): Assignment | undefined;
  admission: Admission;
  host(): HostBlock;
  resolver: NameResolver;
  work: FirstBytesWork;
}

function reset(sock: net.Socket): void {
  sock.resetAndDestroy();
}

/** Ends `sock` gracefully after `bytes`, and destroys it if the peer lingers. */
function answerAndClose(sock: net.Socket, bytes: Buffer | string): void {
  sock.end(bytes);
  setTimeout(() => sock.destroy(), 2000).unref();
}

function httpRefusal(host: string | null, reason: RefusalReason): string {
  const body = `ScratchRun egress allowlist: refused ${host ?? "(no host name)"} (${reason})\n`;
  return [
    "HTTP/1.1 403 Forbidden",
    "Content-Type: text/plain; charset=utf-8",
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Connection: close",
    `X-ScratchRun-Egress: refused; reason=${reason}`,
    "",
    body,
  ].join("\r\n");
}

/** Joins two sockets; an error on one resets the other, a close ends it. */
function splice(a: net.Socket, b: net.Socket): void {
  a.pipe(b);
  b.pipe(a);
  for (const [x, y] of [
    [a, b],
    [b, a],
  ] as const) {
    x.on("error", () => {
      if (!y.destroyed) y.resetAndDestroy();
    });
    x.on("close", () => {
      if (y.destroyed) return;
      y.end();
      setTimeout(() => y.destroy(), 5000).unref();
    });
  }
}

function connectOnce(address: string, port: number, timeoutMs: number): Promise<net.Socket | null> {
  return new Promise((resolve) => {
    const s = net.connect({ host: address, port, allowHalfOpen: true, noDelay: true });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      s.off("connect", onConnect);
      s.off("error", onError);
      if (!ok) s.destroy();
      resolve(ok ? s : null);
    };
    const onConnect = () => done(true);
    const onError = () => done(false);
    const timer = setTimeout(() => done(false), timeoutMs);
    s.once("connect", onConnect);
    s.once("error", onError);
  });
}

/** A dialable address of `name` (the first the resolvers give), or why there is none. */
export async function dialableAddress(
  ctx: StreamContext,
  name: string,
): Promise<{ address: string } | { reason: RefusalReason }> {
  const r = await ctx.resolver.resolve(name);
  const address = r.addresses.find((x) => dialable(x, ctx.host()));
  if (address !== undefined) return { address };
  return { reason: r.addresses.length > 0 ? "blocked_address" : "unresolved" };
}

/** Dials `name` on `port` and splices it to `sock`, having sent `head` first; or refuses. */
async function dial(
  ctx: StreamContext,
  a: Assignment,
  sock: net.Socket,
  kind: "tls" | "http",
  name: string,
  head: Buffer,
  refuse: (host: string | null, reason: RefusalReason) => void,
): Promise<void> {
  const port = kind === "tls" ? 443 : 80;
  const r = await ctx.resolver.resolve(name);
  if (sock.destroyed || a.released) return reset(sock);
  const host = ctx.host();
  const targets = r.addresses.filter((x) => dialable(x, host)).slice(0, MAX_DIAL_ADDRESSES);
  if (targets.length === 0)
    return refuse(name, r.addresses.length > 0 ? "blocked_address" : "unresolved");
  const deadline = Date.now() + DIAL_BUDGET_MS;
  for (const t of targets) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    const up = await connectOnce(t, port, Math.min(CONNECT_TIMEOUT_MS, left));
    if (!up) continue;
    if (sock.destroyed || a.released) {
      up.destroy();
      return reset(sock);
    }
    a.conns.add(up);
    up.on("close", () => a.conns.delete(up));
    up.write(head);
    splice(sock, up);
    sock.resume();
    return;
  }
  refuse(name, "unreachable");
}

/** The decision on a TLS connection once its hello is read, null until then. */
function tlsVerdicts(a: Assignment, work: ReadWork): (chunk: Buffer) => Decision | null {
  const reader = new HelloReader(work);
  return (chunk) => {
    const peek = reader.push(chunk);
    return peek.kind === "more" ? null : decideTls(peek, a.allow);
  };
}

/** The decision on a plain-HTTP connection once its request head is read, null until then. */
function httpVerdicts(a: Assignment, work: ReadWork): (chunk: Buffer) => Decision | null {
  const reader = new HeadReader(work);
  return (chunk) => {
    const peek = reader.push(chunk);
    return peek.kind === "more" ? null : decideHttp(peek, a.allow);
  };
}

/** The handler of one listener: "tls" (redirected port 443) or "http" (port 80). */
export function streamHandler(
  ctx: StreamContext,
  kind: "tls" | "http",
): (sock: net.Socket) => void {
  const port = kind === "tls" ? 443 : 80;
  return (sock) => {
    const a = ctx.assignmentOf(sock.remoteAddress);
    if (!ctx.admission.take(a, sock, port)) return;
    sock.setNoDelay(true);
    // Everything received until the verdict, kept to send upstream; each byte is parsed once.
    const chunks: Buffer[] = [];
    const verdictOn = (kind === "tls" ? tlsVerdicts : httpVerdicts)(a, ctx.work);
    let decided = false;
    const refuse = (host: string | null, reason: RefusalReason) => {
      a.log.add(host, port, reason);
      if (sock.destroyed) return;
      if (reason === "protocol" || reason === "unreachable") return reset(sock);
      answerAndClose(sock, kind === "tls" ? TLS_ACCESS_DENIED : httpRefusal(host, reason));
    };
    const timer = setTimeout(() => {
      decided = true;
      sock.off("data", onData);
      refuse(null, "protocol");
    }, FIRST_BYTES_TIMEOUT_MS);
    timer.unref();
    const onData = (d: Buffer) => {
      chunks.push(d);
      ctx.work.received += d.length;
      const decision = verdictOn(d);
      if (decision === null) return;
      decided = true;
      clearTimeout(timer);
      sock.off("data", onData);
      sock.pause();
      if (!decision.allow) return refuse(decision.host, decision.reason);
      const head = Buffer.concat(chunks);
      // A call with brokered secrets: HTTPS to a bound name, and all its plain HTTP, go through
      // its broker (request by request); HTTPS to any other name stays end to end.
      const broker = a.broker;
      if (broker && (kind === "http" || broker.binds(decision.name))) {
        // A broker that cannot serve this connection (e.g. a leaf it cannot make) refuses it; it
        // never throws into the proxy, whose other sandboxes' connections would die with it.
        try {
          if (kind === "tls") broker.serveTls(sock, head, decision.name);
          else broker.serveHttp(sock, head, decision.name);
        } catch {
          refuse(decision.name, "unreachable");
        }
        return;
      }
      void dial(ctx, a, sock, kind, decision.name, head, refuse).catch(() =>
        refuse(decision.name, "unreachable"),
      );
    };
    sock.on("data", onData);
    sock.on("end", () => {
      if (decided) return;
      decided = true;
      clearTimeout(timer);
      refuse(null, "protocol");
    });
  };
}
