// The forwarding guard and Docker's DOCKER-USER rules (src/net/forward-guard.ts), pure: what is
// rendered (checked on the exact text through the rule-order model), and what is read back from
// `nft -j` output, including output a hostile or unrelated ruleset could hold. The kernel's view
// of the same text is test/net/forwarding.test.ts's.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  dockerUserChain,
  forwardChains,
  GUARD_TABLE,
  guardPrefixes,
  linkPattern,
  renderDockerUserRules,
  renderForwardGuard,
} from "../../src/net/forward-guard.js";
import { evalChain, parseScript, type Packet } from "./nft-model.js";

const pkt = (iif: string, oif: string): Packet => ({
  family: 4,
  src: "198.18.0.2",
  dst: "198.51.100.10",
  proto: "tcp",
  dport: 443,
  hoplimit: 64,
  ct: "new",
  iif,
  oif,
});

/** nft -j output holding these rules of `table`/`chain` (family inet unless given). */
function rulesJson(
  rules: { expr: unknown[]; table?: string; chain?: string; family?: string }[],
): string {
  return JSON.stringify({
    nftables: [
      { metainfo: { version: "1.0.6", json_schema_version: 1 } },
      ...rules.map((r, i) => ({
        rule: {
          family: r.family ?? "inet",
          table: r.table ?? GUARD_TABLE,
          chain: r.chain ?? "forward",
          handle: i + 3,
          expr: r.expr,
        },
      })),
    ],
  });
}
const ifMatch = (key: string, right: unknown, op = "==") => ({
  match: { op, left: { meta: { key } }, right },
});
const ACCEPT = { accept: null };
/** A guard's rules for these prefixes, as the kernel lists them. */
const guardJson = (prefixes: string[]) =>
  rulesJson([
    ...prefixes.flatMap((p) => [
      { expr: [ifMatch("iifname", `${p}h*`), ACCEPT] },
      { expr: [ifMatch("oifname", `${p}h*`), ACCEPT] },
    ]),
    { expr: [{ counter: "dropped" }, { drop: null }] },
  ]);

const prefixArb = fc.stringMatching(/^[a-z][a-z0-9-]{0,8}$/);

describe("linkPattern", () => {
  it("is the prefix's sandbox links", () => {
    assert.equal(linkPattern("sr-"), "sr-h*");
    assert.equal(linkPattern("s1a2b-"), "s1a2b-h*");
  });

  it("refuses anything that is not a prefix uplink.ts accepts: no nft syntax gets in", () => {
    for (const bad of [
      "",
      "Sr-",
      "1sr",
      "sr-toolong-",
      'sr" accept',
      "sr-*",
      "sr\n",
      "sr h",
      "sr;",
      "sr{",
      "s/r",
      "sr\\",
      "ß",
    ])
      assert.throws(() => linkPattern(bad), TypeError, JSON.stringify(bad));
    fc.assert(
      fc.property(fc.string(), (s) => {
        let out: string;
        try {
          out = linkPattern(s);
        } catch {
          return true;
        }
        return /^[a-z][a-z0-9-]{0,8}h\*$/.test(out);
      }),
    );
  });
});

describe("renderForwardGuard", () => {
  it("lets through what comes from or goes to a sandbox link of any prefix given, and drops the rest, counted, last", () => {
    const model = parseScript(renderForwardGuard(["sr-", "s1a2b-"]));
    const rules = model.chains.get("forward") ?? [];
    assert.equal(rules.at(-1), 'counter name "dropped" drop');
    const v = (iif: string, oif: string) => evalChain(model, "forward", pkt(iif, oif)).verdict;
    assert.equal(v("sr-h0", "eth0"), "accept", "a sandbox's packet out");
    assert.equal(v("eth0", "sr-h12"), "accept", "a reply in");
    assert.equal(v("s1a2b-h3", "eth0"), "accept", "another server's prefix");
    assert.equal(v("eth0", "docker0"), "drop", "another interface's forwarding");
    assert.equal(v("docker0", "eth0"), "drop");
    assert.equal(v("sr-x0", "eth0"), "drop", "the prefix's other names are not links");
    assert.equal(v("sr", "eth0"), "drop");
    assert.equal(v("br-sr-h0", "eth0"), "drop", "a pattern is a prefix match, not a substring");
  });

  it("any interface pair is accepted exactly when one side is a sandbox link (fast-check)", () => {
    const name = fc.oneof(
      fc.constantFrom("eth0", "docker0", "sr-h1", "sr-h", "s9-h7", "sr-", "srh1", "s9-h"),
      fc.stringMatching(/^[a-z0-9-]{1,15}$/),
    );
    fc.assert(
      fc.property(
        fc.uniqueArray(prefixArb, { minLength: 1, maxLength: 3 }),
        name,
        name,
        (ps, i, o) => {
          const model = parseScript(renderForwardGuard(ps));
          const link = (n: string) => ps.some((p) => n.startsWith(`${p}h`));
          const want = link(i) || link(o) ? "accept" : "drop";
          return evalChain(model, "forward", pkt(i, o)).verdict === want;
        },
      ),
    );
  });

  it("replaces a guard whole (one transaction), names each prefix once, and needs one", () => {
    const script = renderForwardGuard(["sr-", "sr-", "ab-"]);
    assert.match(
      script,
      new RegExp(`^table inet ${GUARD_TABLE}\\ndelete table inet ${GUARD_TABLE}\\n`, "m"),
    );
    assert.equal(script.match(/iifname "sr-h\*" accept/g)?.length, 1);
    assert.throws(() => renderForwardGuard([]), TypeError);
    assert.throws(() => renderForwardGuard(['x" drop; #']), TypeError);
  });
});

