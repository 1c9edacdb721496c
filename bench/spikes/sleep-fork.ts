/**
 * Issue 52's spike (docs/decisions/0020-sleep-and-fork.md, slice 1): facts, not product code.
 * A python session VM (a clone of the python3.11 template, memory_mb 512) makes a 100 MB NumPy
 * array and an 8 MiB file; then, with the VM stopped:
 *   (a) its device state without RAM (QMP xen-save-devices-state), loaded into a new QEMU whose RAM
 *       is the same template memfd mapped private, through the clones' own restore path
 *       (restoreClone: migrate-incoming of the state stream);
 *   (b) the pages of its RAM that are its own (anonymous in QEMU's private mapping of the memfd,
 *       from /proc/PID/pagemap), read through /proc/PID/mem, written to a 0600 image with fsync;
 *       put back into the new QEMU through /proc/PID/mem before (a)'s load;
 * then the woken session's cell checks the array's sum and the file's SHA-256.
 * Each step timed, `--rounds` times (default 3) from the same source. As root, after tsc:
 *   node dist/bench/spikes/sleep-fork.js [--rounds N] [--json FILE] [--images DIR] [--vm-cache DIR]
 * (--images: the images directory whose `active` image it boots; --vm-cache: the VM cache, where
 * the images are written, under sessions-spike/, and removed.)
 */
