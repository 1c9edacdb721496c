/**
 * Brokered secrets in the egress proxy (docs/decisions/0015-brokered-secrets.md): for a sandbox
 * whose call brought secrets, HTTPS to a bound host is terminated here with a leaf of the call's
 * CA, and every plain-HTTP connection is read request by request; each request's head has its
 * bound placeholders replaced (substitute.ts) and goes on to the connection's own name (the SNI or
 * first Host the allowlist admitted) over a new connection, verified against the host's trust
 * store for HTTPS. A request whose Host is another name, or that still carries a placeholder, is
 * refused with a 403 and recorded. HTTPS to any other name is never terminated (streams.ts
 * splices it). Everything here is dropped when the sandbox's assignment is released.
 */
import { X509Certificate, createPrivateKey } from "node:crypto";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import { Duplex } from "node:stream";
import tls from "node:tls";
import { allowlistOf, isAllowed, normaliseHostname, type DomainAllowlist } from "../allowlist.js";
import type { BrokerSpec } from "./control.js";
import type { RefusalReason } from "./reasons.js";
import { checkBrokeredRequest, type BodyFraming } from "./request-rules.js";
import { scrubValue, substituteHead, type HeldSecret } from "./substitute.js";
import { LeafIssuer, publicKeyId } from "./x509.js";

/** What a broker needs from the proxy: where a name may be dialled, and the refusal record. */
export interface BrokerDeps {
  /** A dialable address of `name`, or why there is none. */
  address(name: string): Promise<{ address: string } | { reason: RefusalReason }>;
  refuse(host: string | null, port: number, reason: RefusalReason): void;
  /** The TLS context a bound host's certificate is verified with (the host's trust store). */
  upstream(): tls.SecureContext;
  /**
   * The names whose secrets the operator lets go over plain HTTP, in cleartext
   * (SCRATCHRUN_SECRETS_PLAIN_HTTP); everywhere else a value is written only inside TLS.
   */
  plainHttp: DomainAllowlist;
}

/**
 * Headers that describe one hop, not the request: never copied from one side to the other. A
 * request's framing (Content-Length) is not copied either: the broker writes its own.
 */
const HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
]);

/** The framing header the broker writes upstream for a body it forwards, and one connection. */
function framingHeaders(framing: BodyFraming): string[] {
  const close = ["Connection", "close"];
  if (framing.kind === "length") return ["Content-Length", String(framing.bytes), ...close];
  if (framing.kind === "chunked") return ["Transfer-Encoding", "chunked", ...close];
  return close;
}

/**
 * `raw`'s end-to-end headers. A header the sender names in Connection is hop-by-hop too, except
 * Host: the rules checked the one Host a request has, and that Host is what goes on.
 */
function endToEnd(raw: readonly string[]): string[] {
  const named = new Set<string>();
  for (let i = 0; i + 1 < raw.length; i += 2)
    if ((raw[i] as string).toLowerCase() === "connection")
      for (const t of (raw[i + 1] as string).split(",")) named.add(t.trim().toLowerCase());
  named.delete("host");
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const k = (raw[i] as string).toLowerCase();
    if (!HOP.has(k) && !named.has(k)) out.push(raw[i] as string, raw[i + 1] as string);
  }
  return out;
}

/** Whether an upstream TLS error is its certificate (not trusted, expired, another name). */
const untrusted = (e: NodeJS.ErrnoException) =>
  /CERT|SIGNATURE|SELF_SIGNED|ISSUER/.test(e.code ?? "");

/**
 * `sock` as a stream that first yields `head` (the bytes read to decide on it): TLS and the HTTP
 * parser then read the connection from its first byte.
 */
function replay(sock: net.Socket, head: Buffer): Duplex {
  const d = new Duplex({
    read() {
      sock.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      if (sock.destroyed) return cb();
      sock.write(chunk, () => cb());
    },
    final(cb) {
      sock.end();
      cb();
    },
    destroy(err, cb) {
      sock.destroy();
      cb(err);
    },
  });
  // Whatever fails on either side ends both; nothing here may throw into the proxy.
  d.on("error", () => sock.destroy());
  sock.on("error", () => d.destroy());
  d.push(head);
  sock.on("data", (c: Buffer) => {
    if (!d.push(c)) sock.pause();
  });
  sock.on("end", () => d.push(null));
  sock.on("close", () => d.destroy());
  return d;
}

interface Route {
  name: string;
  port: 80 | 443;
}

/** When the upstream connection of `up` is closed (or it never got one). */
function closed(up: http.ClientRequest): Promise<void> {
  return new Promise((done) => {
    up.once("socket", (s: net.Socket) => {
      if (s.destroyed) done();
      else s.once("close", () => done());
    });
    up.once("close", () => {
      if (!up.socket || up.socket.destroyed) done();
    });
  });
}