describe("guardPrefixes", () => {
  it("reads back the prefixes a guard lets through", () => {
    assert.deepEqual(guardPrefixes(guardJson(["sr-", "ab-"])), ["ab-", "sr-"]);
    fc.assert(
      fc.property(fc.uniqueArray(prefixArb, { maxLength: 4 }), (ps) => {
        assert.deepEqual(guardPrefixes(guardJson(ps)), [...ps].sort());
      }),
    );
  });

  it("no guard, or output that is not a guard, is no prefix", () => {
    for (const out of ["", "{", "null", "[]", '{"nftables": 3}', '{"nftables": [null, 1, "x"]}'])
      assert.deepEqual(guardPrefixes(out), [], out);
  });

  it("counts only a pair of plain accepts in the guard's own forward chain", () => {
    const pair = (p: string, over: Partial<{ table: string; chain: string }> = {}) => [
      { ...over, expr: [ifMatch("iifname", `${p}h*`), ACCEPT] },
      { ...over, expr: [ifMatch("oifname", `${p}h*`), ACCEPT] },
    ];
    const cases: [string, Parameters<typeof rulesJson>[0]][] = [
      ["only the in half", [{ expr: [ifMatch("iifname", "sr-h*"), ACCEPT] }]],
      ["only the out half", [{ expr: [ifMatch("oifname", "sr-h*"), ACCEPT] }]],
      ["another table's", pair("sr-", { table: "filter" })],
      ["another chain's", pair("sr-", { chain: "input" })],
      [
        "a negated match",
        [
          { expr: [ifMatch("iifname", "sr-h*", "!="), ACCEPT] },
          { expr: [ifMatch("oifname", "sr-h*", "!="), ACCEPT] },
        ],
      ],
      [
        "a drop",
        [
          { expr: [ifMatch("iifname", "sr-h*"), { drop: null }] },
          { expr: [ifMatch("oifname", "sr-h*"), { drop: null }] },
        ],
      ],
      [
        "an extra match",
        [
          { expr: [ifMatch("iifname", "sr-h*"), ifMatch("oifname", "eth0"), ACCEPT] },
          { expr: [ifMatch("oifname", "sr-h*"), ACCEPT] },
        ],
      ],
      [
        "a name, not a pattern",
        [
          { expr: [ifMatch("iifname", "sr-h0"), ACCEPT] },
          { expr: [ifMatch("oifname", "sr-h0"), ACCEPT] },
        ],
      ],
      ["not a string", [{ expr: [ifMatch("iifname", { set: ["sr-h*"] }), ACCEPT] }]],
      ["null expressions", [{ expr: [null, null] }, { expr: [ifMatch("oifname", "sr-h*"), null] }]],
      ["no expressions", [{ expr: "iifname sr-h* accept" as never }, { expr: [] }]],
      ["a pattern that is not a prefix's", pair('x" drop; #')],
      ["an uppercase prefix", pair("SR-")],
    ];
    for (const [what, rules] of cases) assert.deepEqual(guardPrefixes(rulesJson(rules)), [], what);
  });
});

