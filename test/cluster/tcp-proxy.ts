/**
 * A TCP front door on loopback: each new connection goes to the next target that accepts it
 * (round robin), as kube-proxy spreads a Service's connections over its endpoints. Used for the
 * API Service (targets: the API replicas) and for Postgres's read-write Service (one target: the
 * primary, switched to the promoted standby). Bytes are piped unchanged; when either side
 * closes, so does the other.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export class TcpProxy {
  private next = 0;
  /**
   * Sticky by client address, as a Service with `sessionAffinity: ClientIP`: a client's later
   * connections go to the target its first one reached, while that target accepts.
   */
  sticky = false;
  private readonly stuck = new Map<string, number>();
  private readonly sockets = new Set<Socket>();
  private constructor(
    private readonly server: Server,
    readonly port: number,
    public targets: number[],
    private readonly targetHost: string,
  ) {}

  static async start(targets: number[], targetHost = "127.0.0.1"): Promise<TcpProxy> {
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    const port = (server.address() as { port: number }).port;
    const proxy = new TcpProxy(server, port, targets, targetHost);
    server.on("connection", (client) => proxy.accept(client));
    return proxy;
  }

  private track(s: Socket) {
    this.sockets.add(s);
    s.once("close", () => this.sockets.delete(s));
  }

  private accept(client: Socket): void {
    this.track(client);
    client.pause();
    const from = client.remoteAddress ?? "";
    let order = this.targets.map((_, i) => this.targets[(this.next + i) % this.targets.length]!);
    this.next++;
    const held = this.sticky ? this.stuck.get(from) : undefined;
    if (held !== undefined) order = [held, ...order.filter((p) => p !== held)];
    const tryNext = (i: number) => {
      const port = order[i];
      if (port === undefined || client.destroyed) return client.destroy();
      const upstream = connect(port, this.targetHost);
      this.track(upstream);
      let connected = false;
      upstream.once("error", () => {
        if (!connected) tryNext(i + 1);
        else client.destroy();
      });
      upstream.once("connect", () => {
        connected = true;
        if (this.sticky) this.stuck.set(from, port);
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
        client.once("error", () => upstream.destroy());
        client.once("close", () => upstream.destroy());
        upstream.once("close", () => client.destroy());
      });
    };
    tryNext(0);
  }

  /** Closes every connection it carries now (a Service whose endpoint went away). */
  dropAll(): void {
    for (const s of this.sockets) s.destroy();
  }

  async close(): Promise<void> {
    this.dropAll();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
