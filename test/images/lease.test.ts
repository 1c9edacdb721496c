import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { pruneVmCache } from "../../src/images/vm/build.js";
import { buildRootfs } from "../../src/images/build.js";
import { LEASE_DIR, liveLeases, processStartTime, takeLease } from "../../src/images/lease.js";
import { leaseRootfs, selectRootfs } from "../../src/images/locate.js";
import { activeImage, pruneImages, setActiveImage } from "../../src/images/prune.js";
import { baseRecipeHash, recipeHash, resolveHostSources } from "../../src/images/recipe.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

// Which images a build may remove, and which image a server serves: a live server's image is
// never removed (it leases it), a dead server's lease counts for nothing, and a server whose image
// config is unbuilt or bad serves the last image built instead of refusing to start.
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-lease-"));
const children: ChildProcess[] = [];
after(() => {
  for (const c of children) c.kill("SIGKILL");
  rmSync(tmp, { recursive: true, force: true });
});

/** A process that stands for another server: it writes a lease on `targets` and stays alive. */
async function otherServer(dir: string, targets: string[]): Promise<ChildProcess> {
  const leaseModule = new URL("../../src/images/lease.js", import.meta.url).href;
  const child = spawn(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      `const { takeLease } = await import(${JSON.stringify(leaseModule)});
       takeLease(${JSON.stringify(dir)}, ${JSON.stringify(targets)});
       process.stdout.write("leased\\n");
       setInterval(() => {}, 1000);`,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout?.once("data", () => resolve());
    child.once("exit", (code) => reject(new Error(`lease holder exited ${code}`)));
  });
  return child;
}

function fakeImage(root: string, name: string, manifest: Record<string, unknown> = {}): string {
  const dir = join(root, name);
  mkdirSync(join(dir, "usr"), { recursive: true });
  writeFileSync(join(dir, "manifest.json"), JSON.stringify(manifest));
  return dir;
}

