/**
 * What setup installs for every user (decision 0018): a world-readable copy of this package and
 * of the packages it needs at run time, never a link into a checkout or npx's cache (both may sit
 * in root's home, which no other user may enter). The copy is found by Node's own resolution from
 * the package's dependencies, so it works from a checkout (whose node_modules also holds the
 * development packages, left out) and from npx's or npm's install alike.
 */
import { createHash } from "node:crypto";
import {
  chmodSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
} from "node:fs";
import { basename, dirname, join, sep } from "node:path";

interface PackageJson {
  name?: string;
  version?: string;
  files?: string[];
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

const readPackage = (dir: string): PackageJson =>
  JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as PackageJson;

/** Where `name` resolves from `from`, as Node looks (each ancestor's node_modules), or null. */
export function findPackageDir(from: string, name: string): string | null {
  for (let dir = from; ; dir = dirname(dir)) {
    if (basename(dir) !== "node_modules") {
      const candidate = join(dir, "node_modules", name);
      if (existsSync(join(candidate, "package.json"))) return candidate;
    }
    if (dirname(dir) === dir) return null;
  }
}

/**
 * Every package the package at `root` needs at run time: its dependencies, and its optional and
 * peer ones that are installed, and theirs, each as the directory Node would load it from.
 */
export function runtimeClosure(root: string): string[] {
  const found = new Set<string>();
  const queue: { from: string; pkg: PackageJson }[] = [{ from: root, pkg: readPackage(root) }];
  while (queue.length > 0) {
    const { from, pkg } = queue.shift()!;
    // A peer is its parent's to provide: taken when installed, never required here (npm may
    // have left an unneeded one out).
    const optional = new Set([
      ...Object.keys(pkg.optionalDependencies ?? {}),
      ...Object.keys(pkg.peerDependencies ?? {}),
    ]);
    const names = new Set([
      ...Object.keys(pkg.dependencies ?? {}),
      ...Object.keys(pkg.optionalDependencies ?? {}),
      ...Object.keys(pkg.peerDependencies ?? {}),
    ]);
    for (const name of names) {
      const dir = findPackageDir(from, name);
      if (dir === null) {
        if (optional.has(name)) continue;
        throw new Error(`${name}, needed by ${pkg.name ?? from}, is not installed`);
      }
      if (found.has(dir)) continue;
      found.add(dir);
      queue.push({ from: dir, pkg: readPackage(dir) });
    }
  }
  return [...found].sort();
}

/**
 * Where each dependency goes in the copy (pure over paths): a package found in the root's
 * node_modules or an ancestor's goes to `node_modules/NAME` of the copy, one nested in another
 * package's node_modules goes below that package's place, so Node resolves the copy as it did
 * the original.
 */
export function placeDependencies(root: string, deps: readonly string[]): Map<string, string> {
  const places = new Map<string, string>();
  const marker = `${sep}node_modules${sep}`;
  const holds = (ancestor: string, dir: string) =>
    ancestor === dir || dir.startsWith(ancestor === sep ? sep : ancestor + sep);
  const place = (dep: string): string => {
    const known = places.get(dep);
    if (known !== undefined) return known;
    // The last node_modules in the path is the one holding it: NAME or @scope/NAME after it.
    const at = dep.lastIndexOf(marker);
    if (at < 0) throw new Error(`${dep} is not in a node_modules directory`);
    const base = dep.slice(0, at) || sep;
    const into = holds(base, root) ? "" : place(base);
    const target = join(into, "node_modules", dep.slice(at + marker.length));
    places.set(dep, target);
    return target;
  };
  for (const dep of deps) place(dep);
  return places;
}

/** The package's own files: package.json, what its "files" names, and what setup built. */
export function packageFiles(root: string): string[] {
  const pkg = readPackage(root);
  const out: string[] = ["package.json"];
  const walk = (rel: string, keep: (f: string) => boolean) => {
    const abs = join(root, rel);
    if (!existsSync(abs)) return;
    if (!statSync(abs).isDirectory()) {
      if (keep(rel)) out.push(rel);
      return;
    }
    for (const name of readdirSync(abs).sort()) walk(join(rel, name), keep);
  };
  for (const entry of [...(pkg.files ?? []), "build/guest", "build/host"]) {
    const glob = entry.indexOf("/**/");
    if (glob >= 0) {
      const suffix = entry.slice(entry.lastIndexOf("*") + 1);
      walk(entry.slice(0, glob), (f) => f.endsWith(suffix));
    } else walk(entry, () => true);
  }
  return [...new Set(out)];
}

/** Every file under `dir` (relative), without its nested node_modules. */
function filesUnder(dir: string, rel = ""): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(dir, rel)).sort()) {
    const r = join(rel, name);
    if (r === "node_modules") continue;
    const st = lstatSync(join(dir, r));
    if (st.isDirectory()) out.push(...filesUnder(dir, r));
    else out.push(r);
  }
  return out;
}

/** Everything the copy holds: source path → path in the copy (both files). */
export function installPlan(root: string): Map<string, string> {
  const plan = new Map<string, string>();
  for (const f of packageFiles(root)) plan.set(join(root, f), f);
  const deps = runtimeClosure(root);
  const places = placeDependencies(root, deps);
  for (const dep of deps)
    for (const f of filesUnder(dep)) plan.set(join(dep, f), join(places.get(dep)!, f));
  return plan;
}

/** A name for the copy that changes when any file does: the version and a digest of the plan. */
export function installId(version: string, plan: Map<string, string>): string {
  const h = createHash("sha256");
  for (const [src, dest] of [...plan].sort((a, b) => (a[1] < b[1] ? -1 : 1))) {
    const st = lstatSync(src);
    h.update(`${dest}\0${st.size}\0${Math.floor(st.mtimeMs)}\0${st.mode}\n`);
  }
  return `${version}-${h.digest("hex").slice(0, 12)}`;
}

/**
 * Copies the plan into `dest` (made beside it and renamed into place, so a copy is whole or
 * absent), keeping mtimes (what the microVM's template keys read) and making every directory
 * 0755 and every file 0644 or, if anyone could run it, 0755.
 */
export function copyPlan(plan: Map<string, string>, dest: string): void {
  const tmp = `${dest}.partial-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  for (const [src, rel] of plan) {
    const to = join(tmp, rel);
    mkdirSync(dirname(to), { recursive: true, mode: 0o755 });
    cpSync(src, to, { preserveTimestamps: true, verbatimSymlinks: true });
    if (!lstatSync(to).isSymbolicLink())
      chmodSync(to, (lstatSync(src).mode & 0o111) !== 0 ? 0o755 : 0o644);
  }
  const dirs = (d: string): void => {
    chmodSync(d, 0o755);
    for (const e of readdirSync(d, { withFileTypes: true }))
      if (e.isDirectory()) dirs(join(d, e.name));
  };
  dirs(tmp);
  renameSync(tmp, dest);
}

/** Whether every directory from / down to `path` lets others through, and `path` is theirs to run. */
export function reachableByOthers(path: string): boolean {
  for (let p = path; ; p = dirname(p)) {
    let st;
    try {
      st = statSync(p);
    } catch {
      return false;
    }
    if ((st.mode & 0o001) === 0) return false;
    if (dirname(p) === p) return true;
  }
}
