/**
 * Snapshot templates kept on disk across restarts, so a restarted server's first calls clone a
 * template instead of waiting for a cold boot (about 2.6 s under TCG, decision 0003). A template
 * is only as good as everything it was built from, so its file is named by a key over all of it:
 * the kernel, initramfs (the agent is inside), root disk, QEMU binary and this backend's compiled
 * files (by content up to 4 MiB, else path, size, mtime and inode), the accelerator and host CPU,
 * what the template runs (interpreter, warm-also list, pre-import), memory_mb, and this package's
 * version. Change any and the key changes; the old file is removed at the next
 * save of its slot.
 *
 * Loading copies the file into a fresh memfd that is then sealed exactly as a built template's
 * (sealed-ram.ts); no QEMU ever sees the file. The directory is the owner's only (0700), as the
 * images it sits beside are. Files are written to a temporary name and renamed, so a crash leaves
 * no half file, and written sparse (all-zero chunks skipped): a guest's RAM is mostly untouched.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import { mkdir, open, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { SealedRam } from "./sealed-ram.js";
import { pidAlive } from "../../jail/procfs.js";

const FORMAT = 1;
const HEADER_BYTES = 4096;
const CHUNK = 1024 * 1024;
const ZERO = Buffer.alloc(CHUNK);

/** What a template is built from; any change makes another key. */
export interface TemplateInputs {
  slot: string;
  memoryMb: number;
  files: string[];
  accel: string;
  tscKhz: number | null;
  /** What the template VM is asked to run (TemplateOptions: warm, warmAlso, prestart, preimport). */
  build: Record<string, string | readonly string[] | undefined>;
  version: string;
}

/** Files up to this size are known by their content (CONTENT_MAX), larger ones by their stat. */
const CONTENT_MAX = 4 * 1024 * 1024;

/**
 * A file's identity: a small one's content (this backend's compiled files: a rebuild that writes
 * the same code keeps the key, so `npm start`'s build does not throw away the templates setup
 * made); a large one's path, size, mtime and inode (the kernel, the disk: a rebuild changes one).
 */
function identity(path: string): string {
  const s = statSync(path);
  if (s.size <= CONTENT_MAX)
    return `${path}:sha256:${createHash("sha256").update(readFileSync(path)).digest("hex")}`;
  return `${path}:${s.size}:${s.mtimeMs}:${s.ino}`;
}

/** The host CPU as a restored guest sees it under KVM (a snapshot may not move between models). */
function hostCpu(): string {
  try {
    const info = readFileSync("/proc/cpuinfo", "utf8");
    const first = info.split("\n\n")[0] ?? "";
    return (first.match(/^(model name|flags)\s*:.*$/gm) ?? []).join("\n");
  } catch {
    return "unknown";
  }
}

export function templateKey(i: TemplateInputs): string {
  const h = createHash("sha256");
  h.update(
    JSON.stringify({
      format: FORMAT,
      slot: i.slot,
      memoryMb: i.memoryMb,
      files: i.files.map(identity),
      accel: i.accel,
      cpu: i.accel === "kvm" ? hostCpu() : "tcg",
      tscKhz: i.tscKhz,
      build: i.build,
      version: i.version,
    }),
  );
  return h.digest("hex");
}

/** A slot's file prefix: runtime, memory and flavour, safe as a file name. */
const prefixOf = (slot: string) => `${slot.replace(/[^A-Za-z0-9.-]/g, "_")}--`;
const roundUp = (n: number) => Math.ceil(n / 4096) * 4096;

/** A kept template as `list()` reports it. */
export interface KeptTemplate {
  file: string;
  slot: string;
  /** Bytes it takes on disk (allocated blocks: the file is sparse). */
  diskBytes: number;
  /** Every file it was made from still exists (else no key can match it again). */
  current: boolean;
}

async function header(path: string): Promise<Record<string, unknown> | null> {
  const f = await open(path, "r");
  try {
    const head = Buffer.alloc(HEADER_BYTES);
    await f.read(head, 0, HEADER_BYTES, 0);
    const v: unknown = JSON.parse(head.toString("utf8").replace(/\0+$/, "").trim());
    return typeof v === "object" && v !== null ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  } finally {
    await f.close();
  }
}

export class TemplateStore {
  constructor(readonly dir: string) {}

