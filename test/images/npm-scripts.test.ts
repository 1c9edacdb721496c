import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server } from "node:net";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { runNpmInstallScripts } from "../../src/images/npm.js";
import { SANDBOX_UID_BASE, SANDBOX_UID_COUNT } from "../../src/jail/uids.js";
import { customImage } from "../helpers/custom-image.js";

// An npm package's install script is package code running at build time. It runs in the build
// jail: a host uid of its own, no capabilities, the image read-only, its package directory the
// only writable place, no network, no user namespaces. The probe package reports what it could
// do; a listener on the host's loopback records whether anything reached it.
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-npm-scripts-"));
chmodSync(tmp, 0o755); // the script's uid must reach the tree it builds
let listener: Server;
let port = 0;
const reached: string[] = [];

before(async () => {
  listener = createServer((s) => {
    reached.push("connection");
    s.destroy();
  });
  await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
  port = (listener.address() as AddressInfo).port;
});
after(async () => {
  await new Promise((r) => listener.close(r));
  rmSync(tmp, { recursive: true, force: true });
});

const PROBE = (p: number) => `
const fs = require("node:fs");
const out = { uid: process.getuid(), gid: process.getgid() };
const attempt = (name, fn) => { try { fn(); out[name] = "done"; } catch (e) { out[name] = e.code || e.message; } };
attempt("writeImage", () => fs.writeFileSync("/usr/local/lib/pwned", "x"));
attempt("writeEtc", () => fs.writeFileSync("/etc/pwned", "x"));
attempt("writeOwn", () => fs.writeFileSync(__dirname + "/built.txt", "built"));
attempt("setuid", () => fs.chmodSync(__dirname + "/built.txt", 0o4755));
attempt("userns", () => require("node:child_process").execFileSync("/usr/bin/unshare", ["--user", "true"], { stdio: "pipe" }));
const s = require("node:net").connect(${p}, "127.0.0.1");
s.on("connect", () => { out.net = "connected"; finish(); });
s.on("error", (e) => { out.net = e.code; finish(); });
function finish() { fs.writeFileSync(__dirname + "/report.json", JSON.stringify(out)); process.exit(0); }
`;

describe("npm install scripts run in the build jail", () => {
  test("unprivileged uid, image read-only, only its own directory writable, no network", async () => {
    const image = await customImage();
    const npmDir = join(tmp, "npm");
    const probe = join(npmDir, "node_modules", "probe");
    mkdirSync(probe, { recursive: true });
    writeFileSync(
      join(npmDir, "package.json"),
      JSON.stringify({ name: "t", version: "0.0.0", dependencies: { probe: "1.0.0" } }),
    );
    writeFileSync(
      join(probe, "package.json"),
      JSON.stringify({ name: "probe", version: "1.0.0", scripts: { install: "node install.js" } }),
    );
    writeFileSync(join(probe, "install.js"), PROBE(port));
    const lines: string[] = [];
    await runNpmInstallScripts(image.dir, npmDir, (l) => lines.push(l));

    const report = JSON.parse(readFileSync(join(probe, "report.json"), "utf8")) as Record<
      string,
      unknown
    >;
    assert.ok(
      typeof report.uid === "number" &&
        report.uid >= SANDBOX_UID_BASE &&
        report.uid < SANDBOX_UID_BASE + SANDBOX_UID_COUNT,
      `a reserved sandbox uid, not root: ${JSON.stringify(report)}`,
    );
    assert.equal(report.writeImage, "EROFS", "the image is read-only");
    assert.equal(report.writeEtc, "EROFS");
    assert.equal(report.writeOwn, "done", "its own directory is writable");
    assert.notEqual(report.userns, "done", "no user namespace");
    assert.match(String(report.net), /^(ECONNREFUSED|ENETUNREACH)$/, "its own empty network");
    assert.deepEqual(reached, [], "nothing reached the host's loopback");
    assert.equal(existsSync(join(image.dir, "usr/local/lib/pwned")), false);

    // Afterwards the tree is root's again, and no setuid bit survives.
    const built = lstatSync(join(probe, "built.txt"));
    assert.equal(built.uid, 0);
    assert.equal(built.mode & 0o7000, 0, "setuid stripped");
    assert.equal(lstatSync(npmDir).uid, 0);
  });

  test("a failing install script fails the build, naming it, with its output", async () => {
    const image = await customImage();
    const npmDir = join(tmp, "npm-fail");
    const bad = join(npmDir, "node_modules", "bad");
    mkdirSync(bad, { recursive: true });
    writeFileSync(
      join(npmDir, "package.json"),
      JSON.stringify({ name: "t", version: "0.0.0", dependencies: { bad: "1.0.0" } }),
    );
    writeFileSync(
      join(bad, "package.json"),
      JSON.stringify({
        name: "bad",
        version: "1.0.0",
        scripts: { install: "echo needs-a-compiler >&2; exit 7" },
      }),
    );
    await assert.rejects(
      runNpmInstallScripts(image.dir, npmDir, () => {}),
      /node20\.packages: an install script failed in the build jail[\s\S]*needs-a-compiler/,
    );
    assert.equal(lstatSync(npmDir).uid, 0, "root's again after a failure too");
  });
});
