/**
 * Which modules a runtime's pre-imported interpreter imports before it waits for a call
 * (docs/decisions/0011-preimport.md), chosen from what the image's manifest says is installed in
 * that runtime: any Python runtime whose image has a distribution below gets it, python3.12 as
 * soon as a wheelhouse or PyPI put the packages there. Each entry also says what a fresh import
 * of it reads (environment variables, files): a call that changes any of those gets a fresh
 * interpreter, since the pre-imported one read them before the call existed.
 */
import type { RuntimeInfo } from "./manifest.js";

export interface PreimportEntry {
  /** The distribution's name as importlib.metadata reports it (compared PEP 503-normalised). */
  distribution: string;
  /** Imported in this order. */
  modules: readonly string[];
  /**
   * Environment variables its import reads, as name prefixes ("NAME=" is one exact name).
   * Measured: Python's os.environ lookups and libc getenv() calls while importing it and drawing
   * its hot path once (decision 0011 has the method).
   */
  env: readonly string[];
  /** Files (or directories) relative to the working directory that its import reads if present. */
  files?: readonly string[];
}

/** What importing anything may read: sysconfig's layout variables, PATH (pandas runs `uname -p`
 * through platform at import), the time zone modules may cache. */
const ANY_IMPORT_ENV = ["PATH=", "TZ=", "DEB_PYTHON_", "_PYTHON_"] as const;

export const PREIMPORT_TABLE: readonly PreimportEntry[] = [
  {
    distribution: "numpy",
    modules: ["numpy"],
    // OpenBLAS / GNU OpenMP / gfortran runtime settings read when numpy's BLAS loads.
    env: ["NPY_", "NUMPY_", "OPENBLAS_", "GOTO", "OMP_", "GOMP_", "KMP_", "MKL_", "BLIS_"].concat([
      "GFORTRAN_",
      "ACC_",
    ]),
  },
  { distribution: "pandas", modules: ["pandas"], env: ["PANDAS_"] },
  {
    distribution: "matplotlib",
    modules: ["matplotlib", "matplotlib.pyplot"],
    env: ["MPL", "MATPLOTLIBRC=", "XDG_", "FREETYPE_", "PILLOW_", "PYPARSING"],
    files: ["matplotlibrc", ".config/matplotlib"],
  },
];

/** What one runtime's interpreter pre-imports, and what those imports read. */
export interface Preimport {
  modules: string[];
  env: string[];
  /** Absolute paths. */
  files: string[];
}

/** PEP 503 name normalisation ("Pillow" = "pillow", "ruamel.yaml" = "ruamel-yaml"). */
export const normaliseDistribution = (name: string): string =>
  name.toLowerCase().replace(/[-_.]+/g, "-");

/**
 * The pre-import of a runtime from its manifest entry: every table entry whose distribution is
 * installed there, in table order; null when none is (or the runtime is not Python).
 */
export function preimportFor(
  info: RuntimeInfo,
  workdir: string,
  table: readonly PreimportEntry[] = PREIMPORT_TABLE,
): Preimport | null {
  const installed = new Set(Object.keys(info.packages ?? {}).map(normaliseDistribution));
  const entries = table.filter((e) => installed.has(normaliseDistribution(e.distribution)));
  if (entries.length === 0) return null;
  return {
    modules: entries.flatMap((e) => e.modules),
    env: [...new Set([...ANY_IMPORT_ENV, ...entries.flatMap((e) => e.env)])],
    files: entries.flatMap((e) => (e.files ?? []).map((f) => `${workdir}/${f}`)),
  };
}

/** The top-level packages a pre-import brings in ("matplotlib.pyplot" -> "matplotlib"). */
export const topLevelPackages = (p: Preimport): string[] => [
  ...new Set(p.modules.map((m) => m.split(".")[0]!)),
];

const MODULE = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/;
const ENV = /^[A-Za-z_][A-Za-z0-9_]*=?$/;
const PATH = /^(\/[A-Za-z0-9_.-]+)+$/;

export interface PreimportLayout {
  /** Files copied into place before the imports (the image's matplotlib font cache). */
  seed?: { from: string; to: string };
  /** Areas the pre-import leaves as it found them. */
  scratch: readonly string[];
}

/**
 * The agent's `--preimport SPEC` (guest/agent-preimport.h), as a pure function: fields joined by
 * ';', lists by ','. Throws on anything that would not survive that syntax or the kernel command
 * line (no spaces, no separators inside items).
 */
export function renderPreimportSpec(p: Preimport, layout: PreimportLayout): string {
  const check = (items: readonly string[], re: RegExp, what: string) => {
    for (const i of items)
      if (!re.test(i) || i.includes("..")) throw new Error(`bad pre-import ${what}: ${i}`);
    return items.join(",");
  };
  if (p.modules.length === 0) throw new Error("a pre-import needs at least one module");
  const fields = [
    `modules=${check(p.modules, MODULE, "module")}`,
    `env=${check(p.env, ENV, "variable")}`,
    `files=${check(p.files, PATH, "path")}`,
    ...(layout.seed
      ? [`seed=${check([layout.seed.from], PATH, "path")}:${check([layout.seed.to], PATH, "path")}`]
      : []),
    `scratch=${check(layout.scratch, PATH, "path")}`,
  ];
  return fields.filter((f) => !f.endsWith("=")).join(";");
}