describe("image leases and pruning", () => {
  test("a live server's image is kept; unleased and dead servers' images are removed", async () => {
    const root = join(tmp, "prune");
    mkdirSync(root);
    const current = fakeImage(root, "rootfs-000000000000000a");
    const served = fakeImage(root, "rootfs-000000000000000b");
    const orphan = fakeImage(root, "rootfs-000000000000000c");
    const deadServers = fakeImage(root, "rootfs-000000000000000d");
    const foreign = join(root, "not-an-image");
    mkdirSync(foreign);
    const holder = await otherServer(root, [served]);
    // A lease of a process that is gone, and one whose pid is alive but is another process now.
    mkdirSync(join(root, LEASE_DIR), { recursive: true });
    writeFileSync(
      join(root, LEASE_DIR, "999999-1-dead.json"),
      JSON.stringify({ pid: 999999, startTime: "1", targets: [deadServers] }),
    );
    writeFileSync(
      join(root, LEASE_DIR, `${process.pid}-reused.json`),
      JSON.stringify({ pid: process.pid, startTime: "12345", targets: [deadServers] }),
    );

    const lines: string[] = [];
    const outcome = pruneImages(root, current, (l) => lines.push(l));

    assert.deepEqual(outcome.removed.sort(), [orphan, deadServers].sort());
    assert.deepEqual(outcome.inUse, [{ dir: served, pids: [holder.pid] }]);
    for (const kept of [current, served, foreign]) assert.ok(existsSync(kept), kept);
    assert.ok(lines.some((l) => l.includes(`a live server uses it (pid ${holder.pid})`)));
    assert.deepEqual(
      readdirSync(join(root, LEASE_DIR)).filter((n) => n.endsWith(".json")).length,
      1,
      "the stale leases are gone, the live one stays",
    );

    // Once that server is gone, its image goes with the next prune.
    holder.kill("SIGKILL");
    await new Promise((r) => holder.once("exit", r));
    assert.deepEqual(pruneImages(root, current).removed, [served]);
    assert.deepEqual(
      readdirSync(root).filter((n) => n.startsWith("rootfs-")),
      ["rootfs-000000000000000a"],
    );
  });

  test("a half-pruned image a dead build left is removed", () => {
    const root = join(tmp, "half");
    mkdirSync(root);
    const keep = fakeImage(root, "rootfs-00000000000000aa");
    fakeImage(root, ".pruning-rootfs-00000000000000bb-999999");
    pruneImages(root, keep);
    assert.deepEqual(readdirSync(root).sort(), ["rootfs-00000000000000aa"]);
  });

  test("a lease names this process by pid and start time, and goes when released", () => {
    const root = join(tmp, "own");
    mkdirSync(root);
    const lease = takeLease(root, ["/x"]);
    assert.ok(lease.file.includes(`${process.pid}-${processStartTime(process.pid)}-`));
    assert.deepEqual([...liveLeases(root)], [["/x", [process.pid]]]);
    lease.release();
    assert.equal(liveLeases(root).size, 0);
  });

  test("a server waits for its image to come back when a prune had renamed it aside", () => {
    const root = join(tmp, "race");
    mkdirSync(root);
    const dir = fakeImage(root, "rootfs-00000000000000ee");
    const aside = join(root, ".pruning-rootfs-00000000000000ee-1");
    renameSync(dir, aside);
    // What the prune does when it reads the leases again and finds this server's.
    const restorer = spawn("sh", ["-c", 'sleep 0.3; mv "$0" "$1"', aside, dir]);
    children.push(restorer);
    const lease = leaseRootfs(dir, root);
    assert.ok(existsSync(join(dir, "manifest.json")));
    lease.release();
    rmSync(dir, { recursive: true });
    assert.throws(() => leaseRootfs(dir, root, 300), /was removed while this server started/);
    assert.equal(liveLeases(root).size, 0, "a failed start leaves no lease");
  });

  test("the microVM cache keeps a kernel and a disk a live server leases, however old", async () => {
    const cache = join(tmp, "vmcache");
    const old = Date.now() / 1000 - 2 * 3600;
    const kernelDir = join(cache, "00000000000000aa");
    const disk = join(cache, "disks", "rootfs-1111111111111111-v2.erofs");
    const otherDisk = join(cache, "disks", "rootfs-2222222222222222-v2.erofs");
    mkdirSync(kernelDir, { recursive: true });
    mkdirSync(join(cache, "disks"));
    for (const f of [disk, otherDisk]) writeFileSync(f, "d");
    for (const p of [kernelDir, disk, otherDisk]) utimesSync(p, old, old);
    const holder = await otherServer(cache, [kernelDir, disk]);
    assert.deepEqual(pruneVmCache([], cache, 3_600_000, []), [otherDisk]);
    assert.ok(existsSync(kernelDir) && existsSync(disk));
    holder.kill("SIGKILL");
    await new Promise((r) => holder.once("exit", r));
    assert.deepEqual(pruneVmCache([], cache, 3_600_000, []).sort(), [kernelDir, disk].sort());
  });
});

