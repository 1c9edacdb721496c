/**
 * The DNS messages the egress proxy answers for allowlisted sandboxes (RFC 1035): a standard
 * query with one question in, an answer built from addresses the proxy resolved itself (or a
 * refusal) out. Pure. Nothing the sandbox sends is forwarded: the proxy asks its own resolvers
 * for names on the allowlist only, and only for A and AAAA.
 */

export const QTYPE = { A: 1, AAAA: 28 } as const;
export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 };

/** The largest UDP answer without EDNS (RFC 1035 4.2.1): longer ones are truncated (TC). */
export const UDP_ANSWER_BYTES = 512;

export interface DnsQuestion {
  id: number;
  /** The recursion-desired bit, echoed. */
  rd: boolean;
  /** The name as sent, labels joined with "." (latin1 text of the bytes; may hold anything). */
  name: string;
  qtype: number;
  qclass: number;
  /** The question section's bytes, echoed in the answer. */
  question: Uint8Array;
}

export type ParsedQuery =
  | { ok: true; q: DnsQuestion }
  /** id: null when not even a header could be read (then nothing is answered). */
  | { ok: false; id: number | null; rcode: number };

/** Parses a query; anything but one plain question (no compression) is refused. */
export function parseQuery(msg: Uint8Array): ParsedQuery {
  if (msg.length < 12) return { ok: false, id: null, rcode: RCODE.FORMERR };
  const b = Buffer.from(msg.buffer, msg.byteOffset, msg.byteLength);
  const id = b.readUInt16BE(0);
  const flags = b.readUInt16BE(2);
  if (flags & 0x8000) return { ok: false, id: null, rcode: RCODE.FORMERR }; // a response: ignore
  const opcode = (flags >> 11) & 0xf;
  if (opcode !== 0) return { ok: false, id, rcode: RCODE.NOTIMP };
  const [qd, an, ns] = [b.readUInt16BE(4), b.readUInt16BE(6), b.readUInt16BE(8)];
  if (qd !== 1 || an !== 0 || ns !== 0) return { ok: false, id, rcode: RCODE.FORMERR };
  const labels: string[] = [];
  let off = 12;
  let nameBytes = 0;
  for (;;) {
    if (off >= b.length) return { ok: false, id, rcode: RCODE.FORMERR };
    const len = b[off] as number;
    if (len === 0) break;
    if (len > 63) return { ok: false, id, rcode: RCODE.FORMERR }; // pointers and extended labels
    if (off + 1 + len > b.length) return { ok: false, id, rcode: RCODE.FORMERR };
    nameBytes += len + 1;
    if (nameBytes > 254) return { ok: false, id, rcode: RCODE.FORMERR };
    labels.push(b.subarray(off + 1, off + 1 + len).toString("latin1"));
    off += 1 + len;
  }
  if (off + 5 > b.length) return { ok: false, id, rcode: RCODE.FORMERR };
  const qtype = b.readUInt16BE(off + 1);
  const qclass = b.readUInt16BE(off + 3);
  return {
    ok: true,
    q: {
      id,
      rd: (flags & 0x0100) !== 0,
      // A label containing "." stays detectable: normaliseHostname refuses the joined text then.
      name: labels.some((l) => l.includes(".")) ? `${labels.join(".")}\0` : labels.join("."),
      qtype,
      qclass,
      question: new Uint8Array(b.subarray(12, off + 5)),
    },
  };
}

function header(id: number, rd: boolean, rcode: number, qd: number, an: number, tc = false) {
  const h = Buffer.alloc(12);
  h.writeUInt16BE(id, 0);
  h.writeUInt16BE(0x8000 | (tc ? 0x0200 : 0) | (rd ? 0x0100 : 0) | 0x0080 | (rcode & 0xf), 2);
  h.writeUInt16BE(qd, 4);
  h.writeUInt16BE(an, 6);
  return h;
}

/** An answer with no records: `rcode` (NXDOMAIN for a refused name, NOERROR for no data). */
export function emptyAnswer(q: DnsQuestion, rcode: number): Buffer {
  return Buffer.concat([header(q.id, q.rd, rcode, 1, 0), q.question]);
}

/** An error answer to a query that could not be parsed into a question (no question echoed). */
export function errorAnswer(id: number, rcode: number): Buffer {
  return header(id, false, rcode, 0, 0);
}

/**
 * The answer: one A or AAAA record per address (literal text of the question's family), TTL in
 * seconds; with `maxBytes`, records that would not fit are left out and TC set.
 */
export function addressAnswer(
  q: DnsQuestion,
  addresses: readonly Uint8Array[],
  ttl: number,
  maxBytes = Infinity,
): Buffer {
  const records: Buffer[] = [];
  let size = 12 + q.question.length;
  let truncated = false;
  for (const a of addresses) {
    const rr = Buffer.alloc(12 + a.length);
    rr.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
    rr.writeUInt16BE(a.length === 4 ? QTYPE.A : QTYPE.AAAA, 2);
    rr.writeUInt16BE(1, 4);
    rr.writeUInt32BE(Math.max(0, Math.min(ttl, 0x7fffffff)), 6);
    rr.writeUInt16BE(a.length, 10);
    Buffer.from(a).copy(rr, 12);
    if (size + rr.length > maxBytes) {
      truncated = true;
      break;
    }
    size += rr.length;
    records.push(rr);
  }
  return Buffer.concat([
    header(q.id, q.rd, RCODE.NOERROR, 1, records.length, truncated),
    q.question,
    ...records,
  ]);
}
