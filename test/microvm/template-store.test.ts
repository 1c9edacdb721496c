// Snapshot templates kept across restarts (VM-TEMPLATE-KEPT): a backend saves the template it
// built; the next backend on the same store loads it instead of booting, and its clones serve
// calls with their own entropy, boot id and clock, exactly as a built template's. A file that is
// not whole, or another key's, is never loaded. Real QEMU (TCG here), real sealed memfds.
import assert from "node:assert/strict";
import {
  closeSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readSync,
  rmSync,
  statSync,
  truncateSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createMicrovmBackend, type MicrovmBackend } from "../../src/backends/microvm/backend.js";
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