/**
 * Requests of one client connection waiting for their turn: each goes upstream only when the one
 * before it has been answered, so a connection holds one upstream connection at a time (the
 * bound admission.ts keeps counts one per accepted connection). Past this many waiting, the
 * connection is cut: pipelining thousands of requests must not open thousands of upstreams.
 */
const MAX_WAITING = 256;
/** Leaf contexts kept per call (a wildcard binding could name any number of hosts). */
const MAX_CONTEXTS = 64;

export class Broker {
  private readonly secrets: HeldSecret[];
  private readonly issuer: LeafIssuer;
  private readonly contexts = new Map<string, tls.SecureContext>();
  private readonly routes = new WeakMap<object, Route>();
  private readonly server: http.Server;
  private readonly upstreams = new Set<http.ClientRequest>();
  private readonly turns = new WeakMap<object, { tail: Promise<void>; waiting: number }>();
  private readonly open = new Set<Duplex | net.Socket>();

  constructor(
    spec: BrokerSpec,
    private readonly deps: BrokerDeps,
  ) {
    this.secrets = spec.secrets.map((s) => ({
      placeholder: s.placeholder,
      value: s.value,
      hosts: allowlistOf(s.hosts),
    }));
    const caKey = createPrivateKey(spec.caKeyPem);
    const ca = new X509Certificate(spec.caCertPem);
    const caName = /^CN=(.*)$/m.exec(ca.subject)?.[1] ?? "";
    this.issuer = new LeafIssuer(caKey, caName, publicKeyId(ca.publicKey));
    this.server = http.createServer({ requestTimeout: 0 }, (req, res) => this.inTurn(req, res));
    this.server.on("clientError", (_e, s) => s.destroy());
    // A tunnel through a bound connection would carry anything: refused and named.
    this.server.on("connect", (req: http.IncomingMessage, sock: Duplex) => {
      const route = this.routes.get(sock);
      if (route) this.deps.refuse(route.name, route.port, "protocol");
      sock.end("HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
      req.resume();
    });
  }

  /** Whether a secret is bound to `name` (HTTPS to it is terminated here). */
  binds(name: string): boolean {
    return this.secrets.some((s) => isAllowed(s.hosts, name));
  }

  /** Serves an HTTPS connection to bound host `name`, whose ClientHello is `head`. */
  serveTls(sock: net.Socket, head: Buffer, name: string): void {
    const t = new tls.TLSSocket(replay(sock, head), {
      isServer: true,
      secureContext: this.contextFor(name),
      ALPNProtocols: ["http/1.1"],
    });
    t.on("error", () => sock.destroy());
    this.accept(t, { name, port: 443 });
  }

  /** Serves a plain-HTTP connection whose first request (to allowed `name`) begins `head`. */
  serveHttp(sock: net.Socket, head: Buffer, name: string): void {
    this.accept(replay(sock, head), { name, port: 80 });
  }

  private accept(stream: Duplex, route: Route): void {
    this.routes.set(stream, route);
    this.open.add(stream);
    stream.once("close", () => this.open.delete(stream));
    this.server.emit("connection", stream);
  }

  private contextFor(name: string): tls.SecureContext {
    let c = this.contexts.get(name);
    if (!c) {
      if (this.contexts.size >= MAX_CONTEXTS) {
        const oldest = this.contexts.keys().next().value;
        if (oldest !== undefined) this.contexts.delete(oldest);
      }
      const leaf = this.issuer.leaf(name);
      c = tls.createSecureContext({
        cert: leaf.certPem,
        key: this.issuer.leafKeyPem,
        minVersion: "TLSv1.2",
      });
      this.contexts.set(name, c);
    }
    return c;
  }

  private refuse(
    res: http.ServerResponse,
    route: Route,
    host: string | null,
    reason: RefusalReason,
  ) {
    this.deps.refuse(host, route.port, reason);
    const status = reason === "untrusted_upstream" || reason === "unreachable" ? 502 : 403;
    const body = `ScratchRun egress: refused ${host ?? "(no host name)"} (${reason})\n`;
    // The reason phrase given: a failed writeHead may have left the upstream's (unwritable) one.
    res.writeHead(status, http.STATUS_CODES[status] ?? "", {
      "Content-Type": "text/plain; charset=utf-8",
      "Content-Length": Buffer.byteLength(body),
      Connection: "close",
      "X-ScratchRun-Egress": `refused; reason=${reason}`,
    });
    res.end(body);
  }

  /** Forwards `req` once every earlier request of its connection has been answered. */
  private inTurn(req: http.IncomingMessage, res: http.ServerResponse): void {
    const sock = req.socket;
    const turn = this.turns.get(sock) ?? { tail: Promise.resolve(), waiting: 0 };
    this.turns.set(sock, turn);
    if (turn.waiting >= MAX_WAITING) {
      const route = this.routes.get(sock);
      if (route) this.deps.refuse(route.name, route.port, "connection_limit");
      return void sock.destroy();
    }
    turn.waiting += 1;
    turn.tail = turn.tail.then(() => {
      turn.waiting -= 1;
      // The turn ends when the answer is done and the upstream connection, if one was made, is
      // closed: only then does the next request of this connection dial.
      let upstream: Promise<void> = Promise.resolve();
      const answered = new Promise<void>((done) => res.once("close", () => done()));
      // Nothing may throw into the proxy, whose other sandboxes' connections would die too.
      this.forward(req, res, (up) => (upstream = closed(up))).catch(() => res.destroy());
      return answered.then(() => upstream);
    });
  }

  private async forward(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    dialed: (up: http.ClientRequest) => void,
  ): Promise<void> {
    const route = this.routes.get(req.socket);
    if (!route) return void req.socket.destroy();
    const method = req.method ?? "GET";
    const target = req.url ?? "/";
    const rules = checkBrokeredRequest(route.name, method, target, req.rawHeaders);
    if (!rules.ok) {
      const named = req.headers.host ?? null;
      const host = named && normaliseHostname(/^(.*?)(:[0-9]*)?$/.exec(named)?.[1] ?? "");
      return this.refuse(res, route, host || named || route.name, rules.reason);
    }
    // Over plain HTTP a value would cross the network in cleartext: written only where the
    // operator said so; elsewhere its placeholder is refused like any other left in the head.
    const clear = route.port === 80 && !isAllowed(this.deps.plainHttp, route.name);
    const head = substituteHead(route.name, target, req.rawHeaders, this.secrets, !clear);
    if (!head.ok) {
      const overTls = clear && substituteHead(route.name, target, req.rawHeaders, this.secrets).ok;
      return this.refuse(
        res,
        route,
        route.name,
        overTls ? "secret_plain_http" : "secret_placeholder",
      );
    }
    const to = await this.deps.address(route.name);
    if ("reason" in to) return this.refuse(res, route, route.name, to.reason);
    const headers = endToEnd(head.headers);
    for (let i = headers.length - 2; i >= 0; i -= 2)
      if ((headers[i] as string).toLowerCase() === "content-length") headers.splice(i, 2);
    // One upstream connection per request, closed after it (agent: false): a request the bound
    // host reads differently can never reach into a later request's head on a shared socket.
    const options: https.RequestOptions = {
      host: to.address,
      port: route.port,
      method,
      path: head.target,
      headers: [
        ...headers,
        ...framingHeaders(rules.framing),
      ] as unknown as http.OutgoingHttpHeaders,
      agent: false,
      ...(route.port === 443
        ? { servername: route.name, secureContext: this.deps.upstream(), rejectUnauthorized: true }
        : {}),
    };
    const up = (route.port === 443 ? https : http).request(options, (answer) => {
      // A reflected credential field goes back as the placeholder the code sent.
      const headers = endToEnd(answer.rawHeaders).map((v, i) =>
        i % 2 === 1 ? scrubValue(v, this.secrets) : v,
      );
      try {
        res.writeHead(
          answer.statusCode ?? 502,
          answer.statusMessage ?? "",
          headers as unknown as http.OutgoingHttpHeaders,
        );
      } catch {
        // A status line Node will not write again (a code under 100, a control character in
        // the reason): no usable answer, as if none came.
        answer.destroy();
        return this.refuse(res, route, route.name, "unreachable");
      }
      answer.pipe(res);
      answer.on("error", () => res.destroy());
    });
    dialed(up);
    this.upstreams.add(up);
    up.once("close", () => this.upstreams.delete(up));
    up.on("error", (e: NodeJS.ErrnoException) => {
      if (res.headersSent) return void res.destroy();
      this.refuse(res, route, route.name, untrusted(e) ? "untrusted_upstream" : "unreachable");
    });
    res.on("close", () => {
      if (!res.writableFinished) up.destroy();
    });
    req.on("error", () => up.destroy());
    res.on("error", () => up.destroy());
    if (rules.framing.kind === "none") return void up.end();
    // The body exactly as framed: a length the sender does not keep to is an error, not a send.
    // (OutgoingMessage has it since Node 18.10; @types/node declares it on ServerResponse only.)
    (up as http.ClientRequest & { strictContentLength: boolean }).strictContentLength =
      rules.framing.kind === "length";
    req.pipe(up);
  }

  /** Forgets the CA key's uses: every connection cut, every upstream connection closed. */
  close(): void {
    for (const s of this.open) s.destroy();
    for (const up of this.upstreams) up.destroy();
    this.contexts.clear();
    this.server.close();
  }
}
