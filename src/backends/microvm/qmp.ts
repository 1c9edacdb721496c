/**
 * A minimal QMP client over QEMU's private unix socket: capabilities handshake, then one command
 * at a time. Replies are size-capped (QEMU is inside the jail; treat what it says as untrusted).
 */
import { connect, type Socket } from "node:net";

const MAX_LINE = 1024 * 1024;

export class Qmp {
  private buffer = "";
  private waiters: ((line: Record<string, unknown>) => void)[] = [];
  private failed: Error | null = null;

  private constructor(private readonly socket: Socket) {
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      this.buffer += chunk;
      if (this.buffer.length > MAX_LINE) return this.fail(new Error("qmp: oversized reply"));
      let nl;
      while ((nl = this.buffer.indexOf("\n")) >= 0) {
        const line = this.buffer.slice(0, nl).trim();
        this.buffer = this.buffer.slice(nl + 1);
        if (line === "") continue;
        let msg: unknown;
        try {
          msg = JSON.parse(line);
        } catch {
          return this.fail(new Error("qmp: malformed reply"));
        }
        if (typeof msg !== "object" || msg === null) continue;
        const m = msg as Record<string, unknown>;
        if ("event" in m) continue;
        this.waiters.shift()?.(m);
      }
    });
    socket.on("error", (e) => this.fail(e));
    socket.on("close", () => this.fail(new Error("qmp: connection closed")));
  }

  private fail(err: Error): void {
    if (!this.failed) this.failed = err;
    this.socket.destroy();
    for (const w of this.waiters.splice(0)) w({ error: { desc: err.message } });
  }

  static async open(path: string): Promise<Qmp> {
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = connect(path, () => resolve(s));
      s.once("error", reject);
    });
    return Qmp.over(socket);
  }

  /** Speaks QMP over an already connected socket. */
  static async over(socket: Socket): Promise<Qmp> {
    const qmp = new Qmp(socket);
    await qmp.next(); // greeting
    await qmp.execute("qmp_capabilities");
    return qmp;
  }

  private next(): Promise<Record<string, unknown>> {
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  async execute(command: string, args?: Record<string, unknown>): Promise<unknown> {
    const reply = this.next();
    this.socket.write(
      JSON.stringify(args ? { execute: command, arguments: args } : { execute: command }) + "\n",
    );
    const r = await reply;
    if ("error" in r) throw new Error(`qmp ${command}: ${JSON.stringify(r.error).slice(0, 300)}`);
    return r.return;
  }

  close(): void {
    this.socket.destroy();
  }
}
