import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createMicrovmBackend } from "../backends/microvm/backend.js";
import { NamespaceBackend } from "../backends/namespace/backend.js";
import type { Backend } from "../backends/types.js";
import { Engine, type EngineOptions } from "../engine/engine.js";
import { ScratchRunError } from "../errors.js";
import { findRootfs } from "../images/locate.js";
import { detectCgroups, reapStaleEmptyCgroups } from "../jail/cgroup.js";
import type { Manifest } from "../images/manifest.js";
import { MATPLOTLIB_CACHE_DIR, PACKAGE_ROOT } from "../images/paths.js";
import type { AgentFile } from "../protocol/types.js";
import { WORKDIR } from "../schema/limits.js";
import { RUNTIMES, type RuntimeName } from "../schema/exec.js";
import { networkFromEnv } from "./network.js";

export type IsolationChoice = "namespace" | "microvm";

/** Where `npm run build` puts the static agent binary. */
export const AGENT_DIR = join(PACKAGE_ROOT, "build", "guest");

/** The environment with a command line's --isolation laid over SCRATCHRUN_ISOLATION. */
export function withIsolation(env: NodeJS.ProcessEnv, flag: string | undefined): NodeJS.ProcessEnv {
  return flag === undefined ? env : { ...env, SCRATCHRUN_ISOLATION: flag };
}

export function isolationChoice(env: NodeJS.ProcessEnv = process.env): IsolationChoice {
  // The product's promise is a microVM per call: that is the default, KVM where it works, TCG
  // otherwise (every result says which). "namespace" is the faster, weaker choice.
  const v = env.SCRATCHRUN_ISOLATION ?? "microvm";
  if (v === "namespace" || v === "microvm") return v;
  throw new ScratchRunError(
    "NOT_READY",
    `SCRATCHRUN_ISOLATION=${JSON.stringify(v)} is not a backend`,
    {
      fix: 'Set it to "namespace" or "microvm"',
    },
  );
}

/** Checks every precondition of the namespace backend; throws NOT_READY with the fix. */
export function namespacePreflight(env: NodeJS.ProcessEnv = process.env): {
  rootfsDir: string;
  manifest: Manifest;
} {
  if (process.getuid?.() !== 0)
    throw new ScratchRunError(
      "NOT_READY",
      "ScratchRun must run as root to create cgroups and jails",
      {
        fix: "Run it as root (e.g. in a VM or container you control); `scratchrun doctor` lists every check",
      },
    );
  if (!existsSync("/usr/bin/bwrap"))
    throw new ScratchRunError("NOT_READY", "bubblewrap is not installed", {
      fix: "Install it: apt-get install -y bubblewrap",
    });
  if (!existsSync(join(AGENT_DIR, "agent")))
    throw new ScratchRunError("NOT_READY", `the sandbox agent is not built (${AGENT_DIR}/agent)`, {
      fix: "Run `npm run build` in the package directory",
    });
  const rootfs = findRootfs(env);
  if (!rootfs.ok) throw new ScratchRunError("NOT_READY", rootfs.error);
  return { rootfsDir: rootfs.dir, manifest: rootfs.manifest };
}

/**
 * Warm sandboxes per runtime: SCRATCHRUN_POOL_SIZE=N for all, or "python3.11=2,node20=0,...".
 * The namespace backend's jails serve any runtime: its pool holds the largest of these.
 */
export function poolSizes(env: NodeJS.ProcessEnv = process.env): Record<RuntimeName, number> {
  const spec = env.SCRATCHRUN_POOL_SIZE ?? "1";
  const sizes = Object.fromEntries(RUNTIMES.map((r) => [r, 0])) as Record<RuntimeName, number>;
  const bad = () =>
    new ScratchRunError("NOT_READY", `SCRATCHRUN_POOL_SIZE=${JSON.stringify(spec)} is not valid`, {
      fix: 'Give a number (e.g. "2") or runtime=number pairs (e.g. "python3.11=2,bash=1")',
    });
  if (/^\d+$/.test(spec)) {
    for (const r of RUNTIMES) sizes[r] = Number(spec);
    return sizes;
  }
  for (const part of spec.split(",")) {
    const [name, n] = part.split("=");
    if (!name || !n || !/^\d+$/.test(n) || !(RUNTIMES as readonly string[]).includes(name))
      throw bad();
    sizes[name as RuntimeName] = Number(n);
  }
  return sizes;
}

/**
 * matplotlib's font cache as the image build made it, seeded into each python3.11 sandbox's
 * ~/.cache/matplotlib so the first plot does not rescan every font (an image without it: none).
 */
export function matplotlibSeed(rootfsDir: string): AgentFile[] {
  const dir = join(rootfsDir, MATPLOTLIB_CACHE_DIR);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((name) => /^fontlist-v\d+\.json$/.test(name))
    .map((name) => ({
      path: `${WORKDIR}/.cache/matplotlib/${name}`,
      mode: 0o644,
      content: readFileSync(join(dir, name)),
    }));
}

/** Builds the engine the environment asks for; refuses to start rather than downgrade. */
export async function createEngineFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  options: EngineOptions = {},
): Promise<Engine> {
  const choice = isolationChoice(env);
  const { rootfsDir, manifest } = namespacePreflight(env);
  // What dead servers left: empty sandbox cgroups (their processes died with them).
  await reapStaleEmptyCgroups(detectCgroups());
  // Both backends: public egress when the host can give it (a veth per sandbox for the
  // namespace backend, a tap per VM for the microVM backend), else every call runs with "none".
  const network = await networkFromEnv(env);
  let backend: Backend;
  try {
    backend =
      choice === "microvm"
        ? await createMicrovmBackend({
            rootfsDir,
            pool: {
              sizes: poolSizes(env),
              mode: env.SCRATCHRUN_POOL_MODE === "boot" ? "boot" : "restore",
            },
            ...(network.provider ? { network: network.provider } : {}),
          })
        : new NamespaceBackend({
            rootfsDir,
            agentDir: AGENT_DIR,
            // Jails are not per runtime: one pool as deep as the deepest runtime's.
            poolSize: Math.max(...Object.values(poolSizes(env))),
            ...(network.provider ? { network: network.provider } : {}),
          });
  } catch (e) {
    await network.provider?.close();
    throw e;
  }
  return new Engine(backend, {
    publicNetworkAvailable: network.provider !== null,
    networkNote: network.summary,
    networkReason: network.reason,
    onClose: async () => network.provider?.close(),
    runtimes: { runtimes: manifest.runtimes, notes: manifest.notes },
    seedFiles: { "python3.11": matplotlibSeed(rootfsDir) },
    ...options,
  });
}
