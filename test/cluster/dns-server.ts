/**
 * A tiny authoritative DNS server on loopback, standing in for the cluster DNS that serves a
 * headless Service: one name, one A record per ready worker, TTL 0. `set()` changes the records
 * (a worker pod becoming ready or not). Only A and AAAA questions are answered (AAAA: none).
 */
import { createSocket, type Socket } from "node:dgram";

export class TestDns {
  private records = new Map<string, string[]>();
  private constructor(
    private readonly socket: Socket,
    readonly port: number,
  ) {}

  static async start(): Promise<TestDns> {
    const socket = createSocket("udp4");
    await new Promise<void>((r) => socket.bind(0, "127.0.0.1", () => r()));
    const dns = new TestDns(socket, socket.address().port);
    socket.on("message", (msg, rinfo) => {
      const reply = dns.answer(msg);
      if (reply) socket.send(reply, rinfo.port, rinfo.address);
    });
    return dns;
  }

  get server(): string {
    return `127.0.0.1:${this.port}`;
  }

  set(name: string, addresses: string[]): void {
    this.records.set(name.toLowerCase(), [...addresses]);
  }

  private answer(msg: Buffer): Buffer | null {
    if (msg.length < 12) return null;
    let off = 12;
    const labels: string[] = [];
    while (off < msg.length && msg[off] !== 0) {
      const len = msg[off]!;
      labels.push(msg.subarray(off + 1, off + 1 + len).toString("ascii"));
      off += 1 + len;
    }
    off += 1;
    if (off + 4 > msg.length) return null;
    const qtype = msg.readUInt16BE(off);
    const question = msg.subarray(12, off + 4);
    const addrs = this.records.get(labels.join(".").toLowerCase());
    const answers = addrs && qtype === 1 ? addrs : [];
    const header = Buffer.alloc(12);
    header.writeUInt16BE(msg.readUInt16BE(0), 0);
    // QR, AA, RD copied; RCODE 3 (NXDOMAIN) for an unknown name.
    header.writeUInt16BE(0x8400 | (msg.readUInt16BE(2) & 0x0100) | (addrs ? 0 : 3), 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(answers.length, 6);
    const rrs = answers.map((ip) => {
      const rr = Buffer.alloc(16);
      rr.writeUInt16BE(0xc00c, 0);
      rr.writeUInt16BE(1, 2);
      rr.writeUInt16BE(1, 4);
      rr.writeUInt32BE(0, 6);
      rr.writeUInt16BE(4, 10);
      ip.split(".").forEach((b, i) => rr.writeUInt8(Number(b), 12 + i));
      return rr;
    });
    return Buffer.concat([header, question, ...rrs]);
  }

  close(): Promise<void> {
    return new Promise((r) => this.socket.close(() => r()));
  }
}
