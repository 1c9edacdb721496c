import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, extname, join } from "node:path";
import { describe, it } from "node:test";
import { agentPrestartArgs, prestartInterpreter } from "../../src/backends/prestart.js";
import { runtimeSpec } from "../../src/runtimes/spec.js";
import { manifestSchema, type Manifest } from "../../src/images/manifest.js";
import { IN_IMAGE } from "../../src/runtimes/in-image.js";
import { MATPLOTLIB_CACHE_DIR, PACKAGE_ROOT } from "../../src/images/paths.js";
import { execToolDefinition, extrasSentence } from "../../src/mcp/exec-tool.js";
import { callRuntimesTool } from "../../src/mcp/runtimes-tool.js";
import {
  EXTRAS as EXTRAS_ENTRIES,
  ONCE_CALLED,
  GUEST_SCRIPTS,
  RUNTIME_TABLE,
  runtimeEntry,
  runtimeArgv,
} from "../../src/runtimes/table.js";
import { RUNTIMES } from "../../src/runtimes/names.js";
import { DEFAULT_POLICY } from "../../src/schema/policy.js";
import { imageConfigCheck, runtimeContents } from "../../src/cli/doctor-checks.js";
import { poolOnceCalled, seedFiles } from "../../src/compose/engine-factory.js";

const guestFile = (name: string) => readFileSync(join(PACKAGE_ROOT, "guest", name), "utf8");

const EXTRAS: NonNullable<Manifest["extras"]> = {
  config: "/etc/scratchrun/image.json",
  configSha256: "0".repeat(64),
  debian: { jq: "1.6" },
  "python3.11": { "python3-tabulate": "0.8.9-1" },
  node20: { "is-number": "7.0.0" },
  "python3.12": { requests: "2.31.0" },
  files: [{ path: "/opt/data", files: 2, bytes: 10, sha256: "1".repeat(64) }],
};

const MANIFEST = {
  runtimes: {
    "python3.12": {
      argv: runtimeArgv("python3.12"),
      version: "3.12.1",
      packages: { requests: "2.31.0", numpy: "2.0.0" },
    },
    "python3.11": { argv: runtimeArgv("python3.11"), version: "3.11.2", packages: { numpy: "1" } },
    node20: {
      argv: runtimeArgv("node20"),
      version: "v20.20.2",
      packages: { "is-number": "7.0.0" },
    },
    bash: { argv: runtimeArgv("bash"), version: "5.2.15(1)-release", packages: { jq: "1.6" } },
    "python3.13": {
      argv: runtimeArgv("python3.13"),
      version: "3.13.0",
      packages: { numpy: "2.5.5" },
    },
    node24: { argv: runtimeArgv("node24"), version: "v24.22.3" },
  },
  notes: [],
  extras: EXTRAS,
} as unknown as Manifest;

