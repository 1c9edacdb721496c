/**
 * The egress proxy's DNS side: every DNS query an allowlisted sandbox sends, to whatever server,
 * is redirected here (UDP and TCP). A name on the sandbox's allowlist is resolved by the proxy's
 * own resolvers and answered with its dialable addresses (blocked ranges and the host's
 * neighbourhood left out); any other name is answered NXDOMAIN at once and recorded as refused.
 * Nothing the sandbox sends leaves the host, so DNS carries no data out (except, as any name
 * does, the allowed names themselves: a wildcard entry lets the code choose the labels under it).
 */
import type dgram from "node:dgram";
import type net from "node:net";
import { parseStrict } from "../addresses.js";
import type { Admission } from "./admission.js";
import { decideName, dialable, type HostBlock } from "./decide.js";
import {
  addressAnswer,
  emptyAnswer,
  errorAnswer,
  parseQuery,
  QTYPE,
  RCODE,
  UDP_ANSWER_BYTES,
} from "./dns-wire.js";
import type { Assignment } from "./assignments.js";
import type { NameResolver } from "./resolve.js";

export interface DnsContext {
  assignmentOf(addr: string | undefined): Assignment | undefined;
  admission: Admission;
  host(): HostBlock;
  resolver: NameResolver;
}

function bytesOf(addr: string): Uint8Array | null {
  const p = parseStrict(addr);
  if (!p) return null;
  const n = p.family === 4 ? 4 : 16;
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[n - 1 - i] = Number((p.value >> BigInt(8 * i)) & 0xffn);
  return out;
}

/** The answer to one query from a sandbox (null: nothing to answer). */
export async function answerQuery(
  ctx: DnsContext,
  a: Assignment,
  msg: Uint8Array,
  maxBytes: number,
): Promise<Buffer | null> {
  const parsed = parseQuery(msg);
  if (!parsed.ok) return parsed.id === null ? null : errorAnswer(parsed.id, parsed.rcode);
  const q = parsed.q;
  if (q.qclass !== 1) return emptyAnswer(q, RCODE.NOTIMP);
  const d = decideName(q.name, a.allow);
  if (!d.allow) {
    a.log.add(d.host, 53, d.reason);
    return emptyAnswer(q, RCODE.NXDOMAIN);
  }
  if (q.qtype !== QTYPE.A && q.qtype !== QTYPE.AAAA) return emptyAnswer(q, RCODE.NOERROR);
  const r = await ctx.resolver.resolve(d.name);
  if (r.failed) return emptyAnswer(q, RCODE.SERVFAIL);
  if (r.nxdomain) return emptyAnswer(q, RCODE.NXDOMAIN);
  const v6 = q.qtype === QTYPE.AAAA;
  const family = r.addresses.filter((x) => x.includes(":") === v6);
  const host = ctx.host();
  const usable = family.filter((x) => dialable(x, host));
  // The name is allowed but points only inward: refused like a connection would be.
  if (family.length > 0 && usable.length === 0) a.log.add(d.name, 53, "blocked_address");
  const bytes = usable.map(bytesOf).filter((b): b is Uint8Array => b !== null);
  return addressAnswer(q, bytes, r.ttl, maxBytes);
}

export function serveUdp(ctx: DnsContext, sock: dgram.Socket): void {
  sock.on("message", (msg, rinfo) => {
    const a = ctx.assignmentOf(rinfo.address);
    if (!a || a.released) return;
    void answerQuery(ctx, a, msg, UDP_ANSWER_BYTES)
      .then((reply) => {
        if (reply) sock.send(reply, rinfo.port, rinfo.address);
      })
      .catch(() => undefined);
  });
  sock.on("error", () => undefined);
}

/** A TCP connection with nothing in flight is closed after this long. */
const TCP_IDLE_MS = 10_000;
/** Once a message's first byte came, the rest must come within this long (no trickling). */
const TCP_MESSAGE_MS = 5000;

/**
 * Queries over TCP: 2-byte length prefixes, in order, several per connection. Each connection
 * counts against its sandbox's bound and the proxy's (admission.ts), as HTTP(S) ones do. The
 * bytes of a message are kept as they come and joined once it is whole: a message trickled one
 * byte at a time costs its length, and must be whole within TCP_MESSAGE_MS.
 */
export function tcpHandler(ctx: DnsContext): (sock: net.Socket) => void {
  return (sock) => {
    const a = ctx.assignmentOf(sock.remoteAddress);
    if (!ctx.admission.take(a, sock, 53)) return;
    sock.setTimeout(TCP_IDLE_MS, () => sock.destroy());
    let chunks: Buffer[] = [];
    let have = 0;
    let partial: NodeJS.Timeout | null = null;
    let chain = Promise.resolve();
    sock.on("close", () => {
      if (partial) clearTimeout(partial);
    });
    sock.on("data", (d: Buffer) => {
      chunks.push(d);
      have += d.length;
      let whole = false;
      while (have >= 2) {
        if ((chunks[0] as Buffer).length < 2) chunks = [Buffer.concat(chunks, have)];
        const size = 2 + (chunks[0] as Buffer).readUInt16BE(0);
        if (have < size) break;
        const all = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, have);
        const msg = all.subarray(2, size);
        const rest = all.subarray(size);
        chunks = rest.length > 0 ? [rest] : [];
        have = rest.length;
        whole = true;
        chain = chain.then(async () => {
          const reply = await answerQuery(ctx, a, msg, 65535).catch(() => null);
          if (!reply || sock.destroyed) return;
          const len = Buffer.alloc(2);
          len.writeUInt16BE(reply.length);
          sock.write(Buffer.concat([len, reply]));
        });
      }
      // The clock runs from the first byte of the message now incomplete.
      if (whole && partial) {
        clearTimeout(partial);
        partial = null;
      }
      if (have > 0 && !partial) {
        partial = setTimeout(() => {
          a.log.add(null, 53, "protocol");
          sock.resetAndDestroy();
        }, TCP_MESSAGE_MS);
        partial.unref();
      }
    });
  };
}
