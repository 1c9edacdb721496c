// `node dist/bench/nft-cost.js [reps] [N,N,...]` (issue 57, decision 0019): what one `public`
// sandbox's nftables cost, with N other sandboxes' rules present (default 0, 16, 64, 128), in a
// network namespace of its own that it removes (run it as root, under /tmp/sr-test.lock). Three
// layouts of the same rules, each timed for the three `nft` runs of a sandbox's life: its rules
// loaded (one `nft -f`), its counters read (a call's report) and its rules removed (one `nft -f`):
//
//  - tables: the layout before, two tables per sandbox (renderEgressRuleset), each with its own
//    copies of the blocked and host sets; counters read with `list table` of both;
//  - chains: one shared table per family holding the blocked and host sets once, each sandbox's
//    chains and counters in it under names of its own (what sandbox-net.ts loads since decision
//    0019's shared tables: renderSharedTables, renderSandboxRules, renderSandboxRulesRemoval);
//    counters read with one `list counters`;
//  - sets: one shared table whose sets and maps name the sandbox links (source per link, mark per
//    link, counter per link), its chains written once; per sandbox a netdev chain and set
//    elements; counters read with one `list counters`. A prototype: the timing of its `nft` runs,
//    not a renderer whose verdicts a test holds.
//
// Median of `reps` (default 7) per cell, ms wall, sequential; writes JSON to stdout.
import { spawnSync } from "node:child_process";
import { performance } from "node:perf_hooks";
import { BLOCKED_CIDRS, cidrText } from "../src/net/addresses.js";
import {
  renderEgressRuleset,
  renderSandboxRules,
  renderSandboxRulesRemoval,
  renderSharedTables,
  sandboxObjects,
  type EgressPolicy,
} from "../src/net/nftables.js";
import { summarize } from "./stats.js";

const REPS = Number(process.argv[2] ?? 7);
const COUNTS = (process.argv[3] ?? "0,16,64,128").split(",").map(Number);
const NS = "srbench-nft";
const SHARED = "srb";
/** The chains layout's shared tables, as a server names them (sharedTableName("srb")). */
const SHARED_RULES = "srb.rules";

