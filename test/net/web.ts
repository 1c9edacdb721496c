/**
 * Web hosts for the egress allowlist tests, added to a built Topology (test internet in
 * namespaces; nothing in the root namespace): HTTP and HTTPS (a test certificate made with
 * openssl for the run) on
 *
 *   - 198.51.100.10 (pub):  allowed.test, a.wild.test, deep.b.wild.test
 *   - 203.0.113.10 (pub2):  refused.test, wild.test; also a second DNS server ("rogue") on
 *                           203.0.113.10:53 answering every name with its own address
 *   - 10.1.0.10 (p10):      inward.test (an allowed name that resolves into a blocked range)
 *
 * The topology's resolver (198.51.100.53) holds these names (DNS_TABLE). Each host logs every
 * connection it accepts and every request and DNS question (fixtures/web-server.ts).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { mustRun } from "../../src/net/commands.js";
import { PUBLIC, PUBLIC2, type Topology } from "./topology.js";

const SERVER = fileURLToPath(new URL("./fixtures/web-server.js", import.meta.url));

export const ALLOWED_IP = PUBLIC;
export const REFUSED_IP = PUBLIC2;
export const INWARD_IP = "10.1.0.10";
/** The rogue resolver: a DNS server the sandbox's resolv.conf does not name. */
export const ROGUE_DNS = PUBLIC2;
/** The allowlist the tests give their sandboxes. */
export const TEST_ALLOWLIST = "allowed.test, *.wild.test, inward.test, uplink.test";

export type WebHost = "allowed" | "refused" | "inward";

export interface WebHostsOptions {
  /**
   * Hosts that present a certificate of their own instead of the shared one (same names, another
   * self-signed key): a proxy told to trust the shared one (`certPath`) does not trust theirs.
   */
  untrusted?: WebHost[];
}

/**
 * A minimal ClientHello naming `name` (its bytes as given: any text, NUL bytes, UTF-8), as hex;
 * with `ech`, carrying an encrypted_client_hello extension too.
 */
export function clientHello(name: string | Buffer, opts: { ech?: boolean } = {}): string {
  const n = typeof name === "string" ? Buffer.from(name, "latin1") : name;
  const sniExt = Buffer.concat([
    Buffer.from([0, 0, 0, n.length + 5, 0, n.length + 3, 0, 0, n.length]),
    n,
  ]);
  const ech = opts.ech
    ? Buffer.concat([Buffer.from([0xfe, 0x0d, 0, 8]), Buffer.alloc(8, 1)])
    : Buffer.alloc(0);
  const exts = Buffer.concat([sniExt, ech]);
  const body = Buffer.concat([
    Buffer.from([3, 3]),
    Buffer.alloc(32, 9),
    Buffer.from([0, 0, 2, 0x13, 0x01, 1, 0, exts.length >> 8, exts.length & 0xff]),
    exts,
  ]);
  const hs = Buffer.concat([Buffer.from([1, 0, body.length >> 8, body.length & 0xff]), body]);
  return Buffer.concat([Buffer.from([22, 3, 1, hs.length >> 8, hs.length & 0xff]), hs]).toString(
    "hex",
  );
}

/** A ClientHello for `name` carrying an encrypted_client_hello extension, as hex. */
export function echHello(name: string): string {
  return clientHello(name, { ech: true });
}

export class WebHosts {
  private readonly children: ChildProcess[] = [];
  private readonly logs = new Map<WebHost, string>();
  private readonly dir = mkdtempSync(join(tmpdir(), "sr-web-"));
  /** The shared certificate (PEM file): self-signed, for every test name. */
  readonly certPath = join(this.dir, "cert.pem");

  constructor(
    private readonly topo: Topology,
    private readonly opts: WebHostsOptions = {},
  ) {}

  private async makeCert(cert: string, key: string): Promise<void> {
    await mustRun([
      "/usr/bin/openssl",
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-days",
      "2",
      "-subj",
      "/CN=allowed.test",
      "-addext",
      "subjectAltName=DNS:allowed.test,DNS:refused.test,DNS:*.wild.test,DNS:inward.test",
      "-keyout",
      key,
      "-out",
      cert,
    ]);
  }

  async start(): Promise<this> {
    const shared = { cert: this.certPath, key: join(this.dir, "key.pem"), gates: this.dir };
    await this.makeCert(shared.cert, shared.key);
    const own = {
      cert: join(this.dir, "own-cert.pem"),
      key: join(this.dir, "own-key.pem"),
      gates: this.dir,
    };
    if (this.opts.untrusted?.length) await this.makeCert(own.cert, own.key);
    const certOf = (h: WebHost) => (this.opts.untrusted?.includes(h) ? own : shared);
    await this.spawn("allowed", this.topo.hostNs("pub"), {
      ...certOf("allowed"),
      label: "allowed",
    });
    await this.spawn("refused", this.topo.hostNs("pub2"), {
      ...certOf("refused"),
      label: "refused",
      dns: {
        address: ROGUE_DNS,
        table: { "refused.test": REFUSED_IP, "allowed.test": REFUSED_IP, "rogue.test": REFUSED_IP },
      },
    });
    await this.spawn("inward", this.topo.hostNs("p10"), { ...certOf("inward"), label: "inward" });
    return this;
  }

  private spawn(name: WebHost, ns: string, config: object): Promise<void> {
    const child = spawn(
      "/usr/sbin/ip",
      ["netns", "exec", ns, process.execPath, SERVER, JSON.stringify(config)],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    this.children.push(child);
    this.logs.set(name, "");
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`web host ${name} not ready`)), 10_000);
      child.stdout?.on("data", (d: Buffer) => {
        this.logs.set(name, this.log(name) + d.toString("utf8"));
        if (this.log(name).includes("ready\n")) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.on("exit", () => {
        clearTimeout(timer);
        reject(new Error(`web host ${name} exited`));
      });
    });
  }

  /** Opens /gate/NAME on every host: the requests held there are answered, and later ones at once. */
  open(name: string): void {
    if (!/^[\w-]+$/.test(name)) throw new Error(`gate name ${name}`);
    writeFileSync(join(this.dir, `gate-${name}`), "");
  }

  log(name: WebHost): string {
    return this.logs.get(name) ?? "";
  }

  mark(): Map<WebHost, number> {
    return new Map([...this.logs].map(([k, v]) => [k, v.length]));
  }

  since(mark: Map<WebHost, number>, name: WebHost): string {
    return this.log(name).slice(mark.get(name) ?? 0);
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.children.map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            c.once("exit", () => resolve());
            c.kill("SIGTERM");
          }),
      ),
    );
    rmSync(this.dir, { recursive: true, force: true });
  }
}
