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
 * (sealed-ram.ts); no QEMU ever sees the file. What a template holds becomes every clone's first
 * state, so it loads only from a directory the server's user (root) owns and no one else can
 * write, nor any directory above it (`checkTrustedDir`; sticky ones like /tmp aside), each file
 * owned by that user with mode 0600, and only when the SHA-256 of its header, device state and
 * RAM, computed while the RAM is copied into the memfd (so what is checked is what is used),
 * equals the digest its save wrote into the directory's index (`index.json`, 0600). An edited
 * file is a miss (removed, built again), as is one the index does not name. Files are written
 * to a temporary name and renamed, so a crash leaves no half file, and written sparse (all-zero
 * chunks skipped): a guest's RAM is mostly untouched.
 */
import { createHash, type Hash } from "node:crypto";
import {
  closeSync,
  constants as fsc,
  existsSync,
  lstatSync,
  readFileSync,
  realpathSync,
  statSync,
  writeSync,
} from "node:fs";
import { mkdir, open, readdir, rename, rm, writeFile, type FileHandle } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { SealedRam } from "./sealed-ram.js";
import { pidAlive } from "../../jail/procfs.js";

// 2: the index's digest (format 1 files were never checked, so they are not loaded).
const FORMAT = 2;
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

function parseHeader(head: Buffer): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(head.toString("utf8").replace(/\0+$/, "").trim());
    return typeof v === "object" && v !== null ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

async function header(path: string): Promise<Record<string, unknown> | null> {
  const f = await open(path, "r");
  try {
    const head = Buffer.alloc(HEADER_BYTES);
    await f.read(head, 0, HEADER_BYTES, 0);
    return parseHeader(head);
  } finally {
    await f.close();
  }
}

/** Writes all of `chunk` at `at` (the memfd before its seal). */
function writeAllSync(fd: number, chunk: Buffer, at: number): void {
  for (let done = 0; done < chunk.length;)
    done += writeSync(fd, chunk, done, chunk.length - done, at + done);
}

const INDEX = "index.json";
/** Held (created exclusively, holding the holder's pid) while one process changes the index. */
const INDEX_LOCK = "index.lock";
/** How long a change of the index waits for another process's to finish. */
const INDEX_LOCK_WAIT_MS = 30_000;
/** This process's changes of each directory's index, one after another. */
const indexTurns = new Map<string, Promise<unknown>>();
const ownUid = () => process.getuid?.() ?? 0;

/**
 * Throws unless `dir` and every directory above it belong to this process's user or root and no
 * one else can write them (a sticky directory such as /tmp is fine above: others cannot rename
 * or remove what is ours in it), `dir` itself this user's and a real directory, not a link.
 */