  /** The kept templates, for `scratchrun doctor`. */
  async list(): Promise<KeptTemplate[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return [];
    }
    const out: KeptTemplate[] = [];
    for (const file of names.filter((n) => n.endsWith(".template"))) {
      const path = join(this.dir, file);
      const h = await header(path).catch(() => null);
      const madeFrom = Array.isArray(h?.madeFrom) ? (h.madeFrom as unknown[]) : null;
      out.push({
        file,
        slot: typeof h?.slot === "string" ? h.slot : "?",
        diskBytes: statSync(path).blocks * 512,
        current:
          h?.format === FORMAT &&
          madeFrom !== null &&
          madeFrom.every((m) => typeof m === "string" && existsSync(m)),
      });
    }
    return out;
  }

  /**
   * Removes what can never be loaded again: templates made from a file that is gone (a pruned
   * kernel, initramfs or root disk, an upgraded QEMU), unreadable ones, and saves whose process
   * died mid-write. A backend runs it at start.
   */
  async prune(): Promise<string[]> {
    const removed: string[] = [];
    for (const t of await this.list())
      if (!t.current) {
        await rm(join(this.dir, t.file), { force: true });
        removed.push(t.file);
      }
    let names: string[] = [];
    try {
      names = await readdir(this.dir);
    } catch {
      /* no store yet */
    }
    for (const name of names) {
      const writer = /\.tmp-(\d+)$/.exec(name)?.[1];
      if (writer && !pidAlive(Number(writer))) {
        await rm(join(this.dir, name), { force: true });
        removed.push(name);
      }
    }
    return removed;
  }

  /** Whether a template is kept under this key (a load may still find it not whole). */
  has(slot: string, key: string): boolean {
    return existsSync(this.path(slot, key));
  }

  private path(slot: string, key: string): string {
    return join(this.dir, `${prefixOf(slot)}${key.slice(0, 32)}.template`);
  }

  /**
   * The template saved under this key, copied into a sealed memfd; null when there is none (or
   * it is not whole: a wrong header or size is a miss, and the file is removed).
   */
  async load(
    slot: string,
    key: string,
    helper: string,
    ramBytes: number,
  ): Promise<{ ram: SealedRam; state: Buffer } | null> {
    const path = this.path(slot, key);
    let f;
    try {
      f = await open(path, "r");
    } catch {
      return null;
    }
    let ram: SealedRam | null = null;
    try {
      const meta = (await header(path)) ?? {};
      const stateBytes = Number(meta.stateBytes);
      const dataAt = HEADER_BYTES + roundUp(stateBytes);
      if (
        meta.format !== FORMAT ||
        meta.key !== key ||
        meta.ramBytes !== ramBytes ||
        !Number.isSafeInteger(stateBytes) ||
        stateBytes <= 0 ||
        (await f.stat()).size !== dataAt + ramBytes
      ) {
        await f.close();
        f = undefined;
        await rm(path, { force: true });
        return null;
      }
      const state = Buffer.alloc(stateBytes);
      await f.read(state, 0, stateBytes, HEADER_BYTES);
      ram = await SealedRam.create(helper, ramBytes);
      // The helper copies the file's data extents (holes stay the memfd's zero pages).
      await ram.load(path, dataAt);
      await ram.seal();
      return { ram, state };
    } catch (e) {
      ram?.close();
      throw e;
    } finally {
      await f?.close();
    }
  }

  /**
   * Saves a sealed template: a header, QEMU's device state, then the RAM read from `ramFdPath`
   * (the memfd, reopened read-only), all-zero chunks left as holes. Other keys of the slot go.
   */
  async save(
    slot: string,
    key: string,
    ramFdPath: string,
    ramBytes: number,
    state: Buffer,
    /** The files the template was made from: when one is gone, prune() removes it. */
    madeFrom: readonly string[] = [],
  ): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const path = this.path(slot, key);
    const tmp = `${path}.tmp-${process.pid}`;
    const out = await open(tmp, "w", 0o600);
    const src = await open(ramFdPath, "r");
    try {
      const header = Buffer.alloc(HEADER_BYTES);
      header.write(
        JSON.stringify({
          format: FORMAT,
          key,
          ramBytes,
          stateBytes: state.length,
          slot,
          madeFrom,
        }),
      );
      await out.write(header, 0, HEADER_BYTES, 0);
      await out.write(state, 0, state.length, HEADER_BYTES);
      const dataAt = HEADER_BYTES + roundUp(state.length);
      const buf = Buffer.alloc(CHUNK);
      for (let off = 0; off < ramBytes; off += CHUNK) {
        const n = Math.min(CHUNK, ramBytes - off);
        const { bytesRead } = await src.read(buf, 0, n, off);
        if (bytesRead !== n) throw new Error(`template RAM ended at ${off + bytesRead}`);
        if (!buf.subarray(0, n).equals(ZERO.subarray(0, n)))
          await out.write(buf, 0, n, dataAt + off);
      }
      // Its full length, trailing holes included: a shorter file is not whole.
      await out.truncate(dataAt + ramBytes);
      await out.sync();
      await out.close();
      await rename(tmp, path);
    } catch (e) {
      await out.close().catch(() => {});
      await rm(tmp, { force: true });
      throw e;
    } finally {
      await src.close();
    }
    // Another key of this slot (another build's): one file per slot.
    for (const name of await readdir(this.dir))
      if (
        name.startsWith(prefixOf(slot)) &&
        name.endsWith(".template") &&
        join(this.dir, name) !== path
      )
        await rm(join(this.dir, name), { force: true });
  }
}