import { createHash, randomBytes } from "node:crypto";
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync } from "node:fs";
import { rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { Teardowns } from "../../src/backends/call.js";
import { detectAccel, hostTscKhz, isolationOf } from "../../src/backends/microvm/accel.js";
import { templateRamBytes } from "../../src/backends/microvm/snapshot.js";
import { TemplateCache } from "../../src/backends/microvm/template-cache.js";
import { Qmp } from "../../src/backends/microvm/qmp.js";
import { restoreClone } from "../../src/backends/microvm/vm-snapshot.js";
import type { MicroVm } from "../../src/backends/microvm/vm.js";
import * as start from "../../src/backends/microvm/vm-start.js";
import type { HostContext, StartMode } from "../../src/backends/microvm/vm-types.js";
import { sessionSandbox } from "../../src/backends/session.js";
import type { SessionSandbox } from "../../src/backends/types.js";
import { UndoStack } from "../../src/backends/undo.js";
import { toAgentRequest } from "../../src/engine/request.js";
import { buildVmArtifacts, ensureRootDisk } from "../../src/images/vm/build.js";
import { takeLease } from "../../src/images/lease.js";
import { detectCgroups, type Cgroup } from "../../src/jail/cgroup.js";
import { UidPool, SANDBOX_UID_BASE, SANDBOX_UID_COUNT } from "../../src/jail/uids.js";
import { CODE_UID } from "../../src/protocol/guest-header.js";
import { parseExecRequest } from "../../src/schema/validate.js";
import { runtimeEntry } from "../../src/runtimes/table.js";
import { LIMITS } from "../../src/schema/limits.js";
import * as pages from "./session-pages.js";

const RUNTIME = "python3.11";
const MEMORY_MB = 512;
const BOOT_TIMEOUT_MS = 180_000;
/** Where the guest has the session kernel script (as openVmSession says it). */
const KERNEL = `/run/scratchrun-${runtimeEntry(RUNTIME).sessionScript ?? ""}`;

const MAKE = [
  "import hashlib, os",
  "import numpy as np",
  "a = np.random.default_rng(52).random(100 * 2**20 // 8)",
  "with open('/home/user/blob.bin', 'wb') as f: f.write(os.urandom(8 * 2**20))",
  "kept = 'kept-52'",
].join("\n");
const PROBE =
  "print(repr(float(a.sum())), kept, hashlib.sha256(open('/home/user/blob.bin','rb').read()).hexdigest())";

const ms = (t0: number) => Math.round((performance.now() - t0) * 10) / 10;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      rounds: { type: "string", default: "3" },
      json: { type: "string" },
      // Root's defaults (src/images/paths.ts, src/images/vm/build.ts): the image setup built.
      images: { type: "string", default: "/var/cache/scratchrun/images" },
      "vm-cache": { type: "string", default: "/var/cache/scratchrun/vm" },
    },
  });
  const rounds = Number(values.rounds);
  const cacheRoot = values["vm-cache"];
  const rootfs = join(values.images, readFileSync(join(values.images, "active"), "utf8").trim());
  const artifacts = buildVmArtifacts({ cacheRoot });
  const disk = ensureRootDisk(rootfs, cacheRoot);
  const lease = takeLease(dirname(dirname(artifacts.kernel)), [dirname(artifacts.kernel), disk]);
  const accel = await detectAccel(artifacts.kernel, artifacts.initramfs);
  const ctx: HostContext = {
    ...{ artifacts, disk, accel, tscKhz: hostTscKhz(), cgroups: detectCgroups() },
    uids: new UidPool(SANDBOX_UID_BASE + SANDBOX_UID_COUNT, 1024),
    kvmGid: null,
    scratchMb: LIMITS.scratchMb,
  };
  const closing = new AbortController();
  const templates = new TemplateCache({
    ...{ ctx, bootTimeoutMs: BOOT_TIMEOUT_MS, store: null, keptMemoryMb: 0, preimport: {} },
    signal: closing.signal,
  });
  const teardowns = new Teardowns();
  const imageDir = join(cacheRoot, "sessions-spike");
  let source: { vm: MicroVm; sandbox: SessionSandbox } | null = null;
  try {
    const t0 = performance.now();
    const t = await templates.get({ runtime: RUNTIME, memoryMb: MEMORY_MB, flavour: "plain" });
    console.log(`template ${RUNTIME}/${MEMORY_MB}: ${ms(t0)} ms (accel ${accel})`);
    source = await sourceSession(ctx, t.image, teardowns);
    const made = await cell(source.sandbox, MAKE);
    console.log(`source: made the array and the file in ${made.ms} ms`);
    const before = await cell(source.sandbox, PROBE);
    console.log(`source probe: ${before.ms} ms: ${before.out}`);
    const srcMem = (await source.vm.stats()).memoryBytes;
    mkdirSync(imageDir, { recursive: true, mode: 0o700 });
    const results = [];
    for (let r = 0; r < rounds; r++) {
      const dump = await dumpSession(source.vm, t.image.ramFd, imageDir, r === 0);
      console.log(JSON.stringify(dump.report));
      const wake = await wakeSession(ctx, t.image, dump, teardowns);
      const same = wake.probe.out === before.out;
      console.log(JSON.stringify({ round: r, ...dump.report, ...wake.report, same }));
      rmSync(dump.file, { force: true });
      results.push({ ...dump.report, ...wake.report, same, probeBeforeMs: before.ms });
      if (!same) throw new Error(`woken session answered ${wake.probe.out}`);
    }
    // The source goes on unchanged after its dumps.
    const after = await cell(source.sandbox, PROBE);
    const summary = {
      host: { accel, cpus: (await import("node:os")).availableParallelism() },
      runtime: RUNTIME,
      memoryMb: MEMORY_MB,
      sourceCgroupBytes: srcMem,
      sourceAfterDumpsSame: after.out === before.out,
      rounds: results,
    };
    console.log(JSON.stringify(summary, null, 2));
    if (values.json) writeFileSync(values.json, `${JSON.stringify(summary, null, 2)}\n`);
  } finally {
    await source?.sandbox.close();
    await teardowns.drain();
    closing.abort();
    await templates.close();
    rmSync(imageDir, { recursive: true, force: true });
    lease.release();
  }
}

