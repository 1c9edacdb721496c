// What setup's last step installs for every user (issue 46, decision 0018), into a prefix of the
// test's own (SCRATCHRUN_PREFIX; setup's is /usr/local): a world-readable copy that links nowhere
// outside itself (never into this checkout), scratchrun and scratchrun-mcp that an ordinary user
// made with useradd runs, the user who ran it through sudo added to the group scratchrun, and the
// systemd unit, checked by `systemd-analyze verify` where it exists, by a parse test otherwise.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { parseUnit } from "../../src/cli/service-unit.js";
import { SETTINGS } from "../../src/schema/settings/table.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { makeUser, type TestUser } from "../helpers/users.js";

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");

let prefix: string;
let invoker: TestUser;
let stranger: TestUser;
let first: { status: number | null; stderr: string };

const install = (env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [CLI, "service", "install"], {
    env: { ...process.env, SCRATCHRUN_PREFIX: prefix, ...env },
    encoding: "utf8",
    timeout: 300_000,
  });

/** Every path under `dir`, symlinks not followed. */
function walk(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    out.push(p);
    if (e.isDirectory()) out.push(...walk(p));
  }
  return out;
}

before(() => {
  prefix = mkdtempSync(join(tmpdir(), "sr-prefix-"));
  spawnSync("chmod", ["755", prefix]);
  invoker = makeUser("inst-sudo");
  stranger = makeUser("inst-user");
  const t0 = Date.now();
  first = install({ SUDO_USER: invoker.name });
  process.stderr.write(`service install: ${((Date.now() - t0) / 1000).toFixed(2)} s\n`);
});

after(() => {
  invoker?.remove();
  stranger?.remove();
  rmSync(prefix, { recursive: true, force: true });
});

describe("scratchrun service install (setup's last step)", () => {
  test("copies ScratchRun world-readable, and nothing in it points outside it", () => {
    assert.equal(first.status, 0, first.stderr);
    const lib = join(prefix, "lib", "scratchrun");
    const current = join(lib, "current");
    assert.ok(lstatSync(current).isSymbolicLink());
    const copy = realpathSync(current);
    assert.equal(dirname(copy), lib);
    for (const p of walk(copy)) {
      const st = lstatSync(p);
      if (st.isSymbolicLink()) {
        const target = resolve(dirname(p), readlinkSync(p));
        assert.ok(target.startsWith(`${copy}/`), `${p} -> ${target} stays in the copy`);
        continue;
      }
      assert.equal(st.uid, 0, `${p} is root's`);
      assert.equal(st.mode & 0o022, 0, `${p} is writable by root alone`);
      assert.equal(st.mode & 0o004, 0o004, `${p} is readable by everyone`);
      if (st.isDirectory()) assert.equal(st.mode & 0o001, 0o001, `${p} can be entered`);
    }
    // What it runs on is there; what only develops it is not.
    for (const f of [
      "dist/src/bin/scratchrun-mcp.js",
      "build/guest/agent",
      "build/host/scratchrun-peercred.node",
      "images/rootfs/packages.txt",
      "node_modules/@modelcontextprotocol/server/package.json",
      "node_modules/zod/package.json",
      "node_modules/pino/package.json",
    ])
      assert.ok(existsSync(join(copy, f)), f);
    for (const dev of [
      "typescript",
      "eslint",
      "@modelcontextprotocol/sdk",
      "deno",
      "test",
      "bench",
    ])
      assert.equal(
        existsSync(join(copy, "node_modules", dev)) || existsSync(join(copy, dev)),
        false,
        dev,
      );
    assert.ok(
      !copy.startsWith(REPO_ROOT) &&
        !readFileSync(join(prefix, "bin", "scratchrun"), "utf8").includes(REPO_ROOT),
    );
  });

  test("scratchrun and scratchrun-mcp run for an ordinary user; the one refuses as it should, writing nothing", () => {
    const home = mkdtempSync(join(tmpdir(), "sr-user-home-"));
    chownSync(home, stranger.uid, stranger.gid);
    try {
      const env = { PATH: `${join(prefix, "bin")}:/usr/bin:/bin`, HOME: home };
      const sh = (cmd: string) =>
        spawnSync(
          "setpriv",
          [`--reuid=${stranger.uid}`, `--regid=${stranger.gid}`, "--init-groups", "sh", "-c", cmd],
          { env, input: "", encoding: "utf8" },
        );
      const usage = sh("scratchrun --help");
      assert.equal(usage.status, 0, usage.stderr);
      assert.match(usage.stdout, /scratchrun daemon/);
      const mcp = sh("scratchrun-mcp");
      assert.equal(mcp.status, 1);
      assert.equal(mcp.stdout, "");
      assert.equal(mcp.stderr.trim().split("\n").length, 1, mcp.stderr);
      assert.match(
        mcp.stderr,
        new RegExp(`no local service answers at ${SETTINGS.SCRATCHRUN_SOCKET.default}`),
      );
      assert.deepEqual(readdirSync(home), []);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  test("the user who ran it through sudo is added to the group scratchrun, and told", () => {
    assert.match(
      first.stderr,
      new RegExp(`added ${invoker.name} to the group scratchrun \\(gid \\d+\\): log in again`),
    );
    const groups = spawnSync("id", ["-nG", invoker.name], { encoding: "utf8" }).stdout;
    assert.ok(groups.trim().split(/\s+/).includes("scratchrun"), groups);
  });

  test("the systemd unit: systemd-analyze verify where it exists, a parse otherwise", () => {
    const unit = join(prefix, "lib", "systemd", "system", "scratchrun.service");
    const text = readFileSync(unit, "utf8");
    assert.deepEqual(parseUnit(text).get("Service")?.get("ExecStart"), [
      `${join(prefix, "bin", "scratchrun")} daemon`,
    ]);
    const analyze = spawnSync("systemd-analyze", ["verify", unit], { encoding: "utf8" });
    if (analyze.error) {
      process.stderr.write("service install: no systemd-analyze here; the parse test stands\n");
      return;
    }
    assert.equal(analyze.status, 0, analyze.stderr);
    assert.equal(
      analyze.stderr
        .split("\n")
        .filter((l) => l.includes("scratchrun.service"))
        .join("\n"),
      "",
      "systemd has nothing to say about the unit",
    );
  });

  test("again: up to date; a copy older than the one before is removed", () => {
    const lib = join(prefix, "lib", "scratchrun");
    mkdirSync(join(lib, "0.0.0-old"));
    const again = install();
    assert.equal(again.status, 0, again.stderr);
    assert.match(again.stderr, /is up to date/);
    assert.deepEqual(
      readdirSync(lib).sort(),
      [readlinkSync(join(lib, "current")), "current"].sort(),
    );
  });
});