function nsRun(args: string[], input?: string): string {
  const r = spawnSync("ip", ["netns", "exec", NS, ...args], { input, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}
const nft = (script: string) => nsRun(["nft", "-f", "-"], script);
function ms(f: () => unknown): number {
  const t = performance.now();
  f();
  return performance.now() - t;
}

/** A fresh namespace with `links` veth pairs (host ends b0..bN), nothing else. */
function freshNamespace(links: number): void {
  spawnSync("ip", ["netns", "del", NS]);
  const r = spawnSync("ip", ["netns", "add", NS]);
  if (r.status !== 0) throw new Error(`ip netns add: ${r.stderr.toString()}`);
  const lines = Array.from({ length: links }, (_, i) => `link add b${i} type veth peer name p${i}`);
  nsRun(["ip", "-batch", "-"], lines.join("\n") + "\n");
}

const addr = (i: number) => {
  const base = `10.250.${i >> 6}.`;
  return { gw: `${base}${(i & 63) * 4 + 1}`, sb: `${base}${(i & 63) * 4 + 2}` };
};
const mark = (i: number) => `0x${(0x5700 + i).toString(16).padStart(8, "0")}`;
const HOST = {
  hostAddresses: ["192.168.1.5"],
  hostNetworks: [{ family: 4 as const, network: "192.168.2.0", prefix: 24, name: "on-link" }],
};

function policyOf(i: number): EgressPolicy {
  return {
    table: `t${i}`,
    hostIfname: `b${i}`,
    sandboxV4: addr(i).sb,
    gatewayV4: addr(i).gw,
    sandboxV6: null,
    ...HOST,
    dnsResolvers: ["1.1.1.1"],
    blocked: BLOCKED_CIDRS,
    connMark: 0x5700 + i,
  };
}
/** The two tables of sandbox i of the layout before decision 0019's shared tables. */
const tablesOf = (i: number): string => renderEgressRuleset(policyOf(i));

const COUNTERS = ["blocked", "forwarded", "passed"];

/** The same rules as sandbox-net.ts loads them now: chains `t<i>.*` in the shared tables. */
const chainsOf = (i: number): string => renderSandboxRules(policyOf(i), SHARED_RULES);
const chainsRemoval = (i: number): string =>
  renderSandboxRulesRemoval(SHARED_RULES, sandboxObjects(policyOf(i)));
function sharedSets(): string[] {
  const v4 = BLOCKED_CIDRS.filter((c) => c.family === 4).map(cidrText);
  const v6 = BLOCKED_CIDRS.filter((c) => c.family === 6).map(cidrText);
  const set = (name: string, type: string, el: string[]) =>
    `\tset ${name} {\n\t\ttype ${type}\n\t\tflags interval\n\t\tauto-merge\n${el.length ? `\t\telements = { ${el.join(", ")} }\n` : ""}\t}`;
  return [
    set("blocked4", "ipv4_addr", v4),
    set("blocked6", "ipv6_addr", v6),
    set("host4", "ipv4_addr", ["192.168.1.5/32", "192.168.2.0/24"]),
    set("host6", "ipv6_addr", []),
  ];
}
const chainsBase = () =>
  renderSharedTables(SHARED_RULES, HOST.hostAddresses, HOST.hostNetworks, BLOCKED_CIDRS);

/** The per-set layout: chains written once, a sandbox is a netdev chain and set elements. */
function setsBase(): string {
  const c = (name: string) => `counter name ${name} map @c_blocked`;
  return [
    `table netdev ${SHARED} {`,
    `}`,
    `table inet ${SHARED} {`,
    ...sharedSets(),
    `\tset links { type ifname; }`,
    `\tset src4 { type ifname . ipv4_addr; }`,
    `\tset marks { type ifname . mark; }`,
    `\tmap markof { type ifname : mark; }`,
    `\tmap c_blocked { type ifname : counter; }`,
    `\tmap c_forwarded { type ifname : counter; }`,
    `\tmap c_passed { type ifname : counter; }`,
    `\tchain forward {`,
    `\t\ttype filter hook forward priority -10; policy accept;`,
    `\t\tiifname @links jump from_sandbox`,
    `\t\toifname @links jump to_sandbox`,
    `\t}`,
    `\tchain from_sandbox {`,
    `\t\tmeta nfproto ipv4 iifname . ip saddr != @src4 ${c("iifname")} drop`,
    `\t\tmeta nfproto ipv6 ${c("iifname")} drop`,
    `\t\tip daddr @blocked4 ${c("iifname")} drop`,
    `\t\tip6 daddr @blocked6 ${c("iifname")} drop`,
    `\t\tip daddr @host4 ${c("iifname")} drop`,
    `\t\tip6 daddr @host6 ${c("iifname")} drop`,
    `\t\tcounter name iifname map @c_forwarded accept`,
    `\t}`,
    `\tchain forward_late {`,
    `\t\ttype filter hook forward priority 1000; policy accept;`,
    `\t\tiifname @links counter name iifname map @c_passed accept`,
    `\t}`,
    `\tchain to_sandbox {`,
    `\t\tct state established,related oifname . ct mark @marks accept`,
    `\t\t${c("oifname")} drop`,
    `\t}`,
    `\tchain input {`,
    `\t\ttype filter hook input priority -10; policy accept;`,
    `\t\tiifname @links ${c("iifname")} drop`,
    `\t}`,
    `\tchain mark_new {`,
    `\t\ttype filter hook prerouting priority mangle; policy accept;`,
    `\t\tiifname @links ct mark set iifname map @markof`,
    `\t}`,
    `\tchain output {`,
    `\t\ttype filter hook output priority -10; policy accept;`,
    `\t\toifname @links ct state established,related oifname . ct mark != @marks ${c("oifname")} drop`,
    `\t}`,
    `\tchain postrouting {`,
    `\t\ttype nat hook postrouting priority srcnat; policy accept;`,
    `\t\tiifname . ip saddr @src4 oifname != @links masquerade`,
    `\t}`,
    `}`,
    "",
  ].join("\n");
}
function setsOf(i: number): string {
  const d = `b${i}`;
  const a = addr(i);
  const el = (set: string, v: string) => `add element inet ${SHARED} ${set} { ${v} }`;
  return [
    ...COUNTERS.map((c) => `add counter inet ${SHARED} ${c}_${d}`),
    `add counter netdev ${SHARED} link_${d}`,
    `add chain netdev ${SHARED} ${d} { type filter hook ingress device "${d}" priority -500; policy drop; }`,
    `add rule netdev ${SHARED} ${d} ether type arp arp htype 1 arp ptype ip arp hlen 6 arp plen 4 arp saddr ip ${a.sb} arp daddr ip ${a.gw} accept`,
    `add rule netdev ${SHARED} ${d} ether type ip ip saddr ${a.sb} accept`,
    `add rule netdev ${SHARED} ${d} counter name "link_${d}" drop`,
    ...COUNTERS.map((c) => el(`c_${c}`, `"${d}" : "${c}_${d}"`)),
    el("src4", `"${d}" . ${a.sb}`),
    el("marks", `"${d}" . ${mark(i)}`),
    el("markof", `"${d}" : ${mark(i)}`),
    el("links", `"${d}"`),
    "",
  ].join("\n");
}
function setsRemoval(i: number): string {
  const d = `b${i}`;
  const a = addr(i);
  const el = (set: string, v: string) => `delete element inet ${SHARED} ${set} { ${v} }`;
  return [
    el("links", `"${d}"`),
    el("markof", `"${d}"`),
    el("marks", `"${d}" . ${mark(i)}`),
    el("src4", `"${d}" . ${a.sb}`),
    ...COUNTERS.map((c) => el(`c_${c}`, `"${d}"`)),
    `delete chain netdev ${SHARED} ${d}`,
    ...COUNTERS.map((c) => `delete counter inet ${SHARED} ${c}_${d}`),
    `delete counter netdev ${SHARED} link_${d}`,
    "",
  ].join("\n");
}

interface Layout {
  base: string | null;
  load: (i: number) => string;
  read: (i: number) => void;
  remove: (i: number) => string;
}
const layouts: Record<string, Layout> = {
  tables: {
    base: null,
    load: tablesOf,
    read: (i) => {
      nsRun(["nft", "-j", "list", "table", "inet", `t${i}`]);
      nsRun(["nft", "-j", "list", "table", "netdev", `t${i}`]);
    },
    remove: (i) => `delete table netdev t${i}\ndelete table inet t${i}\n`,
  },
  chains: {
    base: chainsBase(),
    load: chainsOf,
    read: () => nsRun(["nft", "-j", "list", "counters"]),
    remove: chainsRemoval,
  },
  sets: {
    base: setsBase(),
    load: setsOf,
    read: () => nsRun(["nft", "-j", "list", "counters"]),
    remove: setsRemoval,
  },
};

const rows: Array<Record<string, unknown>> = [];
try {
  for (const n of COUNTS) {
    for (const [name, l] of Object.entries(layouts)) {
      freshNamespace(n + 1);
      if (l.base) nft(l.base);
      // The N others, loaded 16 at a time (one transaction each).
      for (let k = 0; k < n; k += 16) {
        const ids = Array.from({ length: Math.min(16, n - k) }, (_, j) => k + j);
        nft(ids.map((i) => l.load(i)).join("\n"));
      }
      const load: number[] = [];
      const read: number[] = [];
      const remove: number[] = [];
      for (let r = 0; r < REPS; r++) {
        load.push(ms(() => nft(l.load(n))));
        read.push(ms(() => l.read(n)));
        remove.push(ms(() => nft(l.remove(n))));
      }
      const p50 = (xs: number[]) => summarize(xs)?.p50 ?? Number.NaN;
      const row = {
        layout: name,
        others: n,
        load_ms: p50(load),
        read_ms: p50(read),
        remove_ms: p50(remove),
        total_ms: Math.round((p50(load) + p50(read) + p50(remove)) * 10) / 10,
      };
      rows.push(row);
      process.stderr.write(`${JSON.stringify(row)}\n`);
    }
  }
} finally {
  spawnSync("ip", ["netns", "del", NS]);
}
console.log(
  JSON.stringify({ date: new Date().toISOString(), reps: REPS, loadavg: loadavg(), rows }, null, 1),
);

function loadavg(): string {
  const r = spawnSync("cat", ["/proc/loadavg"], { encoding: "utf8" });
  return r.stdout.trim();
}
