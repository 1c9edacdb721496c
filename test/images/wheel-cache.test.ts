import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { classifyPipFailure, type HostPip } from "../../src/images/host-pip.js";
import { LOCK_TARGETS } from "../../src/images/python-lock.js";
import { resolveHostSources } from "../../src/images/recipe.js";
import {
  cacheDirFor,
  lockedWheels,
  noIndexNote,
  noIndexReason,
} from "../../src/images/wheel-cache.js";
import { serveIndex, sha256File, type LocalIndex } from "./pep503-index.js";
import { writeWheel } from "./wheel-fixture.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

// The host's pip fetching a lock's wheels into the build's cache, against a PEP 503 index this
// test serves on 127.0.0.1. pip runs with its config files off (PIP_CONFIG_FILE=/dev/null) and the
// index in PIP_INDEX_URL: exactly the ordinary configuration a host's pip.conf would give.
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-wheel-cache-"));
const target = LOCK_TARGETS.find((t) => t.python === "3.12")!;
const H = "0".repeat(64);

function pipWith(indexUrl: string): HostPip {
  const sources = resolveHostSources(settingsFrom(process.env).images);
  assert.ok(sources.ok, sources.ok ? "" : sources.error);
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("PIP_")),
  );
  return {
    python: join(sources.sources.python312Prefix, "bin", "python3.12"),
    env: { ...env, PIP_CONFIG_FILE: "/dev/null", PIP_INDEX_URL: indexUrl, PIP_NO_CACHE_DIR: "1" },
  };
}

function lockFile(name: string, probe: string, lines: string[]): string {
  const file = join(tmp, `${name}.lock`);
  writeFileSync(
    file,
    [`# list-sha256: ${H}`, "# targets: 3.12 3.13", `# probe: ${probe}`, ...lines, ""].join("\n"),
  );
  return file;
}

