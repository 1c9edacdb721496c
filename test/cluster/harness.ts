/**
 * Several machines on one: N workers, each `scratchrun serve --role worker` in a network namespace
 * of its own behind a veth link (its "node"), M API replicas (`--role api`) on loopback, a TCP
 * front door standing in for the API's Service, a DNS server standing in for the cluster DNS of
 * the workers' headless Service, and a real Postgres behind a TCP proxy standing in for the
 * database's read-write Service. Every part is a real process; the test kills, unplugs and
 * drains them. Addresses: 198.18.<i>.0/30 per worker link (RFC 2544's benchmarking range, only
 * on links this harness creates); everything else is loopback.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { KeyStore } from "../../src/store/keys.js";
import { migratePostgres, PostgresDriver } from "../../src/store/postgres.js";
import type { RunRow } from "../../src/store/runs.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { startPostgres, type PgServer } from "../helpers/postgres.js";
import { waitFor } from "../api/harness.js";
import { TestDns } from "./dns-server.js";
import { TcpProxy } from "./tcp-proxy.js";

export const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");
export const WORKERS_NAME = "workers.scratchrun.test";
export const WORKER_PORT = 8788;
/**
 * The replicas bind a non-loopback address (as pods do) on a dummy link of the harness's own, so
 * the front door's Host header is not checked against DNS rebinding as on a loopback bind.
 */
export const API_ADDRESS = "198.18.0.1";

function ip(args: string[]): void {
  const r = spawnSync("ip", args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`ip ${args.join(" ")}: ${r.stderr}`);
}

/** A child process with its stderr kept, and a promise of its exit. */
class Proc {
  // Chunks joined when read, not at every log line: the benchmark times calls in this process.
  private chunks: string[] = [];
  private size = 0;
  readonly exited: Promise<number | null>;
  constructor(readonly child: ChildProcess) {
    child.stderr!.on("data", (d: Buffer) => {
      this.chunks.push(d.toString());
      this.size += d.length;
      if (this.size > 400_000) void this.stderr;
    });
    this.exited = new Promise((r) => child.once("exit", (code) => r(code)));
  }
  /** The last 200 000 characters it wrote to stderr. */
  get stderr(): string {
    const text = this.chunks.join("").slice(-200_000);
    this.chunks = [text];
    this.size = text.length;
    return text;
  }
  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<number | null> {
    if (this.alive) this.child.kill(signal);
    return this.exited;
  }
}

export interface WorkerOptions {
  maxConcurrent?: number;
  maxQueued?: number;
  poolSize?: number;
}

export class WorkerNode {
  proc: Proc | undefined;
  readonly ns: string;
  readonly hostLink: string;
  readonly address: string;
  readonly hostAddress: string;
  readonly home: string;

  constructor(
    readonly index: number,
    tag: string,
    private readonly cluster: Cluster,
    private readonly options: WorkerOptions,
  ) {
    this.ns = `sr-cl${tag}-w${index}`;
    this.hostLink = `srcl${tag}w${index}`;
    this.address = `198.18.${index}.2`;
    this.hostAddress = `198.18.${index}.1`;
    this.home = mkdtempSync(join(tmpdir(), `sr-cluster-w${index}-`));
    ip(["netns", "add", this.ns]);
    ip(["link", "add", this.hostLink, "type", "veth", "peer", "name", "eth0", "netns", this.ns]);
    ip(["addr", "add", `${this.hostAddress}/30`, "dev", this.hostLink]);
    ip(["link", "set", this.hostLink, "up"]);
    ip(["-n", this.ns, "addr", "add", `${this.address}/30`, "dev", "eth0"]);
    ip(["-n", this.ns, "link", "set", "eth0", "up"]);
    ip(["-n", this.ns, "link", "set", "lo", "up"]);
  }

  /** "host:port" as the API replicas see it. */
  get addr(): string {
    return `${this.address}:${WORKER_PORT}`;
  }

  /** Starts `scratchrun serve --role worker` inside the namespace; resolves once it listens. */
  async start(): Promise<void> {
    const o = this.options;
    const child = spawn(
      "nsenter",
      [
        `--net=/run/netns/${this.ns}`,
        "--",
        process.execPath,
        CLI,
        "serve",
        "--role",
        "worker",
        "--host",
        "0.0.0.0",
        "--port",
        String(WORKER_PORT),
        "--max-concurrent",
        String(o.maxConcurrent ?? 2),
        "--max-queued",
        String(o.maxQueued ?? 2),
      ],
      {
        env: {
          ...process.env,
          SCRATCHRUN_HOME: this.home,
          SCRATCHRUN_ISOLATION: "namespace",
          SCRATCHRUN_NETWORK: "none",
          SCRATCHRUN_POOL_SIZE: String(o.poolSize ?? 1),
          SCRATCHRUN_WORKER_TOKEN: this.cluster.token,
        },
        stdio: ["ignore", "ignore", "pipe"],
      },
    );
    const proc = new Proc(child);
    this.proc = proc;
    await waitFor(
      `worker ${this.index} to listen`,
      () => {
        if (!proc.alive) throw new Error(`worker ${this.index} exited: ${proc.stderr}`);
        return /worker serving on/.test(proc.stderr);
      },
      60_000,
    );
  }