describe("which image a server serves", () => {
  const src = resolveHostSources(
    settingsFrom({ ...process.env, SCRATCHRUN_IMAGE_CONFIG: "" }).images,
  );
  assert.ok(src.ok, "this host has CPython 3.12 and node 20");
  const base = baseRecipeHash(src.sources);

  function setup(name: string) {
    const root = join(tmp, name);
    mkdirSync(root);
    const configDir = join(root, "..", `${name}-config`);
    mkdirSync(configDir);
    const config = join(configDir, "image.json");
    writeFileSync(config, JSON.stringify({ debian: ["jq"] }));
    const env = { ...process.env, SCRATCHRUN_IMAGES: root, SCRATCHRUN_IMAGE_CONFIG: config };
    const withConfig = resolveHostSources(settingsFrom(env).images);
    assert.ok(withConfig.ok);
    const manifest = (hash: string, baseHash = base) => ({
      format: 1,
      recipeHash: hash,
      builtAt: "2026-01-01T00:00:00.000Z",
      sizeBytes: 1,
      env: {},
      runtimes: {
        "python3.12": { argv: ["/p"], version: "3.12.1" },
        "python3.11": { argv: ["/p"], version: "3.11.2" },
        node20: { argv: ["/n"], version: "v20.0.0" },
        bash: { argv: ["/b"], version: "5" },
        "python3.13": { argv: ["/p"], version: "3.13.0" },
        node24: { argv: ["/n"], version: "v24.0.0" },
      },
      python312PackagesFrom: "none",
      python313PackagesFrom: "none",
      notes: [],
      baseRecipeHash: baseHash,
    });
    return { root, config, env, hash: recipeHash(withConfig.sources), manifest };
  }

  test("the config's own image when it is built", () => {
    const s = setup("exact");
    const exact = fakeImage(s.root, `rootfs-${s.hash}`, s.manifest(s.hash));
    const older = fakeImage(s.root, "rootfs-00000000000000ab", s.manifest("00000000000000ab"));
    setActiveImage(s.root, older);
    const r = selectRootfs(settingsFrom(s.env).images);
    assert.ok(r.ok && r.dir === exact && r.stale === null);
  });

  test("a changed config not built yet: the last image built, with a warning saying so", () => {
    const s = setup("changed");
    const older = fakeImage(s.root, "rootfs-00000000000000ab", s.manifest("00000000000000ab"));
    setActiveImage(s.root, older);
    const r = selectRootfs(settingsFrom(s.env).images);
    assert.ok(r.ok && r.dir === older, JSON.stringify(r));
    assert.match(
      r.stale ?? "",
      /image config changed since this image was built.*serving the last image built, rootfs-00000000000000ab.*scratchrun image build/,
    );
  });

  test("an invalid config: the last image built, the warning naming the config's error", () => {
    const s = setup("invalid");
    const older = fakeImage(s.root, "rootfs-00000000000000ab", s.manifest("00000000000000ab"));
    setActiveImage(s.root, older);
    writeFileSync(s.config, JSON.stringify({ debain: ["jq"] }));
    const r = selectRootfs(settingsFrom(s.env).images);
    assert.ok(r.ok && r.dir === older);
    assert.match(r.stale ?? "", /cannot be used \(image config .*unknown key "debain"/);
  });

  test("never an image of another base (other code or host runtimes), never a missing one", () => {
    const s = setup("other-base");
    const foreign = fakeImage(
      s.root,
      "rootfs-00000000000000ac",
      s.manifest("00000000000000ac", "ffffffffffffffff"),
    );
    setActiveImage(s.root, foreign);
    const r = selectRootfs(settingsFrom(s.env).images);
    assert.ok(!r.ok && /no runtime image for recipe/.test(r.error));
    rmSync(foreign, { recursive: true });
    assert.equal(activeImage(s.root), null);
    assert.equal(selectRootfs(settingsFrom(s.env).images).ok, false);
  });

  test("a forced rebuild of an image a live server uses is refused before anything starts", async () => {
    const s = setup("force");
    const exact = fakeImage(s.root, `rootfs-${s.hash}`, s.manifest(s.hash));
    const holder = await otherServer(s.root, [exact]);
    await assert.rejects(
      buildRootfs({
        images: settingsFrom(s.env).images,
        env: s.env,
        force: true,
        onProgress: () => {},
      }),
      new RegExp(`in use by a running server \\(pid ${holder.pid}\\)`),
    );
    assert.ok(existsSync(join(exact, "manifest.json")));
    assert.deepEqual(
      readdirSync(s.root).filter((n) => n.startsWith(".building")),
      [],
    );
  });
});
