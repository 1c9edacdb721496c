/**
 * The egress allowlist's names (src/net/allowlist.ts): the operator's list is refused with an
 * error naming the bad entry; matching is checked against a label-by-label reference model over
 * generated names, with the adversarial near-misses (a suffix without a dot boundary, the bare
 * parent of a wildcard, case and trailing dots, IP literals in every spelling).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  AllowlistError,
  intersectAllowlists,
  isAllowed,
  normaliseHostname,
  parseAllowlist,
  parseAllowlistEntry,
} from "../../src/net/allowlist.js";

const label = fc
  .stringMatching(/^[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?$/)
  .filter((l) => !/^[0-9]+$/.test(l));
const domain = fc.array(label, { minLength: 2, maxLength: 4 }).map((ls) => ls.join("."));

/** Reference: an exact entry matches its labels exactly; `*.d` matches d's labels plus more before. */
function reference(entries: string[], name: string): boolean {
  const n = name.split(".");
  return entries.some((e) => {
    const wild = e.startsWith("*.");
    const d = (wild ? e.slice(2) : e).split(".");
    if (!wild) return n.length === d.length && n.every((x, i) => x === d[i]);
    return n.length > d.length && d.every((x, i) => x === n[n.length - d.length + i]);
  });
}

describe("egress allowlist entries", () => {
  it("accepts names and *. wildcards, normalised", () => {
    const a = parseAllowlist(" PyPI.org, *.GitHub.com  files.pythonhosted.org.,pypi.org\n*.x.y");
    assert.deepEqual(a.entries, ["pypi.org", "*.github.com", "files.pythonhosted.org", "*.x.y"]);
  });

  it("refuses each kind of bad entry, naming it", () => {
    const cases: Array<[string, RegExp]> = [
      ["*", /"\*" would allow every name/],
      ["*.com", /whole top-level domain/],
      ["a.*.com", /only "\*\." at the start/],
      ["*x.com", /only "\*\." at the start/],
      ["https://pypi.org", /not a URL/],
      ["pypi.org/simple", /not a URL/],
      ["pypi.org:443", /not a URL/],
      ["1.2.3.4", /IP addresses cannot be allowed/],
      ["2130706433", /IP addresses cannot be allowed/],
      ["0x7f.1", /IP addresses cannot be allowed/],
      ["[::1]", /IP addresses cannot be allowed/],
      ["fd00::1", /IP addresses cannot be allowed/],
      ["exa_mple..com", /not a domain name/],
      ["-a.com", /not a domain name/],
      ["a-.com", /not a domain name/],
      ["bücher.de", /not a domain name/],
      [`${"a".repeat(64)}.com`, /not a domain name/],
      ["localhost", /not a fully qualified domain name/],
    ];
    for (const [entry, why] of cases) {
      assert.throws(
        () => parseAllowlist(`good.example, ${entry}`),
        (e: unknown) =>
          e instanceof AllowlistError &&
          e.entry === entry &&
          e.message.includes(JSON.stringify(entry)) &&
          why.test(e.message),
        entry,
      );
    }
    assert.throws(() => parseAllowlist(" , "), /names no domain/);
    assert.throws(
      () => parseAllowlist(Array.from({ length: 257 }, (_, i) => `d${i}.example`).join(",")),
      /at most 256/,
    );
  });

  it("property: matching agrees with the label-by-label model", () => {
    const entryArb = fc.tuple(fc.boolean(), domain).map(([w, d]) => (w ? `*.${d}` : d));
    const nameArb = (entries: string[]) =>
      fc.oneof(
        domain,
        // near misses built from the entries: parent, child, glued suffix, other case and a dot
        fc.constantFrom(...entries).chain((e) => {
          const d = e.replace(/^\*\./, "");
          return fc.constantFrom(
            d,
            `x.${d}`,
            `a.b.${d}`,
            `evil${d}`,
            `${d}.evil`,
            d.toUpperCase() + ".",
            d.split(".").slice(1).join("."),
          );
        }),
      );
    fc.assert(
      fc.property(
        fc
          .array(entryArb, { minLength: 1, maxLength: 6 })
          .chain((entries) => fc.tuple(fc.constant(entries), nameArb(entries))),
        ([entries, raw]) => {
          const list = parseAllowlist(entries);
          const name = normaliseHostname(raw);
          fc.pre(name !== null);
          assert.equal(
            isAllowed(list, name),
            reference(list.entries as string[], name),
            `${raw} vs ${entries}`,
          );
        },
      ),
      { numRuns: 3000 },
    );
  });

  it("a wildcard never allows its bare parent nor a name that only ends in the same letters", () => {
    const a = parseAllowlist("*.github.com");
    for (const no of ["github.com", "evilgithub.com", "github.com.evil.net", "xgithub.com"])
      assert.equal(isAllowed(a, normaliseHostname(no) as string), false, no);
    for (const yes of ["api.github.com", "A.B.GitHub.com.", "x-y.github.com"])
      assert.equal(isAllowed(a, normaliseHostname(yes) as string), true, yes);
  });

  it("normaliseHostname: IP literals in any spelling and non-names are not names", () => {
    for (const raw of [
      "1.2.3.4",
      "1.2.3.4.",
      "2130706433",
      "0x7f.1",
      "0177.0.0.1",
      "127.1",
      "[::1]",
      "::ffff:10.0.0.1",
      "fe80::1%eth0",
      "",
      ".",
      "a..b",
      "a b.com",
      "a\u0000b.com",
      "ex\u00e4mple.com",
      "a.b.123",
      `${"a.".repeat(127)}com`,
    ])
      assert.equal(normaliseHostname(raw), null, JSON.stringify(raw));
    assert.equal(normaliseHostname("WWW.Example.COM."), "www.example.com");
    assert.equal(normaliseHostname("1.2.3.4.nip.io"), "1.2.3.4.nip.io");
  });

  it("property: whatever is normalised is lower case, dot-free at the end, and parses as an entry", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (raw) => {
        const n = normaliseHostname(raw);
        if (n === null) return;
        assert.equal(n, n.toLowerCase());
        assert.ok(!n.endsWith("."));
        if (n.includes(".")) assert.equal(parseAllowlistEntry(n), n);
      }),
      { numRuns: 3000 },
    );
  });

  it("property: the intersection of two lists allows exactly what both allow", () => {
    // A few labels, so lists and names overlap often (parents, children, equal wildcards).
    const small = fc.constantFrom("a", "b", "c", "d");
    const dom = fc.array(small, { minLength: 2, maxLength: 4 }).map((ls) => ls.join("."));
    const list = fc.array(
      fc.tuple(fc.boolean(), dom).map(([w, d]) => (w ? `*.${d}` : d)),
      { minLength: 1, maxLength: 5 },
    );
    const name = fc.array(small, { minLength: 2, maxLength: 6 }).map((ls) => ls.join("."));
    fc.assert(
      fc.property(list, list, fc.array(name, { minLength: 1, maxLength: 8 }), (ea, eb, names) => {
        const a = parseAllowlist(ea);
        const b = parseAllowlist(eb);
        const both = intersectAllowlists(a, b);
        for (const n of names)
          assert.equal(
            isAllowed(both, n),
            isAllowed(a, n) && isAllowed(b, n),
            `${n}: [${ea}] and [${eb}] gave [${both.entries}]`,
          );
      }),
      { numRuns: 3000 },
    );
    const wide = parseAllowlist("*.example.com, pypi.org");
    assert.deepEqual(
      [
        ...intersectAllowlists(wide, parseAllowlist("*.a.example.com, example.com, files.pypi.org"))
          .entries,
      ],
      ["*.a.example.com"],
    );
  });
});
