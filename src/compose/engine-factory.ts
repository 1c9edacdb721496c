import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createMicrovmBackend } from "../backends/microvm/create.js";
import { reapOrphanVmDirs } from "../backends/microvm/reap-dirs.js";
import { TemplateStore } from "../backends/microvm/template-store.js";
import {
  ensureRootDisk,
  NotBuiltError,
  vmArtifactsIfBuilt,
  type VmArtifacts,
} from "../images/vm/build.js";
import { NamespaceBackend } from "../backends/namespace/backend.js";
import type { Backend } from "../backends/types.js";
import { Engine, type EngineOptions } from "../engine/engine.js";
import { ScratchRunError } from "../errors.js";
import type { Lease } from "../images/lease.js";
import { leaseRootfs, selectRootfs } from "../images/locate.js";
import { detectCgroups, reapStaleEmptyCgroups } from "../jail/cgroup.js";
import { requireRoot } from "../jail/root.js";
import type { Manifest } from "../images/manifest.js";
import { MATPLOTLIB_CACHE_DIR, PACKAGE_ROOT, setupCommand } from "../images/paths.js";
import { preimportFor, type Preimport } from "../images/preimport.js";
import type { AgentFile } from "../protocol/types.js";
import { LIMITS, WORKDIR } from "../schema/limits.js";
import type { SessionLimits } from "../engine/sessions.js";
import { ONCE_CALLED, runtimeEntry, type Seed } from "../runtimes/table.js";
import { RUNTIMES, type RuntimeName } from "../schema/exec.js";
import { homedir } from "node:os";
import { hostCeiling, type Ceiling } from "../policy/host.js";
import type { CallPolicy } from "../schema/policy.js";
import { serverLimitsWithin, serverPolicy } from "../policy/server-policy.js";
import { jailReadableAgentDir } from "./agent-dir.js";
import { egressAllowlistFromEnv, networkFromEnv } from "./network.js";
import { setting, settingOn } from "../schema/settings/read.js";
import { settingsFrom } from "../schema/settings/values.js";

export type IsolationChoice = "namespace" | "microvm";

/** Where `npm run build` puts the static agent binary. */
export const AGENT_DIR = join(PACKAGE_ROOT, "build", "guest");

/** The environment with a command line's --isolation laid over SCRATCHRUN_ISOLATION. */
export function withIsolation(env: NodeJS.ProcessEnv, flag: string | undefined): NodeJS.ProcessEnv {
  return flag === undefined ? env : { ...env, SCRATCHRUN_ISOLATION: flag };
}

/** The environment with a command line's --egress-allow laid over SCRATCHRUN_EGRESS_ALLOW. */
export function withEgressAllow(
  env: NodeJS.ProcessEnv,
  flag: string | undefined,
): NodeJS.ProcessEnv {
  return flag === undefined ? env : { ...env, SCRATCHRUN_EGRESS_ALLOW: flag };
}

export function isolationChoice(env: NodeJS.ProcessEnv = process.env): IsolationChoice {
  // The product's promise is a microVM per call: that is the default, KVM where it works, TCG
  // otherwise (every result says which). "namespace" is the faster, weaker choice.
  const v = setting("SCRATCHRUN_ISOLATION", env);
  if (v === "namespace" || v === "microvm") return v;
  throw new ScratchRunError(
    "NOT_READY",
    `SCRATCHRUN_ISOLATION=${JSON.stringify(v)} is not a backend`,
    {
      fix: 'Set it to "namespace" or "microvm"',
    },
  );
}

export interface Preflight {
  rootfsDir: string;
  manifest: Manifest;
  /** Why the served image is not the current image config's (it fell back), or null. */
  stale: string | null;
}

/**
 * Checks every precondition of the namespace backend and picks the image to serve (the current
 * recipe's, or the last one built when only the image config is unbuilt or bad); throws
 * NOT_READY with the fix.
 */
export function namespacePreflight(env: NodeJS.ProcessEnv = process.env): Preflight {
  requireRoot();
  if (!existsSync("/usr/bin/bwrap"))
    throw new ScratchRunError("NOT_READY", "bubblewrap is not installed", {
      fix: "Install it: apt-get install -y bubblewrap",
    });
  if (!existsSync(join(AGENT_DIR, "agent")))
    throw new ScratchRunError("NOT_READY", `the sandbox agent is not built (${AGENT_DIR}/agent)`, {
      fix: `Run ${setupCommand()}`,
    });
  const rootfs = selectRootfs(settingsFrom(env).images);
  if (!rootfs.ok)
    throw new ScratchRunError("NOT_READY", rootfs.error, { fix: `Run ${setupCommand()}` });
  return { rootfsDir: rootfs.dir, manifest: rootfs.manifest, stale: rootfs.stale };
}

/**
 * The runtimes whose pools wait for their first call (the table's "once-called" ones), unless
 * SCRATCHRUN_POOL_SIZE names them ("python3.13=1": kept from the start).
 */