/** A session VM as openVmSession makes one: a clone, activated, kept under QMP, stopped. */
async function sourceSession(
  ctx: HostContext,
  image: Extract<StartMode, { kind: "clone" }>["image"],
  teardowns: Teardowns,
): Promise<{ vm: MicroVm; sandbox: SessionSandbox }> {
  const vm = await start.startMicroVm(
    ctx,
    { memoryMb: MEMORY_MB, readyTimeoutMs: BOOT_TIMEOUT_MS, priority: "call" },
    { kind: "clone", image },
  );
  await vm.activate(BOOT_TIMEOUT_MS, "none");
  await vm.keepControl();
  await vm.pause();
  const sandbox = sessionSandbox(
    {
      ...{ input: vm.channel, output: vm.channel, kernel: KERNEL },
      ...{ prestarted: "plain", ownClock: true, exited: vm.exited },
      counters: async () => ({ oomKills: 0 }),
      pause: () => vm.pause(),
      resume: () => vm.resume(),
      kill: () => vm.kill(),
      destroy: () => vm.destroy(),
    },
    { isolation: isolationOf(ctx.accel), teardowns },
  );
  return { vm, sandbox };
}

/** Runs one cell; its stdout (trimmed) and the host-side time to its answer. */
async function cell(s: SessionSandbox, code: string): Promise<{ out: string; ms: number }> {
  const req = toAgentRequest(
    parseExecRequest({ runtime: RUNTIME, code, timeout_ms: 30_000 }),
    CODE_UID,
  );
  const t0 = performance.now();
  const r = await s.run(req, { signal: new AbortController().signal });
  const took = ms(t0);
  const out = Buffer.from(r.agent.stdout).toString().trim();
  if (r.agent.exit?.value !== 0 || r.agent.failure)
    throw new Error(
      `cell failed: ${out} ${Buffer.from(r.agent.stderr).toString()} ${JSON.stringify(r.agent.failure)}`,
    );
  return { out, ms: took };
}

interface Dump {
  file: string;
  digest: Buffer;
  report: Record<string, number>;
}

/**
 * The stopped session VM's device state (xen-save-devices-state: no RAM), its own pages (pagemap)
 * and their bytes (/proc/PID/mem), written as header + state + index + non-zero pages, fsynced.
 */
async function dumpSession(
  vm: MicroVm,
  templateFd: number,
  dir: string,
  check: boolean,
): Promise<Dump> {
  // Spike only: the session's QMP connection (MicroVm.dumpSession() would own this).
  const qmp = (vm as unknown as { phase: { qmp: Qmp } }).phase.qmp;
  const vmDir = (vm as unknown as { dir: string }).dir;
  const report: Record<string, number> = {};
  let t = performance.now();
  // The load side (restoreClone) sets x-ignore-shared, and QEMU checks that the stream's
  // capabilities match the destination's: the source says it too (it migrates nothing else).
  await qmp.execute("migrate-set-capabilities", {
    capabilities: [{ capability: "x-ignore-shared", state: true }],
  });
  await qmp.execute("xen-save-devices-state", { filename: "/run/vm/devstate", live: false });
  const state = readFileSync(join(vmDir, "devstate"));
  rmSync(join(vmDir, "devstate"));
  report.stateMs = ms(t);
  report.stateBytes = state.length;
  t = performance.now();
  const pid = pages.qemuPid(await vm.pids());
  const map = pages.ramMapping(pid, templateRamBytes(MEMORY_MB));
  const scan = pages.scanPages(pid, map);
  report.scanMs = ms(t);
  report.ramPages = map.bytes / pages.PAGE;
  report.ownPages = scan.own.length;
  report.sharedPages = scan.shared;
  report.absentPages = scan.absent;
  t = performance.now();
  const { data, zero } = pages.readPages(pid, map, scan.own);
  report.readMs = ms(t);
  report.zeroPages = zero.reduce((n, z) => n + z, 0);
  t = performance.now();
  const file = join(dir, `${randomBytes(16).toString("hex")}.img`);
  writeImage(file, state, scan.own, zero, data);
  report.writeFsyncMs = ms(t);
  // The digest the server would keep in memory: of the whole file as written (timed apart).
  t = performance.now();
  const digest = createHash("sha256").update(readFileSync(file)).digest();
  report.sha256Ms = ms(t);
  report.imageBytes = statSync(file).size;
  report.dumpMs =
    report.stateMs + report.scanMs + report.readMs + report.writeFsyncMs + report.sha256Ms;
  if (check) {
    t = performance.now();
    const c = pages.checkScan(pid, map, templateFd, scan);
    report.checkMs = ms(t);
    report.differingPages = c.differing;
    report.missedPages = c.missed;
    report.ownUnchangedPages = c.unchanged;
  }
  return { file, digest, report };
}

