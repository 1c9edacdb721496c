// Snapshot templates kept across restarts (VM-TEMPLATE-KEPT): a backend saves the template it
// built; the next backend on the same store loads it instead of booting, and its clones serve
// calls with their own entropy, boot id and clock, exactly as a built template's. A file that is
// not whole, or another key's, is never loaded. Real QEMU (TCG here), real sealed memfds.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { randomFillSync } from "node:crypto";
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { createMicrovmBackend, type MicrovmBackend } from "../../src/backends/microvm/create.js";
import { TemplateStore } from "../../src/backends/microvm/template-store.js";
import { waitFor } from "../api/harness.js";
import { skipOutsideCi } from "../helpers/ci.js";
import {
  assertNoLeftovers,
  canRunMicrovm,
  hostLeftovers,
  makeTinyRoot,
  shJob,
  text,
  type TinyRoot,
} from "./fixture.js";

const skip = skipOutsideCi(canRunMicrovm());
const SEALED_RAM_C = fileURLToPath(
  new URL("../../../src/backends/microvm/sealed-ram.c", import.meta.url),
);
const CODE =
  "cat /proc/sys/kernel/random/boot_id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; date +%s";

describe(
  "microvm templates kept across restarts",
  { skip: skip ?? false, timeout: 300_000 },
  () => {
    let root: TinyRoot;
    let dir: string;
    let before0: Awaited<ReturnType<typeof hostLeftovers>>;
    const open: MicrovmBackend[] = [];

    before(async () => {
      root = makeTinyRoot();
      dir = mkdtempSync(join(tmpdir(), "sr-templates-"));
      before0 = await hostLeftovers();
    });
    after(async () => {
      for (const b of open) await b.close();
      root.cleanup();
      rmSync(dir, { recursive: true, force: true });
      await assertNoLeftovers(before0, "a kept template's VM left something behind");
    });

    const start = async () => {
      const b = await createMicrovmBackend({
        rootfsDir: root.rootfs,
        disk: root.disk,
        pool: { sizes: {}, mode: "restore" },
        templateStore: new TemplateStore(dir),
      });
      open.push(b);
      return b;
    };
    const call = async (b: MicrovmBackend) => {
      const r = await b.run(shJob(CODE), { signal: new AbortController().signal });
      assert.equal(r.agent.failure, null);
      const [boot, rnd, secs] = text(r.agent.stdout).split("\n");
      assert.match(boot ?? "", /^[0-9a-f-]{36}$/);
      assert.ok(Math.abs(Number(secs) - Date.now() / 1000) < 120, `guest clock ${secs}`);
      return `${boot} ${rnd}`;
    };
    const stop = async (b: MicrovmBackend) => {
      open.splice(open.indexOf(b), 1);
      await b.close();
    };
    const files = () => readdirSync(dir).filter((f) => f.endsWith(".template"));

    let first: string;
    test("the first backend builds its template, serves a call from it, and saves it (sparse, 0600)", async () => {
      const b = await start();
      first = await call(b);
      assert.equal(b.counters.templates, 1);
      assert.equal(b.counters.templatesLoaded, 0, "nothing to load yet");
      await waitFor("the template's save", () => b.templateSaves.length > 0, 120_000);
      assert.deepEqual(b.templateSaves, [null]);
      const [file] = files();
      assert.ok(file, "a template file");
      const st = statSync(join(dir, file));
      assert.equal(st.mode & 0o777, 0o600);
      assert.ok(st.blocks * 512 < st.size / 2, `sparse: ${st.blocks * 512} of ${st.size} bytes`);
      assert.equal(statSync(dir).mode & 0o777, 0o700);
      await stop(b);
    });

    test("a restarted backend loads it instead of booting; its clones are fresh machines", async () => {
      const b = await start();
      const seen = new Set([first, await call(b), await call(b)]);
      assert.equal(b.counters.templatesLoaded, 1, "the template came from disk");
      assert.equal(b.counters.templates, 1, "and no other was built");
      assert.equal(b.counters.bootedCalls, 0);
      assert.equal(seen.size, 3, "two machines shared a boot id or random bytes");
      assert.deepEqual(b.templateSaves, [], "a loaded template is not saved again");
      await stop(b);
    });

    test("a file that is not whole is a miss, removed, and the template is built and saved again", async () => {
      const [file] = files();
      const path = join(dir, file!);
      truncateSync(path, statSync(path).size - 4096);
      const b = await start();
      await call(b);
      assert.equal(b.counters.templatesLoaded, 0, "a truncated file was loaded");
      await waitFor("the rebuilt template's save", () => b.templateSaves.length > 0, 120_000);
      assert.deepEqual(b.templateSaves, [null]);
      await stop(b);
      // Another key's file (another build's, whole) under this slot's name is not this one.
      const [again] = files();
      const path2 = join(dir, again!);
      const fd = openSync(path2, "r+");
      const header = Buffer.alloc(4096);
      readSync(fd, header, 0, 4096, 0);
      const meta = JSON.parse(header.toString().replace(/\0+$/, "")) as { key: string };
      const forged = Buffer.alloc(4096);
      forged.write(JSON.stringify({ ...meta, key: "0".repeat(64) }));
      writeSync(fd, forged, 0, 4096, 0);
      closeSync(fd);
      const c = await start();
      await call(c);
      assert.equal(c.counters.templatesLoaded, 0, "a file with another key was loaded");
      await stop(c);
    });

    test("a backend's start removes a kept template made from a file that is gone (a pruned build)", async () => {
      const store = new TemplateStore(dir);
      await store.save("gone/256/plain", "f".repeat(64), "/dev/zero", 1 << 20, Buffer.from("s"), [
        join(dir, "pruned-vmlinux"),
      ]);
      assert.equal((await store.list()).filter((t) => !t.current).length, 1);
      const b = await start();
      await waitFor("the stale template's removal", async () =>
        (await store.list()).every((t) => t.slot !== "gone/256/plain"),
      );
      assert.ok((await store.list()).length > 0, "the current templates stay");
      await stop(b);
    });
  },
);

