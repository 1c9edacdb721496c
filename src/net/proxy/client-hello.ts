/**
 * The first bytes of a TLS connection, read without terminating TLS: the ClientHello's server
 * name (SNI) and whether it carries Encrypted Client Hello. Pure and incremental: call it with
 * everything received so far; it says "need more", gives the answer, or refuses.
 *
 * Strict on purpose (a proxy that reads a hello differently from the server it forwards to can
 * be steered): TLS handshake records only, reassembled across any number of records; one
 * ClientHello (RFC 8446 4.1.2 layout) whose lengths are all consistent; no duplicate extension;
 * at most one host_name, which must be the only entry of the server_name list. Anything else is
 * refused, and so is a hello larger than MAX_HELLO_BYTES.
 */

/** Largest ClientHello accepted (real ones are 0.5–3 KiB; post-quantum key shares included). */
export const MAX_HELLO_BYTES = 32 * 1024;
/** Bytes read before giving up: the hello plus the 5-byte headers of the records carrying it. */
export const MAX_PEEK_BYTES = 64 * 1024;

const RECORD_HANDSHAKE = 22;
const HANDSHAKE_CLIENT_HELLO = 1;
const MAX_RECORD = 16384;
const EXT_SERVER_NAME = 0x0000;
/** encrypted_client_hello (RFC 9849) and the draft ESNI extension. */
const EXT_ECH = 0xfe0d;
const EXT_ESNI = 0xffce;

export type HelloPeek =
  | { kind: "more" }
  | {
      kind: "hello";
      /** The host_name entry as sent (latin1 text of its bytes), or null without one. */
      serverName: string | null;
      /** The hello carries an encrypted_client_hello (or ESNI) extension. */
      ech: boolean;
    }
  | { kind: "refuse"; reason: "not_tls" | "malformed" | "oversized" };

/** A reader over a byte range that fails (returns null) instead of running past its end. */
class Reader {
  constructor(
    private readonly b: Uint8Array,
    private pos: number,
    private readonly end: number,
  ) {}
  get left(): number {
    return this.end - this.pos;
  }
  u8(): number | null {
    return this.pos + 1 <= this.end ? (this.b[this.pos++] as number) : null;
  }
  u16(): number | null {
    if (this.pos + 2 > this.end) return null;
    const v = ((this.b[this.pos] as number) << 8) | (this.b[this.pos + 1] as number);
    this.pos += 2;
    return v;
  }
  /** A sub-reader over the next n bytes, or null past the end. */
  take(n: number): Reader | null {
    if (n < 0 || this.pos + n > this.end) return null;
    const r = new Reader(this.b, this.pos, this.pos + n);
    this.pos += n;
    return r;
  }
  /** A vector with a u8/u16 length prefix. */
  vec(lenBytes: 1 | 2): Reader | null {
    const n = lenBytes === 1 ? this.u8() : this.u16();
    return n === null ? null : this.take(n);
  }
  bytes(): Uint8Array {
    return this.b.subarray(this.pos, this.end);
  }
}

/**
 * The handshake bytes carried by the records in `data`, reassembled, up to the first record that
 * is not a handshake record (`ended`: 0-RTT data or a compatibility change_cipher_spec after the
 * hello), or a refusal.
 */
function handshakeBytes(
  data: Uint8Array,
): { bytes: Uint8Array; ended: boolean } | { refuse: "not_tls" | "malformed" } {
  if (data.length >= 1 && data[0] !== RECORD_HANDSHAKE) return { refuse: "not_tls" };
  if (data.length >= 2 && data[1] !== 3) return { refuse: "not_tls" };
  const parts: Uint8Array[] = [];
  let pos = 0;
  let ended = false;
  while (pos + 5 <= data.length) {
    const type = data[pos] as number;
    const len = ((data[pos + 3] as number) << 8) | (data[pos + 4] as number);
    if (type !== RECORD_HANDSHAKE) {
      ended = true;
      break;
    }
    if (data[pos + 1] !== 3 || len === 0 || len > MAX_RECORD) return { refuse: "malformed" };
    parts.push(data.subarray(pos + 5, Math.min(pos + 5 + len, data.length)));
    pos += 5 + len;
  }
  const total = parts.reduce((n, p) => n + p.length, 0);
  const bytes = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    bytes.set(p, off);
    off += p.length;
  }
  return { bytes, ended };
}

/** Parses a complete ClientHello body (after the 4-byte handshake header). */
function parseHello(body: Reader): HelloPeek {
  const malformed: HelloPeek = { kind: "refuse", reason: "malformed" };
  if (body.u16() === null || body.take(32) === null) return malformed; // version, random
  const session = body.vec(1);
  if (!session || session.left > 32) return malformed;
  const suites = body.vec(2);
  if (!suites || suites.left < 2 || suites.left % 2 !== 0) return malformed;
  const compression = body.vec(1);
  if (!compression || compression.left < 1) return malformed;
  if (body.left === 0) return { kind: "hello", serverName: null, ech: false };
  const exts = body.vec(2);
  if (!exts || body.left !== 0) return malformed;
  const seen = new Set<number>();
  let serverName: string | null = null;
  let ech = false;
  while (exts.left > 0) {
    const type = exts.u16();
    const data = type === null ? null : exts.vec(2);
    if (type === null || data === null) return malformed;
    if (seen.has(type)) return malformed;
    seen.add(type);
    if (type === EXT_ECH || type === EXT_ESNI) ech = true;
    if (type !== EXT_SERVER_NAME) continue;
    const list = data.vec(2);
    if (!list || data.left !== 0 || list.left === 0) return malformed;
    const nameType = list.u8();
    const name = list.vec(2);
    // One entry, a host_name (type 0), non-empty; nothing after it.
    if (nameType !== 0 || !name || name.left === 0 || list.left !== 0) return malformed;
    serverName = Buffer.from(name.bytes()).toString("latin1");
  }
  return { kind: "hello", serverName, ech };
}