  linkDown(): void {
    ip(["link", "set", this.hostLink, "down"]);
  }

  linkUp(): void {
    ip(["link", "set", this.hostLink, "up"]);
  }

  destroy(): void {
    spawnSync("ip", ["link", "del", this.hostLink]);
    spawnSync("ip", ["netns", "del", this.ns]);
    rmSync(this.home, { recursive: true, force: true });
  }
}

export class ApiReplica {
  proc: Proc | undefined;
  port = 0;
  constructor(
    readonly index: number,
    private readonly cluster: Cluster,
  ) {}

  async start(
    extraEnv: Record<string, string> = {},
    nodeArgs: string[] = [],
    cli = CLI,
  ): Promise<void> {
    const c = this.cluster;
    const child = spawn(
      process.execPath,
      [
        ...nodeArgs,
        cli,
        "serve",
        "--role",
        "api",
        "--host",
        API_ADDRESS,
        "--port",
        "0",
        "--workers",
        `${WORKERS_NAME}:${WORKER_PORT}`,
        "--key-concurrency",
        "100",
        "--key-rate",
        "100000",
      ],
      {
        env: {
          ...process.env,
          SCRATCHRUN_DATABASE_URL: c.dbUrl,
          SCRATCHRUN_WORKERS_DNS_SERVER: c.dns.server,
          SCRATCHRUN_WORKER_TOKEN: c.token,
          SCRATCHRUN_LEASE_TTL_MS: String(c.leaseTtlMs),
          // The one origin clients know (the front door, as a Service's): every replica is the
          // same OAuth issuer, and `${c.url}/mcp` the one resource its tokens are for.
          SCRATCHRUN_PUBLIC_URL: c.url,
          ...extraEnv,
        },
        stdio: ["ignore", "ignore", "pipe"],
      },
    );
    const proc = new Proc(child);
    this.proc = proc;
    const url = await waitFor(
      `api replica ${this.index} to listen`,
      () => {
        if (!proc.alive) throw new Error(`replica ${this.index} exited: ${proc.stderr}`);
        return /serving on (http:\/\/\S+)/.exec(proc.stderr)?.[1];
      },
      30_000,
    );
    this.port = Number(new URL(url).port);
  }

  get replicaId(): string {
    return /api replica (\S+) serving/.exec(this.proc?.stderr ?? "")?.[1] ?? "";
  }
}

export interface ClusterOptions {
  workers: number;
  replicas: number;
  worker?: WorkerOptions;
  leaseTtlMs?: number;
  /** Extra environment of the API replicas (e.g. NODE_OPTIONS for a profile). */
  replicaEnv?: Record<string, string>;
  /** Node options of the API replicas (e.g. --cpu-prof, which NODE_OPTIONS does not take). */
  replicaNodeArgs?: string[];
  /** The CLI each replica runs, by index (default: this build's): an A/B of two builds. */
  replicaClis?: string[];
  /**
   * Replicas reach Postgres directly, not through the harness's TCP proxy (which the failover
   * test switches to the standby). For the benchmark: a Kubernetes Service forwards in the kernel,
   * whereas this proxy copies every byte through the event loop of the process that runs it.
   */
  databaseDirect?: boolean;
}

export interface CallResult {
  status: number;
  ms: number;
  body: {
    stdout?: string;
    exit_reason?: string;
    error?: { code: string; message: string };
    [k: string]: unknown;
  };
  retryAfter: string | null;
}

export class Cluster {
  readonly token = randomBytes(24).toString("base64url");
  readonly tag = randomBytes(2).toString("hex");
  workers: WorkerNode[] = [];
  replicas: ApiReplica[] = [];
  key = "";
  dbUrl = "";
  leaseTtlMs: number;
  apiLink = "";
  private db!: pg.Pool;

  private constructor(
    readonly pgServer: PgServer,
    readonly dbProxy: TcpProxy,
    readonly dns: TestDns,
    readonly front: TcpProxy,
    options: ClusterOptions,
  ) {
    this.leaseTtlMs = options.leaseTtlMs ?? 3000;
  }

