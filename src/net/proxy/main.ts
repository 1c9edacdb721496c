/**
 * The egress proxy: a child process of the server, started in the uplink network namespace
 * (src/net/proxy/supervisor.ts). It listens for the connections and DNS queries the allowlisted
 * sandboxes' nftables rules redirect to it, drops to its own unprivileged uid (whose outgoing
 * traffic the kernel restricts: nftables-proxy.ts), then serves until its stdin closes.
 *
 * argv[2]: ProxyChildConfig as JSON. Requests on stdin, replies on stdout (control.ts).
 */
import dgram from "node:dgram";
import net from "node:net";
import tls from "node:tls";
import { createInterface } from "node:readline";
import { existsSync, readFileSync } from "node:fs";
import { allowlistOf } from "../allowlist.js";
import { Admission, totalConnectionBound } from "./admission.js";
import { Assignments } from "./assignments.js";
import { Broker } from "./broker.js";
import type { ProxyChildConfig, ProxyReply, ProxyRequest } from "./control.js";
import type { HostBlock } from "./decide.js";
import { serveUdp, tcpHandler } from "./dns-server.js";
import { NameResolver } from "./resolve.js";
import { dialableAddress, streamHandler } from "./streams.js";

const config = JSON.parse(process.argv[2] ?? "{}") as ProxyChildConfig;
const assignments = new Assignments();
let hostBlock: HostBlock = { addresses: [], networks: [] };

/** This process's soft file limit (the supervisor starts it under its own, PROXY_MAX_FILES). */
function fileLimit(): number {
  const line = /^Max open files\s+(\d+)/m.exec(readFileSync("/proc/self/limits", "utf8"));
  if (!line?.[1]) throw new Error("cannot read the file limit from /proc/self/limits");
  return Number(line[1]);
}

/** The host's trust store, and the operator's extra CA file: read before privileges drop. */
const SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";
function trustStore(): string[] {
  const pems = existsSync(SYSTEM_BUNDLE) ? [readFileSync(SYSTEM_BUNDLE, "utf8")] : [];
  if (config.upstreamCaFile) pems.push(readFileSync(config.upstreamCaFile, "utf8"));
  return pems;
}

const ctx = {
  trust: trustStore(),
  assignmentOf: (addr: string | undefined) => assignments.get(addr),
  admission: new Admission(totalConnectionBound(fileLimit())),
  host: () => hostBlock,
  resolver: new NameResolver(config.resolvers),
  work: { received: 0, examined: 0 },
};

/** Where a brokered secret may go in cleartext (plain HTTP): only where the operator said. */
const secretsPlainHttp = allowlistOf(config.secretsPlainHttp ?? []);

/** The context brokers verify bound hosts with: made once (parsing the roots costs ~10 ms). */
let upstreamContext: tls.SecureContext | null = null;
const upstream = () => (upstreamContext ??= tls.createSecureContext({ ca: ctx.trust }));

function send(reply: ProxyReply): void {
  process.stdout.write(JSON.stringify(reply) + "\n");
}

/** Dual-stack where the namespace has IPv6, else IPv4 only. */
async function listenTcp(server: net.Server, port: number): Promise<number> {
  const attempt = (host: string) =>
    new Promise<number>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host, port, ipv6Only: false, backlog: 1024 }, () => {
        server.off("error", reject);
        // A failed accept (EMFILE, should the bounds ever be passed) is that connection's
        // failure, not the proxy's: unhandled, it would end every sandbox's connections.
        server.on("error", () => undefined);
        resolve((server.address() as net.AddressInfo).port);
      });
    });
  try {
    return await attempt("::");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EAFNOSUPPORT") throw e;
    return attempt("0.0.0.0");
  }
}

async function bindUdp(port: number): Promise<dgram.Socket> {
  const attempt = (type: "udp6" | "udp4") =>
    new Promise<dgram.Socket>((resolve, reject) => {
      const s = dgram.createSocket({ type, ipv6Only: false });
      s.once("error", (e) => {
        s.close();
        reject(e);
      });
      s.bind(port, type === "udp6" ? "::" : "0.0.0.0", () => resolve(s));
    });
  try {
    return await attempt("udp6");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EAFNOSUPPORT") throw e;
    return attempt("udp4");
  }
}

/** DNS on one port number for UDP and TCP: a free UDP port, then TCP on the same number. */
async function listenDns(wanted: number): Promise<number> {
  for (let i = 0; i < 20; i++) {
    const udp = await bindUdp(wanted);
    const port = udp.address().port;
    const tcp = net.createServer(tcpHandler(ctx));
    try {
      await listenTcp(tcp, port);
      serveUdp(ctx, udp);
      return port;
    } catch (e) {
      udp.close();
      if (wanted !== 0 || (e as NodeJS.ErrnoException).code !== "EADDRINUSE") throw e;
    }
  }
  throw new Error("no port free for DNS on both UDP and TCP");
}

function handle(req: ProxyRequest): ProxyReply {
  switch (req.op) {
    case "assign": {
      const spec = req.broker;
      assignments.assign(
        req.addrs,
        req.allow,
        spec &&
          ((a) =>
            new Broker(spec, {
              upstream,
              plainHttp: secretsPlainHttp,
              address: (name) => dialableAddress(ctx, name),
              refuse: (host, port, reason) => a.log.add(host, port, reason),
            })),
      );
      return { seq: req.seq, ok: true };
    }
    case "release":
      assignments.release(req.addrs);
      return { seq: req.seq, ok: true };
    case "collect": {
      const a = assignments.get(req.addrs[0]);
      return {
        seq: req.seq,
        ok: true,
        refused: a?.log.entries() ?? [],
        dropped: a?.log.dropped ?? 0,
      };
    }
    case "host":
      hostBlock = { addresses: req.addresses, networks: req.networks };
      return { seq: req.seq, ok: true };
    case "work":
      return { seq: req.seq, ok: true, work: { ...ctx.work } };
  }
}

async function main(): Promise<void> {
  const opts = { allowHalfOpen: true, noDelay: true };
  const tls = net.createServer(opts, streamHandler(ctx, "tls"));
  const http = net.createServer(opts, streamHandler(ctx, "http"));
  const ports = {
    tls: await listenTcp(tls, config.ports?.tls ?? 0),
    http: await listenTcp(http, config.ports?.http ?? 0),
    dns: await listenDns(config.ports?.dns ?? 0),
  };
  // Everything is bound and loaded: from here on the proxy holds no privilege at all.
  const { setgroups, setgid, setuid } = process;
  if (!setgroups || !setgid || !setuid) throw new Error("no setuid on this platform");
  setgroups.call(process, []);
  setgid.call(process, config.gid);
  setuid.call(process, config.uid);
  if (process.getuid?.() !== config.uid || process.getgid?.() !== config.gid)
    throw new Error("could not drop privileges");
  const rl = createInterface({ input: process.stdin });
  rl.on("line", (line) => {
    let req: ProxyRequest;
    try {
      req = JSON.parse(line) as ProxyRequest;
    } catch {
      return;
    }
    try {
      send(handle(req));
    } catch (e) {
      send({ seq: req.seq, ok: false, error: String(e) });
    }
  });
  // The server is gone (or closed us): so are we.
  rl.on("close", () => process.exit(0));
  send({ ready: ports });
}

main().catch((e: unknown) => {
  process.stderr.write(`scratchrun egress proxy: ${String(e)}\n`);
  process.exit(1);
});
