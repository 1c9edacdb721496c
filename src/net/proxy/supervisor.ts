/**
 * The server's side of the egress proxy (docs/decisions/0010-egress-allowlist.md): starts the
 * proxy child in the uplink namespace, loads the server-wide guard table once it listens (its
 * ports reachable from sandbox links only; its uid may dial nothing but TCP 80/443 of dialable
 * destinations and its resolvers), keeps the child's view of the host's neighbourhood and the
 * guard's host sets current (the host watch), and tells the child which sandbox address has which
 * allowlist. A child that dies is started again on the same ports and told everything again;
 * meanwhile redirected connections find no listener and are reset (fail closed).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { SANDBOX_UID_BASE, SANDBOX_UID_COUNT } from "../../jail/uids.js";
import { BLOCKED_CIDRS } from "../addresses.js";
import type { DomainAllowlist } from "../allowlist.js";
import { inNetns, mustRun } from "../commands.js";
import { hostWatch, readHostBlockSet, type HostWatch } from "../host-watch.js";
import type { HostBlockSet } from "../host-block.js";
import { renderHostSetUpdate } from "../nftables.js";
import { renderProxyTable, renderProxyTableTeardown, type ProxyPorts } from "../nftables-proxy.js";
import type { UplinkConfig } from "../uplink.js";
import { PROXY_MAX_FILES } from "./admission.js";
import type {
  BrokerSpec,
  FirstBytesWork,
  ProxyChildConfig,
  ProxyReply,
  ProxyRequest,
} from "./control.js";
import type { Refusal } from "./decide.js";

/** Host uids of egress proxies: the last 64 of the block the service's orphan reaping covers. */
export const PROXY_UID_BASE = SANDBOX_UID_BASE + 2 * SANDBOX_UID_COUNT - 64;
export const PROXY_UID_COUNT = 64;

const CHILD = fileURLToPath(new URL("./main.js", import.meta.url));
const START_TIMEOUT_MS = 10_000;
const REQUEST_TIMEOUT_MS = 5_000;
const RESTART_DELAY_MS = 200;

type Pending = { resolve: (r: ProxyReply) => void; reject: (e: Error) => void };
type Request = ProxyRequest extends infer R
  ? R extends { seq: number }
    ? Omit<R, "seq">
    : never
  : never;

/** This process's hard limit on open files (what a child may be given without privilege). */
function hardFileLimit(): number {
  const m = /^Max open files\s+\S+\s+(\S+)/m.exec(readFileSync("/proc/self/limits", "utf8"));
  return m?.[1] === undefined || m[1] === "unlimited" ? Infinity : Number(m[1]);
}

/** The guard table of an uplink: prefixed, so reaping a dead server's leftovers finds it. */
export function proxyTableName(u: UplinkConfig): string {
  return `${u.prefix}egress`;
}

export interface ProxyOptions {
  /** The child's own file limit (default PROXY_MAX_FILES); its connection bound follows from it. */
  maxFiles?: number;
  /**
   * A PEM file of CA certificates the proxy trusts, besides the host's, for bound hosts of
   * brokered secrets (SCRATCHRUN_EGRESS_UPSTREAM_CA: a test topology's server).
   */
  upstreamCaFile?: string | null;
  /**
   * Allowlist entries of the hosts whose brokered secrets may be written into plain-HTTP requests
   * (SCRATCHRUN_SECRETS_PLAIN_HTTP); none by default: a value goes only inside TLS.
   */
  secretsPlainHttp?: readonly string[];
}

export interface CollectedRefusals {
  refused: Refusal[];
  /** Refusals beyond the distinct entries kept. */
  dropped: number;
}

export class EgressProxy {
  private child: ChildProcess | null = null;
  private seq = 0;
  private readonly pending = new Map<number, Pending>();
  /** What the child must know, re-sent to a restarted child. */
  private readonly mirror = new Map<
    string,
    { addrs: string[]; allow: string[]; broker?: BrokerSpec }
  >();
  private host: HostBlockSet;
  private closed = false;
  private unsubscribe: () => void = () => undefined;
  private readonly watch: HostWatch;
  /** Why the child last failed to start or died, for diagnostics. */
  lastError = "";
  /** How many times the child was started (1 + restarts). */
  starts = 0;