describe("the runtime table", () => {
  it("has exactly one entry per runtime name", () => {
    assert.deepEqual(Object.keys(RUNTIME_TABLE).sort(), [...RUNTIMES].sort());
    assert.deepEqual(
      EXTRAS_ENTRIES.map((e) => e.runtime),
      (Object.keys(RUNTIME_TABLE) as (keyof typeof RUNTIME_TABLE)[]).filter(
        (r) => RUNTIME_TABLE[r].extras !== null,
      ),
    );
  });

  it("runs every runtime with an interpreter the image holds, and the code file appended", () => {
    const interpreters = new Set<string>([
      IN_IMAGE.python312,
      IN_IMAGE.python313,
      IN_IMAGE.python311,
      IN_IMAGE.node20,
      IN_IMAGE.node24,
      IN_IMAGE.bash,
    ]);
    for (const r of RUNTIMES) {
      const { argv, codeFile } = runtimeEntry(r);
      assert.ok(interpreters.has(argv[0]), `${r}: ${argv[0]} is not an image interpreter`);
      assert.deepEqual(runtimeArgv(r), [...argv]);
      assert.deepEqual(runtimeSpec(r), { argv: [...argv], codeFile });
      assert.equal(codeFile, `main${extname(codeFile)}`, r);
    }
    // A copy: a caller appending to its argv does not change the table.
    runtimeArgv("bash").push("-c");
    assert.deepEqual(runtimeEntry("bash").argv, [IN_IMAGE.bash]);
  });

  it("names each code file with the extension of its language", () => {
    const byFamily: Record<string, string> = { python: ".py", node: ".js", bash: ".sh" };
    for (const r of RUNTIMES) {
      const { codeFile, description } = runtimeEntry(r);
      assert.equal(extname(codeFile), byFamily[description.family], r);
    }
  });

  it("pre-starts an interpreter with a script of its own language that the guest carries", () => {
    assert.deepEqual(GUEST_SCRIPTS, [
      "prestart.py",
      "session.py",
      "prestart.js",
      "session.js",
      "python/scratchrun_display.py",
      "python/scratchrun_mpl.py",
    ]);
    const init = guestFile("init");
    // guest/init picks the microVM template's script by the interpreter's name.
    const cases = [
      ...init.matchAll(/^(\w+)\*\)[^;]*?--prestart "\$prestart" \/run\/scratchrun-(\S+)/gms),
    ];
    assert.ok(cases.length >= 2, "guest/init's pre-start cases not found");
    for (const r of RUNTIMES) {
      const { argv, codeFile, prestartScript } = runtimeEntry(r);
      assert.equal(prestartInterpreter(r), prestartScript === null ? undefined : argv[0]);
      const args = agentPrestartArgs(r, "plain", undefined, "/opt/scratchrun");
      if (prestartScript === null) {
        assert.deepEqual(args, [], r);
        continue;
      }
      assert.deepEqual(args, ["--prestart", argv[0], `/opt/scratchrun/${prestartScript}`]);
      assert.equal(extname(prestartScript), extname(codeFile), r);
      assert.ok(guestFile(prestartScript).length > 0);
      assert.ok(init.includes(`cp /${prestartScript} /newroot/run/scratchrun-${prestartScript}`));
      const picked = cases.find(([, prefix]) => basename(argv[0]).startsWith(prefix!));
      assert.equal(picked?.[2], prestartScript, `guest/init pre-starts ${r} with another script`);
    }
    assert.deepEqual(runtimeEntry("bash").prestartScript, null);
  });

  it("keeps each runtime's image-config additions under its own manifest key", () => {
    const extrasShape = manifestSchema.shape.extras.unwrap().shape;
    const keys = Object.keys(extrasShape).filter(
      (k) => !["config", "configSha256", "files"].includes(k),
    );
    assert.deepEqual(EXTRAS_ENTRIES.map((e) => e.extras.key).sort(), keys.sort());
    // The runtimes without an entry are the ones the image config does not extend.
    assert.deepEqual(
      RUNTIMES.filter((r) => runtimeEntry(r).extras === null),
      ["python3.13", "node24"],
    );
  });

  it("promises models only what the image recipe installs", () => {
    const recipe = (f: string) =>
      readFileSync(join(PACKAGE_ROOT, "images", "rootfs", f), "utf8")
        .split("\n")
        .map((l) => l.trim());
    const packages = recipe("packages.txt");
    const lockList = recipe("python-requirements.in");
    const debian: Record<string, string> = { pillow: "python3-pil" };
    for (const r of RUNTIMES) {
      const { preinstalled, onlyWith } = runtimeEntry(r).description;
      if (!preinstalled) continue;
      // A runtime's stack is Debian's (promised always) or the lock's (promised only when the
      // image holds it: `onlyWith`).
      if (onlyWith) {
        for (const name of preinstalled.split(", "))
          assert.ok(lockList.includes(name), `${r}: ${name} is not in python-requirements.in`);
        assert.ok(lockList.includes(onlyWith));
        continue;
      }
      assert.ok(packages.includes(r), `${r} is not a Debian package of the recipe`);
      for (const name of preinstalled.split(", "))
        assert.ok(packages.includes(debian[name] ?? `python3-${name}`), `${r}: ${name}`);
    }
  });
});

