/**
 * The egress tests' world, built once per suite (test/security/egress-*.test.ts,
 * brokered-secrets.test.ts): the private test internet (topology.ts), its web hosts (web.ts), a
 * resolv.conf naming the topology's resolver, and optionally a real egress proxy child with
 * sandbox networks made through it. stop() removes all of it and fails if a sandbox network is
 * left on the uplink.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { egressOf } from "../../src/compose/network.js";
import type { DomainAllowlist } from "../../src/net/allowlist.js";
import { createSandboxNetwork, type SandboxNetwork } from "../../src/net/sandbox-net.js";
import { EgressProxy, PROXY_UID_BASE, type ProxyOptions } from "../../src/net/proxy/supervisor.js";
import type { NetworkEgress, NetworkReport } from "../../src/backends/types.js";
import { probe, RESOLVER, Topology, type Check, type ProbeResult } from "./topology.js";
import { WebHosts, type WebHostsOptions } from "./web.js";

export type Sandbox = {
  net: SandboxNetwork;
  egress: NetworkEgress & { teardown(): Promise<void> };
};

export interface EgressFixtureOptions {
  /** Prefix of the sandbox network ids (one per suite, so leftovers say whose they are). */
  idPrefix: string;
  /** Start a proxy child as PROXY_UID_BASE + this (one per suite), with these options. */
  proxy?: { uidOffset: number; options?: ProxyOptions };
  web?: WebHostsOptions;
}

export class EgressFixture {
  topo!: Topology;
  web!: WebHosts;
  /** Present when the options asked for one. */
  proxy!: EgressProxy;
  /** A resolv.conf naming the topology's resolver (short timeouts). */
  resolvPath = "";
  private dir = "";
  private seq = 0;
  private readonly live: Sandbox[] = [];

  constructor(private readonly opts: EgressFixtureOptions) {}

  async start(): Promise<this> {
    this.topo = await new Topology().build();
    this.web = await new WebHosts(this.topo, this.opts.web).start();
    if (this.opts.proxy)
      this.proxy = await EgressProxy.start(
        this.topo.uplink,
        PROXY_UID_BASE + this.opts.proxy.uidOffset,
        this.opts.proxy.options,
      );
    this.dir = mkdtempSync(join(tmpdir(), "sr-egress-"));
    this.resolvPath = join(this.dir, "resolv.conf");
    writeFileSync(this.resolvPath, `nameserver ${RESOLVER}\noptions timeout:1 attempts:1\n`);
    return this;
  }

  /** A sandbox network through the proxy, with `allow`. */
  async sandbox(allow: DomainAllowlist): Promise<Sandbox> {
    this.seq += 1;
    const net = await createSandboxNetwork({
      id: `${this.opts.idPrefix}${this.seq}`,
      uplink: this.topo.uplink,
      proxy: this.proxy.ports,
    });
    const s = { net, egress: await egressOf(net, this.proxy, allow) };
    this.live.push(s);
    return s;
  }

  async drop(s: Sandbox): Promise<void> {
    this.live.splice(this.live.indexOf(s), 1);
    await s.egress.teardown();
  }

  run(s: Sandbox, checks: Check[]): Promise<ProbeResult> {
    return probe(s.net.netns, checks, { resolvConfPath: this.resolvPath });
  }

  /** Runs `checks` in a fresh sandbox with `allow`; its report once they are done. */
  async attempt(
    allow: DomainAllowlist,
    checks: Check[],
  ): Promise<{ res: ProbeResult; report: NetworkReport }> {
    const s = await this.sandbox(allow);
    const res = await this.run(s, checks);
    const report = await s.egress.report();
    await this.drop(s);
    return { res, report };
  }

  async stop(): Promise<void> {
    for (const s of this.live.splice(0)) await s.egress.teardown();
    await this.proxy?.close();
    await this.web?.stop();
    const left = this.topo ? await this.topo.networksLeft() : null;
    await this.topo?.destroy();
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    assert.deepEqual(left, { netns: [], links: [], tables: [] }, "networks removed");
  }
}
