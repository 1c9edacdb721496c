import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { installExtraFiles } from "../../src/images/extra-files.js";

// Extra files are copied in by a build jail whose / is the image: a symlink in the image resolves
// inside the image, never on the host, and an extra file adds without replacing. Run against a
// skeleton image (the host's /usr mounted read-only for the tools, its own writable /etc, /opt,
// /var) so nothing real is written.
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-extra-files-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

function skeleton(name: string): string {
  const root = join(tmp, name);
  for (const d of ["usr", "etc", "opt", "var", "proc", "dev", "tmp", "home/user", "run/scratchrun"])
    mkdirSync(join(root, d), { recursive: true });
  for (const l of ["bin", "lib", "lib64", "sbin"]) symlinkSync(`usr/${l}`, join(root, l));
  writeFileSync(join(root, "etc/passwd"), "root:x:0:0::/root:/bin/bash\n");
  return root;
}
const hostUsr = [{ src: "/usr", dest: "/usr" }];
const log = () => {};

function source(name: string, files: Record<string, string>, mode = 0o600): string {
  const dir = join(tmp, "src", name);
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(dir, rel, ".."), { recursive: true });
    writeFileSync(join(dir, rel), text);
    chmodSync(join(dir, rel), mode);
  }
  return dir;
}

describe("extra files: copied in by the build jail", () => {
  test("a file and a directory land where named, root-owned, world-readable, special bits gone", async () => {
    const root = skeleton("ok");
    const dir = source("data", { "a.txt": "A", "sub/b.csv": "1,2\n" });
    const single = join(source("single", { "font.ttf": "ttf" }), "font.ttf");
    chmodSync(join(dir, "sub/b.csv"), 0o4777);
    await installExtraFiles(
      root,
      [
        { target: "/opt/team/data", source: dir },
        { target: "/usr-local-share/fonts/font.ttf", source: single },
      ],
      log,
      hostUsr,
    );
    assert.equal(readFileSync(join(root, "opt/team/data/a.txt"), "utf8"), "A");
    assert.equal(readFileSync(join(root, "opt/team/data/sub/b.csv"), "utf8"), "1,2\n");
    assert.equal(readFileSync(join(root, "usr-local-share/fonts/font.ttf"), "utf8"), "ttf");
    const a = lstatSync(join(root, "opt/team/data/a.txt"));
    assert.equal(a.uid, 0);
    assert.equal(a.mode & 0o777, 0o644, "a private 0600 source becomes readable by the sandbox");
    assert.equal(lstatSync(join(root, "opt/team/data/sub/b.csv")).mode & 0o7777, 0o755);
    assert.equal(lstatSync(join(root, "opt/team")).mode & 0o777, 0o755);
  });

  test("a path the image already has is refused, naming the entry; nothing is replaced", async () => {
    const root = skeleton("exists");
    const f = join(source("passwd", { passwd: "evil::0:0\n" }), "passwd");
    await assert.rejects(
      installExtraFiles(root, [{ target: "/etc/passwd", source: f }], log, hostUsr),
      /files\["\/etc\/passwd"\]: the image already has \/etc\/passwd; extra files add to the image and never replace/,
    );
    assert.equal(readFileSync(join(root, "etc/passwd"), "utf8"), "root:x:0:0::/root:/bin/bash\n");
  });

  test("an absolute symlink in the image resolves inside the image, never on the host", async () => {
    const root = skeleton("symlink");
    // Outside /tmp: the jail's /tmp is its own tmpfs (and refused as a target anyway).
    const hostDir = `/var/lib/scratchrun-test-victim-${process.pid}`;
    mkdirSync(hostDir);
    after(() => rmSync(hostDir, { recursive: true, force: true }));
    // In the image /var/lib/team points at an absolute path that also exists on the host.
    mkdirSync(join(root, "var/lib"), { recursive: true });
    symlinkSync(hostDir, join(root, "var/lib/team"));
    const f = join(source("payload", { p: "payload" }), "p");
    await installExtraFiles(root, [{ target: "/var/lib/team/p", source: f }], log, hostUsr);
    assert.equal(existsSync(join(hostDir, "p")), false, "nothing was written on the host");
    assert.equal(readFileSync(join(root, hostDir.slice(1), "p"), "utf8"), "payload");
  });

  test("a path that resolves under a directory sandboxes mount over is refused", async () => {
    const root = skeleton("hidden");
    symlinkSync("/tmp", join(root, "var/tmp-link"));
    const f = join(source("lost", { l: "x" }), "l");
    await assert.rejects(
      installExtraFiles(root, [{ target: "/var/tmp-link/l", source: f }], log, hostUsr),
      /files\["\/var\/tmp-link\/l"\]: resolves to \/tmp\/l in the image, which every sandbox mounts over/,
    );
  });
});
