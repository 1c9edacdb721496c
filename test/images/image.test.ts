import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { LocatedRootfs } from "../../src/images/locate.js";
import { runtimeArgv } from "../../src/runtimes/table.js";
import { checkInRootfs, runInRootfs } from "../../src/images/rootfs-exec.js";
import { installedPackages } from "../../src/images/wheelhouse.js";
import { copiedElfObjects, missingSharedLibs } from "../../src/images/runtimes.js";
import { requireImage } from "./built-image.js";

let image: LocatedRootfs;
const out = mkdtempSync(join(tmpdir(), "scratchrun-image-"));
before(() => {
  image = requireImage();
});
after(() => rmSync(out, { recursive: true, force: true }));

const inImage = (argv: string[]) =>
  checkInRootfs({ rootfs: image.dir, argv }).then((s) => s.trim());

describe("runtimes inside the built image", () => {
  test("python3.12 is 3.12.x and matches the manifest", async () => {
    const v = await inImage([
      ...runtimeArgv("python3.12"),
      "-c",
      "import platform; print(platform.python_version())",
    ]);
    assert.match(v, /^3\.12\.\d+$/);
    assert.equal(image.manifest.runtimes["python3.12"].version, v);
  });

  test("python3.12 has its C extensions (ssl, sqlite3, ctypes, compression, decimal)", async () => {
    const code =
      "import ssl, sqlite3, ctypes, zlib, bz2, lzma, json, decimal\n" +
      "print(sqlite3.connect(':memory:').execute('select 1+1').fetchone()[0], ssl.OPENSSL_VERSION.split()[0])";
    assert.equal(await inImage([...runtimeArgv("python3.12"), "-c", code]), "2 OpenSSL");
  });

  test("python3.12 and python3.11 are reachable by name on PATH", async () => {
    const which = await inImage(["/bin/bash", "-c", "command -v python3.12 python3.11 node"]);
    assert.deepEqual(which.split("\n"), [
      "/usr/local/bin/python3.12",
      "/usr/bin/python3.11",
      "/usr/local/bin/node",
    ]);
  });

  test("python3.11 is 3.11.x and matches the manifest", async () => {
    const v = await inImage([
      ...runtimeArgv("python3.11"),
      "-c",
      "import platform; print(platform.python_version())",
    ]);
    assert.match(v, /^3\.11\.\d+$/);
    assert.equal(image.manifest.runtimes["python3.11"].version, v);
  });

  test("node is v20 and matches the manifest", async () => {
    const v = await inImage([
      ...runtimeArgv("node20"),
      "-e",
      "process.stdout.write(process.version)",
    ]);
    assert.match(v, /^v20\.\d+\.\d+$/);
    assert.equal(image.manifest.runtimes.node20.version, v);
  });

  test("bash runs and matches the manifest", async () => {
    const v = await inImage([...runtimeArgv("bash"), "-c", 'echo "$BASH_VERSION"']);
    assert.match(v, /^5\./);
    assert.equal(image.manifest.runtimes.bash.version, v);
  });

  test("python3.11 imports the scientific stack at the manifest's versions", async () => {
    const code =
      "import json, numpy, scipy, pandas, matplotlib, PIL\n" +
      "print(json.dumps({'numpy': numpy.__version__, 'scipy': scipy.__version__, 'pandas': pandas.__version__, 'matplotlib': matplotlib.__version__, 'Pillow': PIL.__version__}))";
    const seen = JSON.parse(await inImage([...runtimeArgv("python3.11"), "-c", code])) as Record<
      string,
      string
    >;
    const listed = image.manifest.runtimes["python3.11"].packages ?? {};
    for (const [name, version] of Object.entries(seen)) assert.equal(listed[name], version, name);
  });

  test("the manifest's package lists are what the interpreters report now", async () => {
    assert.deepEqual(
      await installedPackages(image.dir, runtimeArgv("python3.11")[0] ?? ""),
      image.manifest.runtimes["python3.11"].packages,
    );
    assert.deepEqual(
      await installedPackages(image.dir, runtimeArgv("python3.12")[0] ?? ""),
      image.manifest.runtimes["python3.12"].packages,
    );
  });

  test("matplotlib on python3.11 saves a PNG headless (Agg by default)", async () => {
    const code =
      "import matplotlib.pyplot as plt, matplotlib\n" +
      "plt.plot([0, 1, 2], [2, 0, 1]); plt.title('scratchrun'); plt.savefig('/home/user/plot.png')\n" +
      "print(matplotlib.get_backend())";
    const r = await runInRootfs({
      rootfs: image.dir,
      argv: [...runtimeArgv("python3.11"), "-c", code],
      binds: [{ src: out, dest: "/home/user", rw: true }],
      env: { MPLBACKEND: "" }, // the image's own default must be Agg, not only the env var
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim().toLowerCase(), "agg");
    const png = readFileSync(join(out, "plot.png"));
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    assert.ok(png.length > 5000, `PNG is only ${png.length} bytes`);
  });

  test("every shared library the copied runtimes load is in the image", async () => {
    const objects = await copiedElfObjects(image.dir);
    assert.ok(objects.length > 30);
    assert.deepEqual(await missingSharedLibs(image.dir, objects), []);
  });
});

describe("image layout", () => {
  test("user 1000:1000 with home /home/user", () => {
    const passwd = readFileSync(join(image.dir, "etc/passwd"), "utf8");
    assert.match(passwd, /^user:x:1000:1000:[^:]*:\/home\/user:\/bin\/bash$/m);
    assert.match(readFileSync(join(image.dir, "etc/group"), "utf8"), /^user:x:1000:$/m);
    const home = statSync(join(image.dir, "home/user"));
    assert.equal(home.uid, 1000);
    assert.equal(home.gid, 1000);
  });

  test("mount points exist and are empty", () => {
    for (const dir of ["home/user", "run/scratchrun", "opt/scratchrun"])
      assert.deepEqual(readdirSync(join(image.dir, dir)), [], dir);
  });

  test("no apt lists, man pages or foreign locales", () => {
    assert.deepEqual(
      readdirSync(join(image.dir, "var/lib/apt/lists")).filter(
        (n) => n !== "partial" && n !== "lock",
      ),
      [],
    );
    assert.equal(existsSync(join(image.dir, "usr/share/man/man1")), false);
    const locales = existsSync(join(image.dir, "usr/share/locale"))
      ? readdirSync(join(image.dir, "usr/share/locale"))
      : [];
    assert.deepEqual(
      locales.filter((n) => !n.endsWith(".alias")),
      [],
    );
  });

  test("no compiler or CPython test suite was left in", () => {
    assert.equal(existsSync(join(image.dir, "usr/bin/gcc")), false);
    assert.equal(existsSync(join(image.dir, "opt/python3.12/lib/python3.12/test")), false);
    const site = readdirSync(join(image.dir, "opt/python3.12/lib/python3.12/site-packages"));
    assert.deepEqual(
      site.filter((n) => n.endsWith(".pth")),
      [],
    );
  });

  test("the copied runtimes are readable by the unprivileged sandbox uid", () => {
    const unreadable: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        if (e.isSymbolicLink()) continue;
        const mode = statSync(p).mode;
        if ((mode & 0o004) === 0 || (e.isDirectory() && (mode & 0o001) === 0)) unreadable.push(p);
        if (e.isDirectory()) walk(p);
      }
    };
    walk(join(image.dir, "opt"));
    assert.deepEqual(unreadable, []);
    assert.equal(statSync(image.dir).mode & 0o005, 0o005);
  });

  test("the manifest records the size and what happened to python3.12's packages", () => {
    assert.ok(image.manifest.sizeBytes > 100 * 1024 * 1024);
    if (image.manifest.python312PackagesFrom === "none")
      assert.ok(image.manifest.notes.some((n) => n.startsWith("PyPI not reachable")));
    else assert.ok("numpy" in (image.manifest.runtimes["python3.12"].packages ?? {}));
  });
});