export function checkTrustedDir(dir: string): void {
  const uid = ownUid();
  const own = lstatSync(dir);
  if (!own.isDirectory() || own.isSymbolicLink())
    throw new Error(`template cache ${dir} is not a directory`);
  if (own.uid !== uid || (own.mode & 0o022) !== 0)
    throw new Error(
      `template cache ${dir} must belong to uid ${uid} and be writable by it alone (it is uid ${own.uid}, mode ${(own.mode & 0o7777).toString(8)})`,
    );
  for (let d = dirname(realpathSync(dir)); ; d = dirname(d)) {
    const st = lstatSync(d);
    const othersWrite = (st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0;
    if ((st.uid !== 0 && st.uid !== uid) || othersWrite)
      throw new Error(
        `template cache ${dir}: ${d} above it can be changed by another user (uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)})`,
      );
    if (d === dirname(d)) break;
  }
}

/** The digest of a template: its header and device state, then each RAM chunk with data. */
function templateHash(head: Buffer, state: Buffer): Hash {
  return createHash("sha256").update(head).update(state);
}

/** Adds one RAM chunk (at `offset` in the RAM) to a template's digest. */
function hashChunk(h: Hash, offset: number, chunk: Buffer): void {
  const at = Buffer.alloc(8);
  at.writeBigUInt64BE(BigInt(offset));
  h.update(at).update(chunk);
}

export class TemplateStore {
  constructor(readonly dir: string) {}

  /** The digests saves wrote (file name to SHA-256 hex); {} when the index is not trusted. */
  private async index(): Promise<Record<string, string>> {
    const path = join(this.dir, INDEX);
    let f;
    try {
      f = await open(path, fsc.O_RDONLY | fsc.O_NOFOLLOW);
    } catch {
      return {};
    }
    try {
      const st = await f.stat();
      if (!st.isFile() || st.uid !== ownUid() || (st.mode & 0o077) !== 0) return {};
      const v: unknown = JSON.parse(await f.readFile("utf8"));
      return typeof v === "object" && v !== null ? (v as Record<string, string>) : {};
    } catch {
      return {};
    } finally {
      await f.close();
    }
  }

  /**
   * Runs `change` (of the index, and of the template files it names) alone: after this process's
   * other changes of this directory, and while holding `index.lock` against other processes'
   * (servers sharing the directory save at once: a read-modify-write of the index by two of them
   * lost one's digest, and its template, unnamed, was thrown away at the next start). A lock whose
   * holder died (its pid gone, or none written after a second) is taken over.
   */
  private async alone<T>(change: () => Promise<T>): Promise<T> {
    const before = indexTurns.get(this.dir) ?? Promise.resolve();
    const turn = before.then(async () => {
      const lock = join(this.dir, INDEX_LOCK);
      const deadline = Date.now() + INDEX_LOCK_WAIT_MS;
      for (;;) {
        try {
          await writeFile(lock, String(process.pid), { flag: "wx", mode: 0o600 });
          break;
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
        }
        let holder = NaN;
        let age = 0;
        try {
          holder = Number(readFileSync(lock, "utf8"));
          age = Date.now() - statSync(lock).mtimeMs;
        } catch {
          continue; // released meanwhile
        }
        const dead = Number.isSafeInteger(holder) && holder > 0 ? !pidAlive(holder) : age > 1000;
        if (dead) await rm(lock, { force: true });
        else if (Date.now() > deadline)
          throw new Error(`template index ${this.dir}: ${INDEX_LOCK} held by pid ${holder}`);
        else await new Promise((r) => setTimeout(r, 10));
      }
      try {
        return await change();
      } finally {
        await rm(lock, { force: true });
      }
    });
    indexTurns.set(
      this.dir,
      turn.catch(() => {}),
    );
    return turn;
  }

  /**
   * Sets (or, with null, drops) one file's digest in the index, written whole and renamed. Only
   * inside alone().
   */
  private async setDigest(file: string, digest: string | null): Promise<void> {
    const index = await this.index();
    if (digest === null) delete index[file];
    else index[file] = digest;
    for (const name of Object.keys(index))
      if (name !== file && !existsSync(join(this.dir, name))) delete index[name];
    const tmp = join(this.dir, `${INDEX}.tmp-${process.pid}`);
    await writeFile(tmp, JSON.stringify(index), { mode: 0o600 });
    await rename(tmp, join(this.dir, INDEX));
  }

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
   * it is not whole, or not what its save wrote: a wrong header, size or digest is a miss, and
   * the file is removed). Throws when the directory is not trusted (checkTrustedDir).
   */
  async load(
    slot: string,
    key: string,
    helper: string,
    ramBytes: number,
  ): Promise<{ ram: SealedRam; state: Buffer } | null> {
    if (!existsSync(this.dir)) return null;
    checkTrustedDir(this.dir);
    const path = this.path(slot, key);
    let f: FileHandle | undefined;
    try {
      f = await open(path, fsc.O_RDONLY | fsc.O_NOFOLLOW);
    } catch {
      return null;
    }
    let ram: SealedRam | null = null;
    // A miss removes the file it read, not one a save put in its place meanwhile.
    const miss = async () => {
      ram?.close();
      ram = null;
      const read = await f?.stat().catch(() => null);
      await f?.close();
      f = undefined;
      await this.alone(async () => {
        const now = statSync(path, { throwIfNoEntry: false });
        if (read && now && (now.ino !== read.ino || now.dev !== read.dev)) return;
        await rm(path, { force: true });
        await this.setDigest(basename(path), null);
      });
      return null;
    };
    try {
      const st = await f.stat();
      if (!st.isFile() || st.uid !== ownUid() || (st.mode & 0o077) !== 0) return await miss();
      const head = Buffer.alloc(HEADER_BYTES);
      await f.read(head, 0, HEADER_BYTES, 0);
      const meta = parseHeader(head) ?? {};
      const stateBytes = Number(meta.stateBytes);
      const dataAt = HEADER_BYTES + roundUp(stateBytes);
      const want = (await this.index())[basename(path)];
      if (
        meta.format !== FORMAT ||
        meta.key !== key ||
        meta.ramBytes !== ramBytes ||
        !Number.isSafeInteger(stateBytes) ||
        stateBytes <= 0 ||
        stateBytes > 64 * 1024 * 1024 ||
        st.size !== dataAt + ramBytes ||
        typeof want !== "string"
      )
        return await miss();
      const state = Buffer.alloc(stateBytes);
      await f.read(state, 0, stateBytes, HEADER_BYTES);
      const h = templateHash(head, state);
      ram = await SealedRam.create(helper, ramBytes);
      // Copied here, chunk by chunk, and hashed as it is copied: what the digest covers is what
      // the memfd holds (all-zero chunks are the memfd's own zero pages, left untouched).
      const out = ram.openForTemplate();
      try {
        const buf = Buffer.alloc(CHUNK);
        for (let off = 0; off < ramBytes; off += CHUNK) {
          const n = Math.min(CHUNK, ramBytes - off);
          const { bytesRead } = await f.read(buf, 0, n, dataAt + off);
          if (bytesRead !== n) return await miss();
          const chunk = buf.subarray(0, n);
          if (chunk.equals(ZERO.subarray(0, n))) continue;
          hashChunk(h, off, chunk);
          writeAllSync(out, chunk, off);
        }
      } finally {
        closeSync(out);
      }
      if (h.digest("hex") !== want) return await miss();
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
    checkTrustedDir(this.dir);
    const path = this.path(slot, key);
    const tmp = `${path}.tmp-${process.pid}`;
    const out = await open(tmp, "w", 0o600);
    const src = await open(ramFdPath, "r");
    let digest = "";
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
      const h = templateHash(header, state);
      const dataAt = HEADER_BYTES + roundUp(state.length);
      const buf = Buffer.alloc(CHUNK);
      for (let off = 0; off < ramBytes; off += CHUNK) {
        const n = Math.min(CHUNK, ramBytes - off);
        const { bytesRead } = await src.read(buf, 0, n, off);
        if (bytesRead !== n) throw new Error(`template RAM ended at ${off + bytesRead}`);
        if (!buf.subarray(0, n).equals(ZERO.subarray(0, n))) {
          hashChunk(h, off, buf.subarray(0, n));
          await out.write(buf, 0, n, dataAt + off);
        }
      }
      digest = h.digest("hex");
      // Its full length, trailing holes included: a shorter file is not whole.
      await out.truncate(dataAt + ramBytes);
      await out.sync();
      await out.close();
      // The file and its digest change together (a load sees the old pair or the new one).
      await this.alone(async () => {
        await rename(tmp, path);
        await this.setDigest(basename(path), digest);
      });
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