describe("what the table's readers say (pinned: these reach models and operators)", () => {
  const description = (runtimes: readonly (typeof RUNTIMES)[number][]) =>
    execToolDefinition("namespace", "none", { ...DEFAULT_POLICY, runtimes: [...runtimes] })
      .description;

  const PY312 =
    "numpy, pandas, matplotlib, scipy, pillow, scikit-learn, sympy, seaborn, statsmodels, requests, beautifulsoup4, openpyxl";
  it("scratchrun_exec names every runtime, with each Python's packages", () => {
    assert.ok(
      description(RUNTIMES).includes(
        ` Runtimes: python3.12, python3.11 and python3.13 (python3.12 and python3.13 have ${PY312}; python3.11 has numpy, pandas, matplotlib, pillow, scipy), node20 and node24, bash. `,
      ),
      description(RUNTIMES),
    );
    assert.ok(
      description(["bash", "python3.11"]).includes(
        " Runtimes allowed to you: bash, python3.11 (numpy, pandas, matplotlib, pillow, scipy). ",
      ),
    );
    assert.ok(description(["node20"]).includes(" Runtimes allowed to you: node20. "));
  });

  it("an image whose python3.12 has the standard library only says so, not the lock's stack", () => {
    const stdlibOnly = {
      ...MANIFEST.runtimes,
      "python3.12": { ...MANIFEST.runtimes["python3.12"], packages: { pip: "23.2.1" } },
    };
    const withStack = {
      ...MANIFEST.runtimes,
      "python3.12": { ...MANIFEST.runtimes["python3.12"], packages: { numpy: "2.5.5" } },
    };
    const d = (image: Manifest["runtimes"]) =>
      execToolDefinition("namespace", "none", DEFAULT_POLICY, undefined, image).description;
    assert.ok(
      d(stdlibOnly).includes(
        `(python3.12 has the standard library only on this server; python3.11 has numpy, pandas, matplotlib, pillow, scipy; python3.13 has ${PY312})`,
      ),
      d(stdlibOnly),
    );
    assert.ok(d(withStack).includes(`python3.12 and python3.13 have ${PY312};`));
  });

  it("scratchrun_exec and scratchrun_runtimes list the operator's additions per runtime", () => {
    assert.equal(
      extrasSentence(EXTRAS),
      "Also installed on this server: bash: jq; python3.11: python3-tabulate; python3.12: requests; node20 (require() or import): is-number; files: /opt/data.",
    );
    const text = callRuntimesTool({
      options: { runtimes: { runtimes: MANIFEST.runtimes, notes: [], extras: EXTRAS } },
    }).content[0]!.text;
    assert.equal(
      text.split("\n").at(-1),
      "added by this server's operator: bash (Debian packages): jq 1.6; python3.11 (Debian packages): python3-tabulate 0.8.9-1; python3.12: requests 2.31.0; node20 (npm packages: require() or import from any file): is-number 7.0.0; files: /opt/data (10 bytes)",
    );
  });

  it("scratchrun_runtimes says each kept warm pool's state and when they were all first full", () => {
    const pools = {
      kinds: [
        {
          kind: "bash/plain",
          runtime: "bash" as const,
          state: "full" as const,
          ready: 1,
          size: 1,
          since: "2026-12-04T04:00:01.000Z",
        },
        {
          kind: "python3.12/preimport",
          runtime: "python3.12" as const,
          state: "building" as const,
          ready: 0,
          size: 1,
          since: "2026-12-04T04:00:02.000Z",
        },
        {
          kind: "node24/plain",
          runtime: "node24" as const,
          state: "off" as const,
          ready: 0,
          size: 0,
          since: "2026-12-04T04:00:00.000Z",
        },
      ],
      fullAfterMs: null,
    };
    const r = callRuntimesTool({
      options: { runtimes: { runtimes: MANIFEST.runtimes, notes: [] } },
      backend: { pools: () => pools },
    });
    assert.equal(
      r.content[0]!.text.split("\n").at(-1),
      "warm pools: bash/plain full (1/1) since 2026-12-04T04:00:01.000Z, python3.12/preimport building (0/1) since 2026-12-04T04:00:02.000Z; not all full yet",
    );
    assert.deepEqual((r.structuredContent as { pools?: unknown }).pools, pools);
    const full = callRuntimesTool({
      options: { runtimes: { runtimes: MANIFEST.runtimes, notes: [] } },
      backend: { pools: () => ({ kinds: [], fullAfterMs: 41_234 }) },
    });
    assert.match(
      full.content[0]!.text,
      /warm pools: none kept; all first full 41\.2 s after start$/,
    );
  });

  it("the doctor marks added packages, and lists python3.11's Debian packages apart", () => {
    assert.equal(
      runtimeContents(MANIFEST, "bash"),
      "5.2.15(1)-release; packages: jq 1.6 (image config)",
    );
    assert.equal(
      runtimeContents(MANIFEST, "python3.12"),
      "3.12.1; packages: requests 2.31.0 (image config), numpy 2.0.0",
    );
    assert.equal(
      runtimeContents(MANIFEST, "node20"),
      "v20.20.2; packages: is-number 7.0.0 (image config)",
    );
    assert.equal(
      runtimeContents(MANIFEST, "python3.11"),
      "3.11.2; packages: numpy 1; from the image config: python3-tabulate 0.8.9-1",
    );
    assert.equal(
      runtimeContents({ ...MANIFEST, extras: undefined }, "bash"),
      "5.2.15(1)-release; packages: jq 1.6",
    );
    const check = imageConfigCheck({}, { ok: true, stale: null, dir: "/i", manifest: MANIFEST });
    assert.equal(
      check.detail,
      "/etc/scratchrun/image.json: built; adds 1 Debian, 1 python3.11, 1 python3.12 and 1 npm package(s), 1 file entry",
    );
  });

  it("seeds the Python runtimes' calls with the image's matplotlib font caches, and no other runtime's", () => {
    const rootfs = mkdtempSync(join(tmpdir(), "sr-unit-seed-"));
    try {
      assert.deepEqual(seedFiles(rootfs), { "python3.12": [], "python3.11": [], "python3.13": [] });
      mkdirSync(join(rootfs, MATPLOTLIB_CACHE_DIR), { recursive: true });
      // One cache per matplotlib version: Debian's (python3.11) and the lock's (python3.12, 3.13).
      writeFileSync(join(rootfs, MATPLOTLIB_CACHE_DIR, "fontlist-v330.json"), "{}");
      writeFileSync(join(rootfs, MATPLOTLIB_CACHE_DIR, "fontlist-v3.11.0.json"), "[]");
      writeFileSync(join(rootfs, MATPLOTLIB_CACHE_DIR, "other.json"), "{}");
      const seeds = seedFiles(rootfs);
      assert.deepEqual(Object.keys(seeds).sort(), ["python3.11", "python3.12", "python3.13"]);
      for (const r of ["python3.11", "python3.12", "python3.13"] as const)
        assert.deepEqual(
          seeds[r]?.map((f) => [f.path, f.mode, Buffer.from(f.content).toString()]).sort(),
          [
            ["/home/user/.cache/matplotlib/fontlist-v3.11.0.json", 0o644, "[]"],
            ["/home/user/.cache/matplotlib/fontlist-v330.json", 0o644, "{}"],
          ],
        );
    } finally {
      rmSync(rootfs, { recursive: true, force: true });
    }
  });

  it("pools python3.13 and node24 once called, the product page's four from the start, unless SCRATCHRUN_POOL_SIZE names them", () => {
    assert.deepEqual(ONCE_CALLED, ["python3.13", "node24"]);
    for (const r of RUNTIMES)
      assert.equal(runtimeEntry(r).pool, ONCE_CALLED.includes(r) ? "once-called" : "at-start", r);
    assert.deepEqual(poolOnceCalled({}), ["python3.13", "node24"]);
    assert.deepEqual(poolOnceCalled({ SCRATCHRUN_POOL_SIZE: "2" }), ["python3.13", "node24"]);
    assert.deepEqual(poolOnceCalled({ SCRATCHRUN_POOL_SIZE: "bash=1,python3.13=2" }), ["node24"]);
    assert.deepEqual(poolOnceCalled({ SCRATCHRUN_POOL_SIZE: "node24=0,python3.13=1" }), []);
  });
});