/** header (JSON, 4096) + state (padded) + index (u64 BE, bit 63 zero page) + non-zero pages. */
function writeImage(
  file: string,
  state: Buffer,
  own: Uint32Array,
  zero: Uint8Array,
  data: Buffer,
): void {
  const pad = (n: number) => Math.ceil(n / pages.PAGE) * pages.PAGE;
  const header = Buffer.alloc(pages.PAGE);
  header.write(JSON.stringify({ format: 1, stateBytes: state.length, pages: own.length }));
  const index = Buffer.alloc(pad(own.length * 8));
  own.forEach((p, i) => index.writeBigUInt64BE(BigInt(p) | (zero[i] ? 1n << 63n : 0n), i * 8));
  const tmp = `${file}.tmp-${process.pid}`;
  const fd = openSync(tmp, "wx", 0o600);
  try {
    writeAll(fd, header);
    writeAll(fd, Buffer.concat([state, Buffer.alloc(pad(state.length) - state.length)]));
    writeAll(fd, index);
    for (let i = 0; i < own.length; i++)
      if (!zero[i]) writeAll(fd, data.subarray(i * pages.PAGE, (i + 1) * pages.PAGE));
    fsyncSync(fd);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
}

function writeAll(fd: number, b: Buffer): void {
  for (let at = 0; at < b.length;) at += writeSync(fd, b, at, b.length - at);
}

/**
 * Parses an image read back: the device state, and each page's place in guest RAM with where its
 * bytes are in the file (null: an all-zero page).
 */
function parseImage(all: Buffer): { state: Buffer; entries: [number, number | null][] } {
  const h = JSON.parse(all.subarray(0, pages.PAGE).toString().replace(/\0+$/, "")) as {
    stateBytes: number;
    pages: number;
  };
  const pad = (n: number) => Math.ceil(n / pages.PAGE) * pages.PAGE;
  let at = pages.PAGE;
  const state = all.subarray(at, at + h.stateBytes);
  at += pad(h.stateBytes);
  const entries: [number, number | null][] = [];
  let src = at + pad(h.pages * 8);
  for (let i = 0; i < h.pages; i++) {
    const e = all.readBigUInt64BE(at + i * 8);
    const zero = e >> 63n !== 0n;
    entries.push([Number(e & 0xffffffffn), zero ? null : src]);
    if (!zero) src += pages.PAGE;
  }
  if (src !== all.length) throw new Error("image size differs from its header");
  return { state, entries };
}

/**
 * Writes an image's pages into QEMU's RAM mapping straight from the file's bytes: one pwrite per
 * run of pages consecutive both in guest RAM and in the file, one per all-zero page.
 */
function putPages(
  pid: number,
  map: { start: number },
  all: Buffer,
  entries: [number, number | null][],
): void {
  const zero = Buffer.alloc(pages.PAGE);
  const fd = openSync(`/proc/${pid}/mem`, "r+");
  try {
    for (let i = 0; i < entries.length;) {
      const [first, src] = entries[i]!;
      let n = 1;
      while (src !== null && i + n < entries.length) {
        const [p, s] = entries[i + n]!;
        if (p !== first + n || s !== src + n * pages.PAGE) break;
        n++;
      }
      const from = src === null ? zero : all.subarray(src, src + n * pages.PAGE);
      for (let put = 0; put < from.length;)
        put += writeSync(fd, from, put, from.length - put, map.start + first * pages.PAGE + put);
      i += n;
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * A new QEMU as a clone of the same template (vm-start.ts's steps uid, dir, cgroup, channel,
 * spawn), the image's pages written into its RAM, its device state loaded through restoreClone,
 * then one cell.
 */
async function wakeSession(
  ctx: HostContext,
  image: Extract<StartMode, { kind: "clone" }>["image"],
  dump: Dump,
  teardowns: Teardowns,
): Promise<{ report: Record<string, number>; probe: { out: string; ms: number } }> {
  const report: Record<string, number> = {};
  const undo = new UndoStack();
  const opts = { memoryMb: MEMORY_MB, readyTimeoutMs: BOOT_TIMEOUT_MS, priority: "call" as const };
  const mode: StartMode = { kind: "clone", image };
  let cgroup: Cgroup | null = null;
  try {
    const t0 = performance.now();
    let t = t0;
    const ids = start.takeUid(ctx, undo);
    const dir = start.makeRunDir(ids, undo);
    cgroup = await start.makeCgroup(ctx, `vm-${randomBytes(6).toString("hex")}`, opts, mode, undo);
    const listener = await start.listenChannel(dir, ids, undo);
    const { child } = start.spawnQemu(ctx, { ids, dir, cgroup, net: null, opts, mode });
    const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
    let stderr = "";
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (d: string) => (stderr = (stderr + d).slice(-2000)));
    undo.push(() => stderr && console.log(`woken QEMU said: ${stderr.trim()}`));
    const q = {
      get dead() {
        return child.exitCode !== null || child.signalCode !== null;
      },
      exited,
    };
    const cg = cgroup;
    undo.push(async () => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // gone
      }
      await cg.killAll();
      await exited;
    });
    const deadline = Date.now() + BOOT_TIMEOUT_MS;
    const qmp = await Qmp.over(await start.connectRetry(join(dir, "qmp.sock"), q, deadline));
    undo.push(() => qmp.close());
    const channel = await listener.accepted;
    undo.push(() => channel.destroy());
    report.spawnMs = ms(t);
    t = performance.now();
    const all = readFileSync(dump.file);
    report.readImageMs = ms(t);
    t = performance.now();
    if (!createHash("sha256").update(all).digest().equals(dump.digest))
      throw new Error("image digest differs");
    const img = parseImage(all);
    report.hashParseMs = ms(t);
    t = performance.now();
    const pid = pages.qemuPid(await cgroup.pids());
    const map = pages.ramMapping(pid, templateRamBytes(MEMORY_MB));
    putPages(pid, map, all, img.entries);
    report.writePagesMs = ms(t);
    t = performance.now();
    await restoreClone(qmp, pages.withConfiguration(image.state, img.state), () =>
      start.connectRetry(join(dir, "state.sock"), q, deadline),
    );
    report.loadStateMs = ms(t);
    report.wakeMs = ms(t0);
    report.wokenCgroupBytes = (await cgroup.stats()).memoryBytes;
    const sandbox = sessionSandbox(
      {
        ...{ input: channel, output: channel, kernel: KERNEL },
        ...{ prestarted: null, ownClock: true, exited },
        counters: async () => ({ oomKills: 0 }),
        pause: async () => void (await qmp.execute("stop")),
        resume: async () => void (await qmp.execute("cont")),
        kill: async () => {},
        destroy: async () => {},
      },
      { isolation: isolationOf(ctx.accel), teardowns },
    );
    const probe = await cell(sandbox, PROBE);
    report.probeAfterMs = probe.ms;
    return { report, probe };
  } finally {
    await undo.unwind();
  }
}

await main();
