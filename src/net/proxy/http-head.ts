/**
 * The head of a plain-HTTP request, read to learn which host it is for. Pure and incremental:
 * call it with everything received so far.
 *
 * Strict on purpose (a proxy that reads a request differently from the server it forwards to can
 * be steered): CRLF line ends only (a bare CR or LF is refused), no obsolete line folding, no
 * space before a header's colon, exactly one Host header, and an absolute-form target must name
 * the same host as Host. HTTP/2 prior knowledge and CONNECT are refused: the first has no Host
 * line to read, the second asks the proxy to tunnel somewhere else.
 */

import type { ReadWork } from "./client-hello.js";

/** Largest request head accepted (request line and headers). */
export const MAX_HEAD_BYTES = 16 * 1024;

export type HeadPeek =
  | { kind: "more" }
  /** host: the Host header's host part as sent (port removed), for normaliseHostname. */
  | { kind: "request"; host: string }
  | {
      kind: "refuse";
      reason: "not_http" | "malformed" | "oversized" | "no_name" | "host_mismatch";
      /** The host named, when one was (for the report). */
      host?: string;
    };

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const REQUEST_LINE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP\/1\.[01]$/;

/** "host[:port]" → host (brackets kept for an IPv6 literal), or null when malformed. */
function hostOf(authority: string): string | null {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[^:@[\]/?#\s]+)(?::([0-9]{0,5}))?$/.exec(authority);
  return m?.[1] ?? null;
}

/** What can never become a request line, refused early so a non-HTTP client is not kept waiting. */
function earlyRefusal(buf: Buffer): HeadPeek | null {
  if (buf.length >= 3 && buf.subarray(0, 3).toString("latin1") === "PRI")
    return { kind: "refuse", reason: "not_http" };
  const first = buf.subarray(0, Math.min(buf.length, 16)).toString("latin1");
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]*( |$)/.test(first))
    return { kind: "refuse", reason: "not_http" };
  return null;
}

/** What the request head in `data` (everything the client sent so far) asks for. */
export function peekHttpHead(data: Uint8Array): HeadPeek {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const end = buf.indexOf("\r\n\r\n", 0, "latin1");
  if (end === -1) {
    if (buf.length > MAX_HEAD_BYTES) return { kind: "refuse", reason: "oversized" };
    return earlyRefusal(buf) ?? { kind: "more" };
  }
  return parseHead(buf, end);
}

/**
 * peekHttpHead, incrementally: push() each chunk as it arrives. The first MAX_HEAD_BYTES + 4
 * bytes are kept (copied once), the end of the head is searched for in the new bytes only, and
 * the head is parsed once, when whole; the verdict after each push is the one peekHttpHead gives
 * for everything pushed so far (test/net/proxy-parsers.unit.test.ts, at every split).
 */
export class HeadReader {
  private readonly buf = Buffer.alloc(MAX_HEAD_BYTES + 4);
  private kept = 0;
  private total = 0;
  private verdict: HeadPeek | null = null;

  /** `work.examined` counts the bytes searched and parsed (as HelloReader's does). */
  constructor(private readonly work: ReadWork = { examined: 0 }) {}

  push(chunk: Uint8Array): HeadPeek {
    if (this.verdict) return this.verdict;
    const before = this.kept;
    const n = Math.min(chunk.length, this.buf.length - this.kept);
    this.buf.set(chunk.subarray(0, n), this.kept);
    this.kept += n;
    this.total += chunk.length;
    const seen = this.buf.subarray(0, this.kept);
    const from = Math.max(0, before - 3);
    this.work.examined += this.kept - from;
    const end = seen.indexOf("\r\n\r\n", from, "latin1");
    if (end === -1) {
      if (this.total > MAX_HEAD_BYTES) return this.decide({ kind: "refuse", reason: "oversized" });
      // Only the first 16 bytes decide it, and a verdict of "more" on them stays "more".
      if (before >= 16) return { kind: "more" };
      this.work.examined += Math.min(this.kept, 16);
      const early = earlyRefusal(seen);
      return early ? this.decide(early) : { kind: "more" };
    }
    this.work.examined += end;
    return this.decide(parseHead(seen, end));
  }

  private decide(v: HeadPeek): HeadPeek {
    this.verdict = v;
    return v;
  }
}

/** The verdict on a head that ends (its blank line) at `end`. */
function parseHead(buf: Buffer, end: number): HeadPeek {
  if (end + 4 > MAX_HEAD_BYTES) return { kind: "refuse", reason: "oversized" };
  const head = buf.subarray(0, end).toString("latin1");
  const lines = head.split("\r\n");
  if (lines.some((l) => l.includes("\r") || l.includes("\n") || l.includes("\0")))
    return { kind: "refuse", reason: "malformed" };
  const m = REQUEST_LINE.exec(lines[0] ?? "");
  if (!m) return { kind: "refuse", reason: "not_http" };
  const [, method, target] = m as unknown as [string, string, string];
  if (method === "CONNECT") return { kind: "refuse", reason: "not_http" };
  const hosts: string[] = [];
  for (const line of lines.slice(1)) {
    if (line.startsWith(" ") || line.startsWith("\t"))
      return { kind: "refuse", reason: "malformed" };
    const colon = line.indexOf(":");
    if (colon <= 0 || !TOKEN.test(line.slice(0, colon)))
      return { kind: "refuse", reason: "malformed" };
    if (line.slice(0, colon).toLowerCase() === "host") hosts.push(line.slice(colon + 1).trim());
  }
  if (hosts.length === 0) return { kind: "refuse", reason: "no_name" };
  if (hosts.length > 1) return { kind: "refuse", reason: "host_mismatch" };
  const host = hostOf(hosts[0] as string);
  if (host === null) return { kind: "refuse", reason: "malformed" };
  if (host === "") return { kind: "refuse", reason: "no_name" };
  // Absolute form ("GET http://h/ HTTP/1.1"): a server takes h over Host, so both must agree.
  const abs = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)/.exec(target);
  if (abs) {
    const targetHost = hostOf(abs[2] ?? "");
    if (targetHost === null || targetHost.toLowerCase() !== host.toLowerCase())
      return { kind: "refuse", reason: "host_mismatch", host };
  } else if (!target.startsWith("/") && target !== "*") {
    return { kind: "refuse", reason: "malformed", host };
  }
  return { kind: "request", host };
}