  private constructor(
    readonly uplink: UplinkConfig,
    readonly uid: number,
    host: HostBlockSet,
    public ports: ProxyPorts,
    readonly maxFiles: number,
    private readonly brokering: Pick<ProxyChildConfig, "upstreamCaFile" | "secretsPlainHttp">,
  ) {
    this.host = host;
    this.watch = hostWatch(uplink);
  }

  /**
   * Starts the proxy for `uplink` as host uid `uid` (its own: the guard table keys on it) and loads
   * the guard. Throws when the child does not come up listening.
   */
  static async start(
    uplink: UplinkConfig,
    uid: number,
    options: ProxyOptions = {},
  ): Promise<EgressProxy> {
    const host = await readHostBlockSet(uplink);
    // Raising a hard limit needs CAP_SYS_RESOURCE, which a server in a container may lack.
    const maxFiles = Math.min(options.maxFiles ?? PROXY_MAX_FILES, hardFileLimit());
    const p = new EgressProxy(uplink, uid, host, { http: 0, tls: 0, dns: 0 }, maxFiles, {
      upstreamCaFile: options.upstreamCaFile ?? null,
      secretsPlainHttp: [...(options.secretsPlainHttp ?? [])],
    });
    p.watch.acquire();
    try {
      p.ports = await p.spawnChild(null);
      await p.request({ op: "host", addresses: host.addresses, networks: host.networks });
      await p.loadGuard();
      p.unsubscribe = p.watch.subscribe((set) => p.hostChanged(set));
      return p;
    } catch (e) {
      await p.close();
      throw e;
    }
  }

  private async loadGuard(): Promise<void> {
    const script = renderProxyTable({
      table: proxyTableName(this.uplink),
      prefix: this.uplink.prefix,
      ports: this.ports,
      uid: this.uid,
      resolvers: this.uplink.dnsResolvers,
      blocked: BLOCKED_CIDRS,
      hostAddresses: this.host.addresses,
      hostNetworks: this.host.networks,
    });
    await mustRun(inNetns(this.uplink.netns, "nft", ["-f", "-"]), script);
  }

  private async hostChanged(set: HostBlockSet): Promise<void> {
    this.host = set;
    const table = proxyTableName(this.uplink);
    await mustRun(
      inNetns(this.uplink.netns, "nft", ["-f", "-"]),
      renderHostSetUpdate(table, set.addresses, set.networks),
    );
    await this.request({ op: "host", addresses: set.addresses, networks: set.networks });
  }