/** A port nothing listens on: bound, then closed. */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe("the lock's wheels through the host's pip, cached by the lock", () => {
  const wheels = join(tmp, "index");
  let index: LocalIndex;
  const pin: Record<string, string> = {};
  const logs: string[] = [];
  const log = (l: string) => logs.push(l);

  before(async () => {
    mkdirSync(wheels);
    for (const [name, version, tag] of [
      ["scratchrun_probe", "1.2.3", undefined],
      ["scratchrun_dep", "0.1", undefined],
      ["scratchrun_plat", "1.0", "cp312-cp312-macosx_11_0_arm64"],
      ["scratchrun_new", "2.0", "cp312-cp312-manylinux_2_39_x86_64"],
    ] as const) {
      const file = writeWheel(wheels, {
        name,
        version,
        ...(tag ? { tag } : {}),
        files: { [`${name}.py`]: "VALUE = 1\n" },
      });
      pin[name] =
        `${name.replace(/_/g, "-")}==${version} --hash=sha256:${sha256File(join(wheels, file))}`;
    }
    index = await serveIndex(wheels);
  });
  after(async () => {
    await index?.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  test("downloaded once into the lock's directory, then served from it with the index gone", async () => {
    const cacheRoot = join(tmp, "cache-a");
    const file = lockFile("good", "scratchrun-probe", [pin.scratchrun_probe!, pin.scratchrun_dep!]);
    const first = await lockedWheels({
      cacheRoot,
      lockFile: file,
      target,
      pip: pipWith(index.url),
      log,
    });
    assert.ok(first.kind === "downloaded" && first.wheels === 2, JSON.stringify(first));
    assert.ok(
      index.requests.some((p) => p.startsWith("/files/scratchrun_dep-0.1")),
      index.requests.join(" "),
    );
    const dir = first.dir;
    assert.deepEqual(readdirSync(dir).sort(), [
      "complete.txt",
      "scratchrun_dep-0.1-py3-none-any.whl",
      "scratchrun_probe-1.2.3-py3-none-any.whl",
    ]);
    index.requests.length = 0;
    const dead = `http://127.0.0.1:${await deadPort()}/simple/`;
    const again = await lockedWheels({
      cacheRoot,
      lockFile: file,
      target,
      pip: pipWith(dead),
      log,
    });
    assert.deepEqual(again, { kind: "cached", dir, wheels: 2 });
    assert.deepEqual(index.requests, [], "the cache asks no index");

    // A new lock gets its own directory, and the old lock's wheels go.
    const next = lockFile("next", "scratchrun-probe", [pin.scratchrun_probe!]);
    const other = await lockedWheels({
      cacheRoot,
      lockFile: next,
      target,
      pip: pipWith(index.url),
      log,
    });
    assert.ok(other.kind === "downloaded" && other.dir !== dir && other.wheels === 1);
    assert.equal(existsSync(dir), false, "the earlier lock's cache is pruned");
    assert.ok(
      logs.some((l) => /^pip: (Collecting|Saved)/.test(l)),
      "pip's progress is in the log",
    );
  });

  test("a wheel that fails its hash fails naming the package, and caches nothing", async () => {
    const cacheRoot = join(tmp, "cache-b");
    const wrong = pin.scratchrun_dep!.replace(/sha256:[0-9a-f]{64}/, `sha256:${"1".repeat(64)}`);
    const file = lockFile("wrong", "scratchrun-probe", [pin.scratchrun_probe!, wrong]);
    await assert.rejects(
      lockedWheels({ cacheRoot, lockFile: file, target, pip: pipWith(index.url), log }),
      /fails its pinned hash: scratchrun-dep==0\.1/,
    );
    assert.deepEqual(readdirSync(cacheRoot), [], "no directory, complete or partial, is left");
  });

  test("the probe's own wrong hash is a failure, not 'no index'", async () => {
    const wrong = pin.scratchrun_probe!.replace(/sha256:[0-9a-f]{64}/, `sha256:${"2".repeat(64)}`);
    const file = lockFile("wrong-probe", "scratchrun-probe", [wrong, pin.scratchrun_dep!]);
    await assert.rejects(
      lockedWheels({
        cacheRoot: join(tmp, "cache-c"),
        lockFile: file,
        target,
        pip: pipWith(index.url),
        log,
      }),
      /fails its pinned hash: scratchrun-probe==1\.2\.3/,
    );
  });

  test("no wheel for the image's platform (another OS; a glibc newer than bookworm's) is named", async () => {
    for (const name of ["scratchrun_plat", "scratchrun_new"]) {
      const file = lockFile(`plat-${name}`, "scratchrun-probe", [
        pin.scratchrun_probe!,
        pin[name]!,
      ]);
      await assert.rejects(
        lockedWheels({
          cacheRoot: join(tmp, `cache-${name}`),
          lockFile: file,
          target,
          pip: pipWith(index.url),
          log,
        }),
        new RegExp(`no wheel of ${name.replace(/_/g, "-")}==\\S+ for the image's platform`),
      );
    }
  });

  test("an index that does not answer is 'no index' with pip's reason, in one line", async () => {
    const cacheRoot = join(tmp, "cache-d");
    const file = lockFile("down", "scratchrun-probe", [pin.scratchrun_probe!]);
    const dead = `http://127.0.0.1:${await deadPort()}/simple/`;
    const got = await lockedWheels({ cacheRoot, lockFile: file, target, pip: pipWith(dead), log });
    assert.equal(got.kind, "no-index");
    const reason = got.kind === "no-index" ? got.reason : "";
    assert.match(
      reason,
      /did not answer while fetching scratchrun-probe==1\.2\.3: .*(refused|Max retries|NewConnection)/i,
    );
    const note = noIndexNote(reason);
    assert.ok(!note.includes("\n"));
    assert.equal(noIndexReason(["other", note]), reason, "doctor reads pip's reason back");
    assert.equal(existsSync(cacheDirFor(cacheRoot, "", target)), false);
  });
});

describe("pip's failures, read (pure)", () => {
  test("each kind, from pip's own wording", () => {
    const hash =
      "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. ...\n    numpy==2.5.5 from https://f/numpy.whl:\n        Expected sha256 00\n             Got        11\n";
    assert.deepEqual(classifyPipFailure(hash).kind, "hash");
    assert.match(classifyPipFailure(hash).message, /numpy==2\.5\.5/);
    const none =
      "ERROR: Could not find a version that satisfies the requirement x==1 (from versions: 0.9)\nERROR: No matching distribution found for x==1\n";
    assert.equal(classifyPipFailure(none).kind, "no-wheel");
    assert.match(classifyPipFailure(none).message, /the index has: 0\.9/);
    const dns = `WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError(': Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')'\n${none.replace("0.9", "none")}`;
    assert.equal(classifyPipFailure(dns).kind, "unreachable");
    assert.equal(classifyPipFailure("boom\nERROR: something else").kind, "other");
  });
});