  static async start(options: ClusterOptions): Promise<Cluster> {
    const apiLink = `srcl${randomBytes(2).toString("hex")}api`;
    // A veth pair (this kernel has no dummy links); only its address matters.
    ip(["link", "add", apiLink, "type", "veth", "peer", "name", `${apiLink}p`]);
    ip(["addr", "add", `${API_ADDRESS}/32`, "dev", apiLink]);
    ip(["link", "set", apiLink, "up"]);
    const pgServer = await startPostgres();
    const dbProxy = await TcpProxy.start([pgServer.port]);
    const dns = await TestDns.start();
    const front = await TcpProxy.start([], API_ADDRESS);
    const c = new Cluster(pgServer, dbProxy, dns, front, options);
    c.apiLink = apiLink;
    try {
      await pgServer.createDatabase("scratchrun");
      c.dbUrl = options.databaseDirect
        ? pgServer.url("scratchrun")
        : `postgres://scratchrun@127.0.0.1:${dbProxy.port}/scratchrun`;
      const sql = new PostgresDriver({ url: c.dbUrl });
      await migratePostgres(sql);
      c.key = (await new KeyStore(sql).create("cluster")).key;
      await sql.close();
      c.db = new pg.Pool({ connectionString: pgServer.url("scratchrun"), max: 2 });
      c.db.on("error", () => {});
      for (let i = 0; i < options.workers; i++)
        c.workers.push(new WorkerNode(i + 1, c.tag, c, options.worker ?? {}));
      await Promise.all(c.workers.map((w) => w.start()));
      c.publishWorkers();
      for (let i = 0; i < options.replicas; i++) c.replicas.push(new ApiReplica(i + 1, c));
      await Promise.all(
        c.replicas.map((r) =>
          r.start(options.replicaEnv, options.replicaNodeArgs, options.replicaClis?.[r.index - 1]),
        ),
      );
      c.publishReplicas();
      return c;
    } catch (e) {
      await c.close();
      throw e;
    }
  }

  /** DNS lists the workers given (default: every worker whose process runs). */
  publishWorkers(workers = this.workers.filter((w) => w.proc?.alive)): void {
    this.dns.set(
      WORKERS_NAME,
      workers.map((w) => w.address),
    );
  }

  publishReplicas(): void {
    this.front.targets = this.replicas.filter((r) => r.proc?.alive).map((r) => r.port);
  }

  get url(): string {
    return `http://127.0.0.1:${this.front.port}`;
  }

  /** POST /v1/exec through the front door, on a fresh connection. */
  async exec(
    body: unknown,
    options: { port?: number; signal?: AbortSignal } = {},
  ): Promise<CallResult> {
    const t0 = Date.now();
    const at = options.port ? `${API_ADDRESS}:${options.port}` : `127.0.0.1:${this.front.port}`;
    const res = await fetch(`http://${at}/v1/exec`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${this.key}`,
        "Content-Type": "application/json",
        Connection: "close",
      },
      body: JSON.stringify(body),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    const json = (await res.json()) as CallResult["body"];
    return {
      status: res.status,
      ms: Date.now() - t0,
      body: json,
      retryAfter: res.headers.get("retry-after"),
    };
  }

  /** Run records, read straight from the primary (not through the proxy). */
  async runs(url?: string): Promise<RunRow[]> {
    const pool = url ? new pg.Pool({ connectionString: url, max: 1 }) : this.db;
    try {
      const r = await pool.query("SELECT * FROM runs ORDER BY received_at, id");
      return r.rows.map((row: Record<string, unknown>) => ({
        ...row,
        received_at: Number(row.received_at),
        started_at: row.started_at === null ? null : Number(row.started_at),
        finished_at: row.finished_at === null ? null : Number(row.finished_at),
      })) as unknown as RunRow[];
    } finally {
      if (url) await pool.end();
    }
  }

  /** A query on the primary (not through the proxy). */
  async sql(text: string, params: unknown[] = []): Promise<Record<string, unknown>[]> {
    return (await this.db.query(text, params)).rows as Record<string, unknown>[];
  }

  /** Points the read-side pool at another server (after a failover). */
  async readFrom(server: PgServer): Promise<void> {
    await this.db.end().catch(() => {});
    this.db = new pg.Pool({ connectionString: server.url("scratchrun"), max: 2 });
    this.db.on("error", () => {});
  }

  /** Waits until every replica sees `n` workers up (its metrics say so). */
  async waitWorkersUp(
    n: number,
    replicas = this.replicas.filter((r) => r.proc?.alive),
  ): Promise<void> {
    for (const r of replicas)
      await waitFor(
        `replica ${r.index} to see ${n} workers`,
        async () => {
          const text = await (await fetch(`http://${API_ADDRESS}:${r.port}/metrics`)).text();
          return (
            new RegExp(`scratchrun_workers\\{state="up"\\} ${n}\\b`).test(text) &&
            /scratchrun_workers\{state="draining"\} 0\b/.test(text)
          );
        },
        20_000,
      );
  }

  async close(): Promise<void> {
    await Promise.all(this.replicas.map((r) => r.proc?.kill("SIGTERM")));
    await Promise.all(this.workers.map((w) => w.proc?.kill("SIGTERM")));
    for (const w of this.workers) w.destroy();
    if (this.apiLink) spawnSync("ip", ["link", "del", this.apiLink]);
    await this.front.close();
    await this.dbProxy.close();
    await this.dns.close();
    await this.db?.end().catch(() => {});
    await this.pgServer.stop();
  }
}

export { sleep };