/** What the ClientHello in `data` (everything the client sent so far) asks for. */
export function peekClientHello(data: Uint8Array): HelloPeek {
  if (data.length > MAX_PEEK_BYTES) return { kind: "refuse", reason: "oversized" };
  const hs = handshakeBytes(data);
  if ("refuse" in hs) return { kind: "refuse", reason: hs.refuse };
  const b = hs.bytes;
  if (b.length >= 1 && b[0] !== HANDSHAKE_CLIENT_HELLO)
    return { kind: "refuse", reason: "malformed" };
  const more: HelloPeek = hs.ended ? { kind: "refuse", reason: "malformed" } : { kind: "more" };
  if (b.length < 4) return more;
  const len = ((b[1] as number) << 16) | ((b[2] as number) << 8) | (b[3] as number);
  if (len > MAX_HELLO_BYTES) return { kind: "refuse", reason: "oversized" };
  if (b.length < 4 + len) return more;
  // Bytes past the hello in the same flight (a second handshake message) are not TLS 1.x.
  if (b.length > 4 + len) return { kind: "refuse", reason: "malformed" };
  return parseHello(new Reader(b, 4, 4 + len));
}

/** What first-bytes readers have walked: each byte they look at adds one, every time. */
export interface ReadWork {
  examined: number;
}

/**
 * peekClientHello, incrementally: push() each chunk as it arrives. Every byte is looked at once
 * (record headers as they complete, handshake bytes copied once into place) and the hello is
 * parsed once, when whole, so a hello sent one byte per record costs what its length costs:
 * `work.examined` counts those looks (the proxy sums them over connections, and
 * SEC-PROXY-TRICKLE bounds them by the bytes received). The verdict after each push is the one
 * peekClientHello gives for everything pushed so far (test/net/proxy-parsers.unit.test.ts checks
 * this at every split); once not "more", it stays.
 */
export class HelloReader {
  private total = 0;
  private readonly first: number[] = [];
  private readonly header = new Uint8Array(5);
  private headerLen = 0;
  private payloadLeft = 0;
  /** A record that is not a handshake record came: nothing after it is read. */
  private ended = false;
  private bad = false;
  private hs = new Uint8Array(1024);
  private hsLen = 0;
  private verdict: HelloPeek | null = null;

  constructor(private readonly work: ReadWork = { examined: 0 }) {}

  push(chunk: Uint8Array): HelloPeek {
    if (this.verdict) return this.verdict;
    this.total += chunk.length;
    if (this.total > MAX_PEEK_BYTES) return this.decide({ kind: "refuse", reason: "oversized" });
    for (let i = 0; i < chunk.length && this.first.length < 2; i++)
      this.first.push(chunk[i] as number);
    if (this.first[0] !== undefined && this.first[0] !== RECORD_HANDSHAKE)
      return this.decide({ kind: "refuse", reason: "not_tls" });
    if (this.first[1] !== undefined && this.first[1] !== 3)
      return this.decide({ kind: "refuse", reason: "not_tls" });
    this.read(chunk);
    if (this.bad) return this.decide({ kind: "refuse", reason: "malformed" });
    const b = this.hs;
    if (this.hsLen >= 1 && b[0] !== HANDSHAKE_CLIENT_HELLO)
      return this.decide({ kind: "refuse", reason: "malformed" });
    const more = (): HelloPeek =>
      this.ended ? this.decide({ kind: "refuse", reason: "malformed" }) : { kind: "more" };
    if (this.hsLen < 4) return more();
    const len = ((b[1] as number) << 16) | ((b[2] as number) << 8) | (b[3] as number);
    if (len > MAX_HELLO_BYTES) return this.decide({ kind: "refuse", reason: "oversized" });
    if (this.hsLen < 4 + len) return more();
    if (this.hsLen > 4 + len) return this.decide({ kind: "refuse", reason: "malformed" });
    this.work.examined += len;
    return this.decide(parseHello(new Reader(b, 4, 4 + len)));
  }

  private decide(v: HelloPeek): HelloPeek {
    this.verdict = v;
    return v;
  }

  /** Walks the new bytes: record headers, and the handshake bytes they carry appended. */
  private read(chunk: Uint8Array): void {
    let i = 0;
    while (i < chunk.length && !this.ended && !this.bad) {
      if (this.payloadLeft === 0) {
        this.header[this.headerLen++] = chunk[i++] as number;
        if (this.headerLen < 5) continue;
        this.headerLen = 0;
        const h = this.header;
        const len = ((h[3] as number) << 8) | (h[4] as number);
        if (h[0] !== RECORD_HANDSHAKE) this.ended = true;
        else if (h[1] !== 3 || len === 0 || len > MAX_RECORD) this.bad = true;
        else this.payloadLeft = len;
        continue;
      }
      const n = Math.min(this.payloadLeft, chunk.length - i);
      this.append(chunk.subarray(i, i + n));
      i += n;
      this.payloadLeft -= n;
    }
    this.work.examined += i;
  }

  private append(bytes: Uint8Array): void {
    if (this.hsLen + bytes.length > this.hs.length) {
      const grown = new Uint8Array(Math.max(this.hs.length * 2, this.hsLen + bytes.length));
      grown.set(this.hs.subarray(0, this.hsLen));
      this.hs = grown;
    }
    this.hs.set(bytes, this.hsLen);
    this.hsLen += bytes.length;
  }
}
