import { allProcStats, readProcStat } from "../../src/jail/procfs.js";

/** pid -> its children, from /proc's parent links, in the order /proc lists them. */
function childMap(): Map<number, number[]> {
  const children = new Map<number, number[]>();
  for (const p of allProcStats()) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p.pid]);
  return children;
}

/** Every process below `root` (not `root` itself), from /proc's parent links, children first-found order. */
export function descendants(root: number): number[] {
  const children = childMap();
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(root);
  return out;
}

/** The live processes whose parent is `pid`. */
export function childrenOf(pid: number): number[] {
  return childMap().get(pid) ?? [];
}

/** The process exists and is not a zombie. */
export function running(pid: number): boolean {
  const s = readProcStat(pid);
  return s !== null && s.state !== "Z";
}
