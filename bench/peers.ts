import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Repository root (this file is dist/bench/peers.js once built). */
export const REPO_ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));

/**
 * Peer packages (sandbox-runtime, pyodide, deno) are found in the repository's node_modules when
 * they are devDependencies, else in a side prefix ($BENCH_PEERS_DIR, default
 * /var/cache/scratchrun-bench/peers) installed with `npm install --prefix`, so benchmarking never
 * prunes packages others installed.
 */
export function peersDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  return [
    join(REPO_ROOT, "node_modules"),
    join(env.BENCH_PEERS_DIR ?? "/var/cache/scratchrun-bench/peers", "node_modules"),
  ];
}

/** Absolute path of a file inside an installed package, or null with no install found. */
export function findPeerFile(pkg: string, file: string): string | null {
  for (const dir of peersDirs()) {
    const p = join(dir, pkg, file);
    if (existsSync(p)) return p;
  }
  return null;
}

/** The deno binary the `deno` npm package ships (through @deno/linux-x64-glibc). */
export function findDeno(): string | null {
  return findPeerFile("@deno/linux-x64-glibc", "deno") ?? findPeerFile("deno", "bin.cjs") ?? null;
}