// A kept template loads only from a directory no one but the server's user can change, only as
// its save wrote it (SEC-LIMIT-TEMPLATE-DIGEST): the store alone, with the real sealed-ram
// helper (compiled here from its source) and real memfds; no QEMU.
describe(
  "a kept template is loaded only from a trusted directory, only as saved",
  { skip: process.getuid?.() === 0 ? false : "needs root (file owners)" },
  () => {
    let work: string;
    let helper: string;
    const RAM = 8 << 20;
    const ram = Buffer.alloc(RAM);
    const state = Buffer.from("qemu device state ".repeat(100));
    before(() => {
      work = mkdtempSync(join(tmpdir(), "sr-template-trust-"));
      helper = join(work, "sealed-ram");
      execFileSync(process.env.CC || "cc", ["-static", "-Os", "-o", helper, SEALED_RAM_C]);
      // Data in some 1 MiB chunks, holes in the others.
      for (const mb of [0, 3, 7]) randomFillSync(ram, mb << 20, 1 << 20);
      writeFileSync(join(work, "ram.bin"), ram);
    });
    after(() => rmSync(work, { recursive: true, force: true }));

    const fresh = async () => {
      const dir = mkdtempSync(join(work, "store-"));
      const store = new TemplateStore(dir);
      await store.save("bash/256/plain", "a".repeat(64), join(work, "ram.bin"), RAM, state, []);
      const [file] = readdirSync(dir).filter((f) => f.endsWith(".template"));
      return { dir, store, path: join(dir, file!) };
    };
    const load = (store: TemplateStore) =>
      store.load("bash/256/plain", "a".repeat(64), helper, RAM);
    const memfd = (fd: number) => readFileSync(`/proc/self/fd/${fd}`);

    test("as saved: the sealed memfd holds the RAM byte for byte, the state is the state; the index is 0600", async () => {
      const { dir, store } = await fresh();
      const hit = await load(store);
      assert.ok(hit);
      try {
        assert.ok(memfd(hit.ram.fd!).equals(ram));
        assert.ok(hit.state.equals(state));
      } finally {
        hit.ram.close();
      }
      assert.equal(statSync(join(dir, "index.json")).mode & 0o777, 0o600);
    });

    test("an edited byte anywhere (RAM, a hole, the device state, the header) is a miss, and the file goes", async () => {
      const { path } = await fresh();
      const size = statSync(path).size;
      for (const at of [size - RAM + 5, size - RAM + (1 << 20) + 9, size - 1, 4096 + 7, 40]) {
        const { store, path: p } = await fresh();
        const fd = openSync(p, "r+");
        const b = Buffer.alloc(1);
        readSync(fd, b, 0, 1, at);
        writeSync(fd, Buffer.from([b[0]! ^ 1]), 0, 1, at);
        closeSync(fd);
        assert.equal(await load(store), null, `byte ${at}`);
        assert.equal(existsSync(p), false, `byte ${at}: removed`);
      }
    });

    test("a file the index does not name, or whose index entry is another's, is a miss", async () => {
      const a = await fresh();
      writeFileSync(join(a.dir, "index.json"), "{}", { mode: 0o600 });
      assert.equal(await load(a.store), null);
      const b = await fresh();
      const index = JSON.parse(readFileSync(join(b.dir, "index.json"), "utf8")) as Record<
        string,
        string
      >;
      for (const k of Object.keys(index)) index[k] = "0".repeat(64);
      writeFileSync(join(b.dir, "index.json"), JSON.stringify(index), { mode: 0o600 });
      assert.equal(await load(b.store), null);
      // An index others may write is not read at all.
      const c = await fresh();
      chmodSync(join(c.dir, "index.json"), 0o666);
      assert.equal(await load(c.store), null);
    });

    test("saves at once, six in this process and six in another, keep all twelve digests (one change of the index at a time)", async () => {
      const dir = mkdtempSync(join(work, "store-"));
      const save = (slots: string[]) =>
        slots.map((x) =>
          new TemplateStore(dir).save(
            `${x}/256/plain`,
            x.repeat(64),
            join(work, "ram.bin"),
            RAM,
            state,
            [],
          ),
        );
      const mine = ["a", "b", "c", "d", "e", "f"];
      const theirs = ["g", "h", "i", "j", "k", "l"];
      const store = new URL("../../src/backends/microvm/template-store.js", import.meta.url).href;
      const script = `import { TemplateStore } from ${JSON.stringify(store)};
        await Promise.all(${JSON.stringify(theirs)}.map((x) => new TemplateStore(${JSON.stringify(dir)})
          .save(x + "/256/plain", x.repeat(64), ${JSON.stringify(join(work, "ram.bin"))}, ${RAM},
            Buffer.from(${JSON.stringify(state.toString())}), [])));`;
      const other = new Promise<number | null>((resolve) =>
        spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: "inherit" }).on(
          "exit",
          resolve,
        ),
      );
      await Promise.all(save(mine));
      assert.equal(await other, 0, "the other process's saves");
      const index = JSON.parse(readFileSync(join(dir, "index.json"), "utf8")) as object;
      assert.equal(Object.keys(index).length, 12, JSON.stringify(index));
      for (const x of [...mine, ...theirs]) {
        const hit = await new TemplateStore(dir).load(`${x}/256/plain`, x.repeat(64), helper, RAM);
        assert.ok(hit, x);
        hit.ram.close();
      }
      assert.equal(existsSync(join(dir, "index.lock")), false, "the lock is released");
    });

    test("a file others may read or write, or that is another user's, is a miss", async () => {
      for (const change of [
        (p: string) => chmodSync(p, 0o644),
        (p: string) => chmodSync(p, 0o606),
        (p: string) => chownSync(p, 65534, 65534),
      ]) {
        const { store, path } = await fresh();
        change(path);
        assert.equal(await load(store), null);
      }
    });

    test("a directory another user owns or may write, below one they may change, or a link, is refused", async () => {
      const refuse = async (store: TemplateStore, why: RegExp) => {
        await assert.rejects(load(store), why);
        await assert.rejects(
          store.save("bash/256/plain", "b".repeat(64), join(work, "ram.bin"), RAM, state, []),
          why,
        );
      };
      const writable = await fresh();
      chmodSync(writable.dir, 0o777);
      await refuse(writable.store, /writable by it alone/);
      const group = await fresh();
      chmodSync(group.dir, 0o770);
      await refuse(group.store, /writable by it alone/);
      const theirs = await fresh();
      chownSync(theirs.dir, 65534, 65534);
      await refuse(theirs.store, /must belong to uid 0/);
      // Above it: a directory anyone may write and rename in (no sticky bit).
      const open = mkdtempSync(join(work, "open-"));
      chmodSync(open, 0o777);
      const below = join(open, "templates");
      mkdirSync(below, { mode: 0o700 });
      await refuse(new TemplateStore(below), /above it can be changed by another user/);
      // A sticky one is fine above (/tmp): others cannot rename what is ours in it.
      chmodSync(open, 0o1777);
      await new TemplateStore(below).save(
        "bash/256/plain",
        "a".repeat(64),
        join(work, "ram.bin"),
        RAM,
        state,
        [],
      );
      const ok = await load(new TemplateStore(below));
      assert.ok(ok);
      ok.ram.close();
      // The directory itself a link: refused, wherever it points.
      const real = await fresh();
      const link = join(work, "link");
      symlinkSync(real.dir, link);
      await assert.rejects(load(new TemplateStore(link)), /not a directory/);
    });
  },
);