  private spawnChild(ports: ProxyPorts | null): Promise<ProxyPorts> {
    const config: ProxyChildConfig = {
      uid: this.uid,
      gid: this.uid,
      resolvers: [...this.uplink.dnsResolvers],
      ports,
      ...this.brokering,
    };
    // Its own file limit, soft and hard: the server's is not the proxy's to spend, nor the reverse.
    const node = [
      "/usr/bin/prlimit",
      `--nofile=${this.maxFiles}:${this.maxFiles}`,
      "--",
      process.execPath,
      CHILD,
      JSON.stringify(config),
    ];
    const argv =
      this.uplink.netns === null
        ? node
        : ["/usr/sbin/ip", "netns", "exec", this.uplink.netns, ...node];
    const child = spawn(argv[0] as string, argv.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
    this.child = child;
    this.starts += 1;
    let stderr = "";
    child.stderr?.on("data", (d: Buffer) => (stderr = (stderr + d.toString("utf8")).slice(-2000)));
    child.stdin?.on("error", () => undefined);
    child.on("error", () => undefined);
    return new Promise<ProxyPorts>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new Error(`the egress proxy did not start: ${stderr.trim() || "no answer"}`));
      }, START_TIMEOUT_MS);
      let ready = false;
      createInterface({ input: child.stdout! }).on("line", (line) => {
        let msg: ProxyReply;
        try {
          msg = JSON.parse(line.slice(0, 1 << 20)) as ProxyReply;
        } catch {
          return;
        }
        if ("ready" in msg) {
          ready = true;
          clearTimeout(timer);
          return resolve(msg.ready);
        }
        const p = this.pending.get(msg.seq);
        if (!p) return;
        this.pending.delete(msg.seq);
        if (msg.ok) p.resolve(msg);
        else p.reject(new Error(msg.error));
      });
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        if (this.child === child) this.child = null;
        this.lastError = `exited (${code ?? signal}): ${stderr.trim()}`;
        for (const [seq, p] of this.pending) {
          this.pending.delete(seq);
          p.reject(new Error(`the egress proxy ${this.lastError}`));
        }
        if (!ready) return reject(new Error(`the egress proxy did not start: ${this.lastError}`));
        if (this.closed) return;
        process.stderr.write(`scratchrun: the egress proxy ${this.lastError}; restarting it\n`);
        setTimeout(() => void this.restart(), RESTART_DELAY_MS).unref();
      });
    });
  }

  /** A child died: a new one on the same ports, told the host set and every assignment again. */
  private async restart(): Promise<void> {
    if (this.closed || this.child) return;
    try {
      await this.spawnChild(this.ports);
      await this.request({
        op: "host",
        addresses: this.host.addresses,
        networks: this.host.networks,
      });
      for (const m of this.mirror.values()) await this.request({ op: "assign", ...m });
    } catch (e) {
      this.lastError = String(e);
      if (!this.closed && !this.child) setTimeout(() => void this.restart(), 1000).unref();
    }
  }

  private request(req: Request): Promise<ProxyReply> {
    const child = this.child;
    if (!child?.stdin || this.closed)
      return Promise.reject(new Error(`the egress proxy is not running ${this.lastError}`));
    const seq = ++this.seq;
    return new Promise<ProxyReply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(seq);
        reject(new Error("the egress proxy did not answer"));
      }, REQUEST_TIMEOUT_MS);
      this.pending.set(seq, {
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      child.stdin!.write(JSON.stringify({ ...req, seq }) + "\n");
    });
  }

  /**
   * Gives a sandbox's addresses an allowlist (and an empty refusal record), and its call's
   * brokered secrets if it has any. Without secrets it never throws: if the child is down, the
   * sandbox's connections are refused until the restarted child is told. With secrets it throws
   * unless the child confirmed: the call must not run on the previous assignment, unbrokered.
   */
  async assign(
    addrs: readonly string[],
    allow: DomainAllowlist,
    broker?: BrokerSpec | null,
  ): Promise<void> {
    const m = { addrs: [...addrs], allow: [...allow.entries], ...(broker ? { broker } : {}) };
    this.mirror.set(addrs[0] ?? "", m);
    const told = this.request({ op: "assign", ...m });
    if (broker) await told;
    else await told.catch(() => undefined);
  }

  /** Forgets a sandbox (before its addresses can go to another). Never throws. */
  async release(addrs: readonly string[]): Promise<void> {
    this.mirror.delete(addrs[0] ?? "");
    await this.request({ op: "release", addrs: [...addrs] }).catch(() => undefined);
  }

  /** The refusals recorded for a sandbox since its assignment (empty if the child cannot say). */
  async collect(addrs: readonly string[]): Promise<CollectedRefusals> {
    const r = await this.request({ op: "collect", addrs: [...addrs] }).catch(() => null);
    if (!r || !("ok" in r) || !r.ok) return { refused: [], dropped: 0 };
    return { refused: r.refused ?? [], dropped: r.dropped ?? 0 };
  }

  /** What the child's first-bytes readers have done since it started (tests), or null. */
  async firstBytesWork(): Promise<FirstBytesWork | null> {
    const r = await this.request({ op: "work" }).catch(() => null);
    return r && "ok" in r && r.ok && r.work ? r.work : null;
  }

  /** Host pid of the proxy child (tests, diagnostics). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe();
    this.watch.release();
    const child = this.child;
    this.child = null;
    if (child && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise<void>((r) => child.once("exit", () => r()));
      child.stdin?.end();
      const t = setTimeout(() => child.kill("SIGKILL"), 2000);
      await gone;
      clearTimeout(t);
    }
    await mustRun(
      inNetns(this.uplink.netns, "nft", ["-f", "-"]),
      renderProxyTableTeardown(proxyTableName(this.uplink)),
    ).catch(() => undefined);
  }
}