describe("forwardChains and dockerUserChain", () => {
  const chains = JSON.stringify({
    nftables: [
      { metainfo: {} },
      {
        chain: {
          family: "inet",
          table: GUARD_TABLE,
          name: "forward",
          hook: "forward",
          policy: "accept",
        },
      },
      {
        chain: {
          family: "inet",
          table: "sr-abc",
          name: "forward",
          hook: "forward",
          policy: "accept",
        },
      },
      { chain: { family: "ip", table: "filter", name: "DOCKER-USER" } },
      {
        chain: { family: "ip", table: "filter", name: "FORWARD", hook: "forward", policy: "drop" },
      },
      { chain: { family: "inet", table: "firewalld", name: "filter_FORWARD", hook: "forward" } },
      {
        chain: {
          family: "ip",
          table: "nat",
          name: "POSTROUTING",
          hook: "postrouting",
          policy: "accept",
        },
      },
    ],
  });

  it("lists the host's forward chains, not the guard's or a sandbox table's", () => {
    assert.deepEqual(
      forwardChains(chains, (t) => t.startsWith("sr-")),
      [
        { family: "ip", table: "filter", name: "FORWARD", policy: "drop" },
        { family: "inet", table: "firewalld", name: "filter_FORWARD", policy: "accept" },
      ],
    );
    assert.deepEqual(
      forwardChains("garbage", () => false),
      [],
    );
  });

  it("finds Docker's DOCKER-USER in iptables' filter table of the family only", () => {
    assert.equal(dockerUserChain(chains, "ip"), "DOCKER-USER");
    assert.equal(dockerUserChain(chains, "ip6"), null);
    const elsewhere = JSON.stringify({
      nftables: [
        { chain: { family: "inet", table: "filter", name: "DOCKER-USER" } },
        { chain: { family: "ip", table: "mangle", name: "DOCKER-USER" } },
        { chain: { family: "ip", table: "filter", name: "docker-user" } },
      ],
    });
    assert.equal(dockerUserChain(elsewhere, "ip"), null);
  });
});

describe("renderDockerUserRules", () => {
  const present = (rules: Parameters<typeof rulesJson>[0]) =>
    rulesJson(rules.map((r) => ({ family: "ip", table: "filter", chain: "DOCKER-USER", ...r })));

  it("inserts both accepts at the head of DOCKER-USER when it has neither", () => {
    assert.equal(
      renderDockerUserRules("ip", "sr-", present([{ expr: [{ return: null }] }])),
      'insert rule ip filter DOCKER-USER oifname "sr-h*" accept\n' +
        'insert rule ip filter DOCKER-USER iifname "sr-h*" accept\n',
    );
    assert.match(renderDockerUserRules("ip6", "sr-", ""), /^insert rule ip6 filter DOCKER-USER /);
  });

  it("adds only what is missing, and nothing once both are there (a restart adds no copies)", () => {
    const inOnly = present([{ expr: [ifMatch("iifname", "sr-h*"), ACCEPT] }]);
    assert.equal(
      renderDockerUserRules("ip", "sr-", inOnly),
      'insert rule ip filter DOCKER-USER oifname "sr-h*" accept\n',
    );
    const both = present([
      { expr: [ifMatch("iifname", "sr-h*"), ACCEPT] },
      { expr: [ifMatch("oifname", "sr-h*"), ACCEPT] },
    ]);
    assert.equal(renderDockerUserRules("ip", "sr-", both), "");
  });

  it("a rule that only looks like ours (another prefix, family, table, chain, a drop, an extra match) is not ours", () => {
    for (const [what, rules] of [
      ["another prefix", [{ expr: [ifMatch("iifname", "ab-h*"), ACCEPT] }]],
      ["another family", [{ family: "ip6", expr: [ifMatch("iifname", "sr-h*"), ACCEPT] }]],
      ["another table", [{ table: "nat", expr: [ifMatch("iifname", "sr-h*"), ACCEPT] }]],
      ["another chain", [{ chain: "FORWARD", expr: [ifMatch("iifname", "sr-h*"), ACCEPT] }]],
      ["a drop", [{ expr: [ifMatch("iifname", "sr-h*"), { drop: null }] }]],
      [
        "an extra match",
        [{ expr: [ifMatch("iifname", "sr-h*"), ifMatch("oifname", "eth0"), ACCEPT] }],
      ],
    ] as const)
      assert.match(
        renderDockerUserRules("ip", "sr-", present(rules as never)),
        /iifname "sr-h\*" accept/,
        what,
      );
  });

  it("refuses a prefix that could inject nft syntax", () => {
    assert.throws(() => renderDockerUserRules("ip", 'sr" accept; flush ruleset; #', ""), TypeError);
  });
});
