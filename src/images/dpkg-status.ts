/**
 * dpkg's database (/var/lib/dpkg/status) as data, for two build decisions: which of purge.txt's
 * packages an operator's extra package still needs (those stay), and whether every requested
 * package is installed at the version asked. Pure functions over the file's text.
 */

export interface InstalledPackage {
  name: string;
  version: string;
  /** Alternative groups of Depends and Pre-Depends: each inner list is "a | b | c". */
  depends: string[][];
  provides: string[];
}

/** The name in one dependency alternative: "libc6:amd64 (>= 2.34) [amd64]" -> "libc6". */
function depName(alt: string): string {
  return (alt.trim().split(/[\s(:[<]/, 1)[0] ?? "").trim();
}

function depGroups(field: string | undefined): string[][] {
  if (!field) return [];
  return field
    .split(",")
    .map((group) => group.split("|").map(depName).filter(Boolean))
    .filter((g) => g.length > 0);
}

/** The installed packages of a dpkg status file (others, e.g. config-files only, are left out). */
export function parseDpkgStatus(text: string): Map<string, InstalledPackage> {
  const out = new Map<string, InstalledPackage>();
  for (const stanza of text.split(/\n\s*\n/)) {
    const fields = new Map<string, string>();
    let last = "";
    for (const line of stanza.split("\n")) {
      if (/^\s/.test(line) && last) fields.set(last, `${fields.get(last) ?? ""}\n${line}`);
      else {
        const colon = line.indexOf(":");
        if (colon <= 0) continue;
        last = line.slice(0, colon);
        fields.set(last, line.slice(colon + 1).trim());
      }
    }
    const name = fields.get("Package");
    if (!name || !/\binstalled$/.test(fields.get("Status") ?? "")) continue;
    out.set(name, {
      name,
      version: fields.get("Version") ?? "",
      depends: [...depGroups(fields.get("Pre-Depends")), ...depGroups(fields.get("Depends"))],
      provides: (fields.get("Provides") ?? "").split(",").map(depName).filter(Boolean),
    });
  }
  return out;
}

/**
 * `roots` and everything installed they depend on, transitively (Depends and Pre-Depends; of an
 * alternative group the first installed alternative, by name or by what a package provides).
 */
export function dependencyClosure(
  roots: readonly string[],
  installed: ReadonlyMap<string, InstalledPackage>,
): Set<string> {
  const providers = new Map<string, string[]>();
  for (const p of installed.values())
    for (const v of p.provides) providers.set(v, [...(providers.get(v) ?? []), p.name]);
  const resolve = (name: string): string[] =>
    installed.has(name) ? [name] : (providers.get(name) ?? []);
  const seen = new Set<string>();
  const todo = roots.flatMap(resolve);
  while (todo.length > 0) {
    const name = todo.pop()!;
    if (seen.has(name)) continue;
    seen.add(name);
    for (const group of installed.get(name)?.depends ?? []) {
      const hit = group.map(resolve).find((r) => r.length > 0);
      if (hit) todo.push(...hit);
    }
  }
  return seen;
}

/**
 * What to purge: the wanted packages that are installed, except those the operator's packages
 * need (asking for python3-sympy keeps it; a package needing perl keeps perl).
 */
export function purgeList(
  wanted: readonly string[],
  installed: ReadonlyMap<string, InstalledPackage>,
  keepRoots: readonly string[],
): string[] {
  const keep = dependencyClosure(keepRoots, installed);
  return wanted.filter((p) => installed.has(p) && !keep.has(p));
}