export function poolOnceCalled(env: NodeJS.ProcessEnv = process.env): RuntimeName[] {
  const named = new Set(
    setting("SCRATCHRUN_POOL_SIZE", env)
      .split(",")
      .map((part) => part.split("=")[0]?.trim()),
  );
  return ONCE_CALLED.filter((r) => !named.has(r));
}

/**
 * Warm sandboxes per runtime: SCRATCHRUN_POOL_SIZE=N for all, or "python3.11=2,node20=0,...".
 * A runtime the table pools "once-called" gets its size from its first call on (poolOnceCalled).
 * Both backends keep this many per runtime (and per flavour; the namespace backend's jails per
 * network mode too).
 */
export function poolSizes(env: NodeJS.ProcessEnv = process.env): Record<RuntimeName, number> {
  const spec = setting("SCRATCHRUN_POOL_SIZE", env);
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
 * matplotlib's font cache as the image build made it, seeded into each sandbox of a runtime whose
 * table entry asks for it (python3.11's ~/.cache/matplotlib) so the first plot does not rescan
 * every font (an image without it: none).
 */
export function matplotlibSeed(rootfsDir: string): AgentFile[] {
  const dir = join(rootfsDir, MATPLOTLIB_CACHE_DIR);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((name) => /^fontlist-v\d+(\.\d+)*\.json$/.test(name))
    .map((name) => ({
      path: `${WORKDIR}/.cache/matplotlib/${name}`,
      mode: 0o644,
      content: readFileSync(join(dir, name)),
    }));
}

/** How each seed of the runtime table is read from the image. */
const SEEDS: Record<Seed, (rootfsDir: string) => AgentFile[]> = {
  "matplotlib-font-cache": matplotlibSeed,
};

/** The files each runtime's calls start with, per the runtime table (runtimes seeding nothing absent). */
export function seedFiles(rootfsDir: string): Partial<Record<RuntimeName, AgentFile[]>> {
  return Object.fromEntries(
    RUNTIMES.filter((r) => runtimeEntry(r).seeds.length > 0).map((r) => [
      r,
      runtimeEntry(r).seeds.flatMap((seed) => SEEDS[seed](rootfsDir)),
    ]),
  );
}

/** Where the agent is copied when its build directory is private (see jailReadableAgentDir). */
function agentCacheRoot(): string {
  return process.getuid?.() === 0
    ? "/var/cache/scratchrun/agent"
    : join(homedir(), ".cache", "scratchrun", "agent");
}

/** The microVM's kernel, initramfs and root disk as setup built them; NOT_READY if missing. */
function builtVmImages(
  rootfsDir: string,
  cacheRoot: string,
): { artifacts: VmArtifacts; disk: string } {
  try {
    return {
      artifacts: vmArtifactsIfBuilt({ cacheRoot }),
      disk: ensureRootDisk(rootfsDir, cacheRoot, false),
    };
  } catch (e) {
    if (!(e instanceof NotBuiltError)) throw e;
    throw new ScratchRunError("NOT_READY", e.message, { fix: `Run ${setupCommand()}` });
  }
}

/**
 * What each runtime's pre-imported interpreter imports, from what the image's manifest says is
 * installed in it (src/images/preimport.ts); SCRATCHRUN_PREIMPORT=0 turns pre-imports off.
 */
export function preimportsOf(
  manifest: Manifest,
  env: NodeJS.ProcessEnv = process.env,
): Partial<Record<RuntimeName, Preimport>> {
  if (!settingOn("SCRATCHRUN_PREIMPORT", env)) return {};
  const out: Partial<Record<RuntimeName, Preimport>> = {};
  for (const runtime of RUNTIMES) {
    const p = preimportFor(manifest.runtimes[runtime], WORKDIR);
    if (p) out[runtime] = p;
  }
  return out;
}

/**
 * Builds the engine the environment asks for; refuses to start rather than downgrade.
 * `prepare: "existing"` (the stdio MCP server) builds nothing: missing microVM images are a
 * NOT_READY naming the setup command, so a client's initialize never waits on a build.
 */
export async function createEngineFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  options: EngineOptions = {},
  prepare: "build" | "existing" = "build",
): Promise<Engine> {
  const choice = isolationChoice(env);
  // Raised limits are checked against this host's RAM before anything else happens.
  const ceiling = hostCeiling();
  // A bad allowlist entry is a configuration error: said before anything else happens.
  egressAllowlistFromEnv(env);
  const policy = serverPolicy(serverLimitsWithin(settingsFrom(env).serverMaxima, ceiling));
  const { rootfsDir, manifest, stale } = namespacePreflight(env);
  // This server serves this image until it stops: no build's prune removes it meanwhile.
  let lease: Lease;
  try {
    lease = leaseRootfs(rootfsDir);
  } catch (e) {
    throw new ScratchRunError("NOT_READY", (e as Error).message);
  }
  if (stale) process.stderr.write(`scratchrun: warning: ${stale}\n`);
  try {
    return await engineOn(env, options, prepare, choice, { rootfsDir, manifest, stale }, lease, {
      policy,
      ceiling,
    });
  } catch (e) {
    lease.release();
    throw e;
  }
}

async function engineOn(
  env: NodeJS.ProcessEnv,
  options: EngineOptions,
  prepare: "build" | "existing",
  choice: IsolationChoice,
  { rootfsDir, manifest, stale }: Preflight,
  lease: Lease,
  { policy, ceiling }: { policy: CallPolicy; ceiling: Ceiling },
): Promise<Engine> {
  const settings = settingsFrom(env);
  const vmCache = settings.images.vmCache;
  const vmImages =
    choice === "microvm" && prepare === "existing" ? builtVmImages(rootfsDir, vmCache) : {};
  // What dead servers left: empty sandbox cgroups (their processes died with them) and their VMs'
  // private directories.
  await reapStaleEmptyCgroups(detectCgroups());
  reapOrphanVmDirs();
  // Both backends: public egress when the host can give it (a veth per sandbox for the
  // namespace backend, a tap per VM for the microVM backend), else every call runs with "none".
  const network = await networkFromEnv(env);
  const preimport = preimportsOf(manifest, env);
  let backend: Backend;
  try {
    backend =
      choice === "microvm"
        ? await createMicrovmBackend({
            rootfsDir,
            ...vmImages,
            vmCache,
            ...(settings.accel ? { accel: settings.accel } : {}),
            pool: {
              sizes: poolSizes(env),
              onceCalled: poolOnceCalled(env),
              mode: setting("SCRATCHRUN_POOL_MODE", env) === "boot" ? "boot" : "restore",
            },
            preimport,
            templateStore: templateStoreFromEnv(env),
            ...(network.provider ? { network: network.provider } : {}),
          })
        : new NamespaceBackend({
            rootfsDir,
            agentDir: jailReadableAgentDir(AGENT_DIR, agentCacheRoot()),
            poolSizes: poolSizes(env),
            poolOnceCalled: poolOnceCalled(env),
            preimport,
            debugJail: settings.debugJail,
            ...(network.provider ? { network: network.provider } : {}),
          });
  } catch (e) {
    await network.provider?.close();
    throw e;
  }
  return new Engine(backend, {
    policy,
    ceiling,
    publicNetworkAvailable: network.provider !== null,
    egressAllowlist: network.allowlist,
    networkNote: network.summary,
    networkReason: network.reason,
    ...(network.unavailable ? { networkUnavailable: network.unavailable } : {}),
    onClose: async () => {
      await network.provider?.close();
      lease.release();
    },
    runtimes: {
      runtimes: manifest.runtimes,
      notes: stale ? [...manifest.notes, stale] : manifest.notes,
      ...(manifest.extras ? { extras: manifest.extras } : {}),
    },
    seedFiles: seedFiles(rootfsDir),
    preimport,
    sessions: sessionLimitsFromEnv(env),
    ...options,
  });
}

/**
 * The server's session limits (SCRATCHRUN_SESSIONS_MAX, SCRATCHRUN_SESSIONS_PER_KEY, and the
 * memory they may hold: SCRATCHRUN_SESSIONS_MEMORY_MB, SCRATCHRUN_SESSIONS_PER_KEY_MEMORY_MB).
 */
export function sessionLimitsFromEnv(env: NodeJS.ProcessEnv): SessionLimits {
  const count = (
    name:
      | "SCRATCHRUN_SESSIONS_MAX"
      | "SCRATCHRUN_SESSIONS_PER_KEY"
      | "SCRATCHRUN_SESSIONS_MEMORY_MB"
      | "SCRATCHRUN_SESSIONS_PER_KEY_MEMORY_MB",
    fallback: number,
  ) => {
    const raw = setting(name, env);
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isInteger(n) || n < 0)
      throw new ScratchRunError(
        "INVALID_INPUT",
        `${name} must be a whole number >= 0, not "${raw}"`,
      );
    return n;
  };
  return {
    perServer: count("SCRATCHRUN_SESSIONS_MAX", LIMITS.session.perServer),
    perCaller: count("SCRATCHRUN_SESSIONS_PER_KEY", LIMITS.session.perCaller),
    memoryMbPerServer: count("SCRATCHRUN_SESSIONS_MEMORY_MB", LIMITS.session.memoryMbPerServer),
    memoryMbPerCaller: count(
      "SCRATCHRUN_SESSIONS_PER_KEY_MEMORY_MB",
      LIMITS.session.memoryMbPerCaller,
    ),
  };
}

/**
 * SCRATCHRUN_TEMPLATE_CACHE: where microVM snapshot templates are kept across restarts ("on",
 * the default: `templates/` in the VM cache; "off"; or an absolute directory).
 */
export function templateStoreFromEnv(env: NodeJS.ProcessEnv): TemplateStore | null {
  const v = setting("SCRATCHRUN_TEMPLATE_CACHE", env) ?? "on";
  if (v === "off") return null;
  if (v === "on") return new TemplateStore(join(settingsFrom(env).images.vmCache, "templates"));
  if (!v.startsWith("/"))
    throw new ScratchRunError(
      "INVALID_INPUT",
      `SCRATCHRUN_TEMPLATE_CACHE is on, off or an absolute directory, not ${JSON.stringify(v)}`,
    );
  return new TemplateStore(v);
}
