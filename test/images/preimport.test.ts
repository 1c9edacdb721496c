import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { agentPrestartArgs, preimportSpec } from "../../src/backends/prestart.js";
import { kernelCommandLine, type QemuSpec } from "../../src/backends/microvm/qemu-args.js";
import type { RuntimeInfo } from "../../src/images/manifest.js";
import {
  PREIMPORT_TABLE,
  preimportFor,
  renderPreimportSpec,
  topLevelPackages,
} from "../../src/images/preimport.js";
import { requireImage } from "./built-image.js";

/**
 * What a runtime pre-imports comes from what its image's manifest says is installed in it, never
 * from the runtime's name: python3.12 gets exactly python3.11's pre-import once its image has the
 * same packages (a wheelhouse or PyPI at build time).
 */
const py = (packages: Record<string, string>): RuntimeInfo => ({
  argv: ["/opt/python3.12/bin/python3.12"],
  version: "3.12.1",
  packages,
});

describe("pre-import lists from the manifest", () => {
  test("the built image: python3.11 pre-imports numpy, pandas and matplotlib; the rest nothing", () => {
    const { manifest } = requireImage();
    const p311 = preimportFor(manifest.runtimes["python3.11"], "/home/user");
    assert.deepEqual(p311?.modules, ["numpy", "pandas", "matplotlib", "matplotlib.pyplot"]);
    assert.deepEqual(topLevelPackages(p311!), ["numpy", "pandas", "matplotlib"]);
    assert.deepEqual(p311?.files, ["/home/user/matplotlibrc", "/home/user/.config/matplotlib"]);
    for (const v of [
      "MPLBACKEND",
      "MPLCONFIGDIR",
      "OPENBLAS_NUM_THREADS",
      "OMP_NUM_THREADS",
      "PATH=",
      "TZ=",
    ])
      assert.ok(
        p311?.env.some((prefix) => v.startsWith(prefix.replace(/=$/, "")) || v === prefix),
        `${v} is read while importing`,
      );
    assert.equal(preimportFor(manifest.runtimes.node20, "/home/user"), null);
    assert.equal(preimportFor(manifest.runtimes.bash, "/home/user"), null);
    // This image's python3.12 has the standard library only (no PyPI here).
    if (manifest.python312PackagesFrom === "none")
      assert.equal(preimportFor(manifest.runtimes["python3.12"], "/home/user"), null);
  });

  test("python3.12 with the packages gets the same pre-import as python3.11", () => {
    const { manifest } = requireImage();
    const p311 = preimportFor(manifest.runtimes["python3.11"], "/home/user");
    const p312 = preimportFor(
      py({ numpy: "1.26.4", pandas: "2.2.3", matplotlib: "3.9.2", pip: "23.2.1" }),
      "/home/user",
    );
    assert.deepEqual(p312, p311);
  });

  test("only what is installed, in table order, names compared PEP 503-normalised", () => {
    assert.deepEqual(preimportFor(py({ Pandas: "2" }), "/w")?.modules, ["pandas"]);
    assert.deepEqual(preimportFor(py({ MatPlotLib: "3", NumPy: "1" }), "/w")?.modules, [
      "numpy",
      "matplotlib",
      "matplotlib.pyplot",
    ]);
    assert.equal(preimportFor(py({ scipy: "1", pip: "23" }), "/w"), null);
    assert.equal(preimportFor({ argv: ["/bin/bash"], version: "5" }, "/w"), null);
    const custom = preimportFor(py({ "scratchrun-probe": "1" }), "/w", [
      ...PREIMPORT_TABLE,
      { distribution: "scratchrun_probe", modules: ["scratchrun_probe"], env: ["PROBE_"] },
    ]);
    assert.deepEqual(custom?.modules, ["scratchrun_probe"]);
    assert.ok(custom?.env.includes("PROBE_") && custom.env.includes("PATH="));
  });
});

describe("the agent's --preimport SPEC", () => {
  const p = preimportFor(py({ numpy: "1", matplotlib: "3" }), "/home/user")!;

  test("renders every field, one token, and parses back the same", () => {
    const spec = preimportSpec(p);
    assert.doesNotMatch(spec, /\s/);
    const fields = Object.fromEntries(spec.split(";").map((f) => f.split(/=(.*)/s).slice(0, 2)));
    assert.equal(fields.modules, "numpy,matplotlib,matplotlib.pyplot");
    assert.deepEqual(fields.env?.split(","), p.env);
    assert.equal(fields.files, "/home/user/matplotlibrc,/home/user/.config/matplotlib");
    assert.equal(fields.seed, "/usr/share/scratchrun/matplotlib:/home/user/.cache/matplotlib");
    assert.equal(fields.scratch, "/home/user,/tmp,/dev/shm,/run/scratchrun");
  });

  test("refuses what would not survive its syntax or the kernel command line", () => {
    const bad: [string, Parameters<typeof renderPreimportSpec>[0]][] = [
      ["module with a space", { ...p, modules: ["numpy pandas"] }],
      ["module with a separator", { ...p, modules: ["numpy;env=X"] }],
      ["no module", { ...p, modules: [] }],
      ["variable with a comma", { ...p, env: ["A,B"] }],
      ["relative path", { ...p, files: ["matplotlibrc"] }],
      ["path with ..", { ...p, files: ["/home/user/../etc"] }],
      ["path with a separator", { ...p, files: ["/home/user/a;b"] }],
    ];
    for (const [what, bogus] of bad)
      assert.throws(() => renderPreimportSpec(bogus, { scratch: ["/tmp"] }), Error, what);
  });

  test("the agent arguments: python pre-started (with the SPEC for the pre-import), node pre-started, bash not", () => {
    assert.deepEqual(agentPrestartArgs("python3.11", "plain", p, "/opt/scratchrun"), [
      "--prestart",
      "/usr/bin/python3.11",
      "/opt/scratchrun/prestart.py",
    ]);
    assert.deepEqual(agentPrestartArgs("python3.11", "preimport", p, "/opt/scratchrun"), [
      "--prestart",
      "/usr/bin/python3.11",
      "/opt/scratchrun/prestart.py",
      "--preimport",
      preimportSpec(p),
    ]);
    assert.deepEqual(agentPrestartArgs("node20", "plain", undefined, "/s"), [
      "--prestart",
      "/opt/node20/bin/node",
      "/s/prestart.js",
    ]);
    assert.deepEqual(agentPrestartArgs("bash", "plain", undefined, "/s"), []);
    assert.throws(() => agentPrestartArgs("python3.12", "preimport", undefined, "/s"));
  });

  test("a microVM template carries it on the kernel command line as one token", () => {
    const spec: QemuSpec = {
      accel: "tcg",
      guestMb: 320,
      memoryMb: 256,
      tscKhz: null,
      scratchMb: 128,
      tcgCacheMb: 64,
      nic: { mac: "02:00:00:00:00:01", backend: { kind: "none" } },
      prestart: "/usr/bin/python3.11",
      preimport: preimportSpec(p),
    };
    const cmdline = kernelCommandLine(spec).split(" ");
    assert.ok(cmdline.includes(`scratchrun.preimport=${preimportSpec(p)}`));
    assert.throws(() => kernelCommandLine({ ...spec, preimport: "modules=numpy pandas" }));
    assert.throws(() => kernelCommandLine({ ...spec, preimport: 'modules="numpy"' }));
  });
});
