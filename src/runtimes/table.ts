/**
 * The runtimes, one entry each: what every layer needs to run, pre-start, seed, describe and check
 * one. Adding a runtime is its name in src/runtimes/names.ts RUNTIMES, its entry here (a type error
 * until it has one) and its interpreter in the image recipe (docs/ARCHITECTURE.md, "Adding a
 * runtime"). Nothing else branches on a runtime's name.
 */
import { IN_IMAGE } from "./in-image.js";
import { RUNTIMES, type RuntimeName } from "./names.js";

/**
 * The keys of the image manifest's extras that hold what the image config added to a runtime
 * (src/images/manifest.ts keys its extras schema by them).
 */
export type ExtrasKey = "debian" | "python3.11" | "node20" | "python3.12";

/** Files of the image every call of a runtime starts with (src/compose/engine-factory.ts reads them). */
export type Seed = "matplotlib-font-cache";

export interface RuntimeEntry {
  /** The interpreter command inside the image; the engine appends the code file. */
  readonly argv: readonly [string, ...string[]];
  /** Name of the code file in the sandbox, whose extension some interpreters care about. */
  readonly codeFile: string;
  /**
   * The script (guest/) a pooled sandbox's agent pre-starts argv[0] with before the call, or null
   * when the runtime is never pre-started (src/backends/prestart.ts).
   */
  readonly prestartScript: string | null;
  /**
   * The script (guest/) that keeps a session's interpreter between its calls, each call's code
   * run in it (docs/decisions/0013-sessions.md); null when a session's calls run as processes of
   * their own (files kept, no interpreter state).
   */
  readonly sessionScript: string | null;
  /**
   * How an uncaught error reads at the end of its stderr: "python", a traceback the engine makes
   * the call's `error` output (docs/decisions/0017-outputs.md); null, nothing read.
   */
  readonly traceback: "python" | null;
  /** What the call's sandbox is seeded with before the caller's files. */
  readonly seeds: readonly Seed[];
  /**
   * What the operator's image config added to this runtime, and how each surface names it; null
   * for a runtime the image config does not extend.
   */
  readonly extras: ExtrasEntry | null;
  /**
   * When its pool is kept: "at-start" (the product page's four: a first call finds one ready), or
   * "once-called" (from the runtime's first call on, so a runtime nobody calls costs an idle
   * server nothing; an operator who names it in SCRATCHRUN_POOL_SIZE keeps it from the start).
   */
  readonly pool: "at-start" | "once-called";
  /**
   * A shell's other interpreters, each with the command names that start it (bash: `node`,
   * `python3`): a microVM clone of this runtime made while no call runs first starts those its
   * runtime's recent calls named, so that under TCG the call finds them translated
   * (src/runtimes/shell-starts.ts, docs/decisions/0003-microvm.md). At most 4.
   */
  readonly shellStarts?: readonly { readonly path: string; readonly names: readonly string[] }[];
  /**
   * How scratchrun_exec's description names it to models: runtimes of one family are named
   * together, each followed by what it has preinstalled, if the product promises anything.
   */
  readonly description: {
    readonly family: string;
    readonly preinstalled?: string;
    /**
     * A distribution the image must hold for `preinstalled` to be true (an image built without a
     * package index has python3.12's standard library only); absent, it always holds.
     */
    readonly onlyWith?: string;
  };
}

/** Where the manifest keeps what the image config added to a runtime, and its labels. */
export interface ExtrasEntry {
  /** Where the manifest's extras keep the names. */
  readonly key: ExtrasKey;
  /**
   * true: the names are among the runtime's own packages in the manifest, marked there; false:
   * they are Debian packages that hold the runtime's packages, listed apart (doctor).
   */
  readonly inPackages: boolean;
  /** scratchrun_runtimes' label. */
  readonly listLabel: string;
  /** scratchrun_exec's description's label. */
  readonly toolLabel: string;
  /** The doctor's image config check counts "N <countLabel>, …". */
  readonly countLabel: string;
}

/** images/rootfs/python-requirements.in, named as an agent would look for them. */
const PYTHON_LOCK_STACK =
  "numpy, pandas, matplotlib, scipy, pillow, scikit-learn, sympy, seaborn, statsmodels, requests, beautifulsoup4, openpyxl";

/**
 * The table. Its order is the order the image config's additions are listed in
 * (scratchrun_exec's description, scratchrun_runtimes, doctor); RUNTIMES orders everything else.
 */
export const RUNTIME_TABLE = {
  bash: {
    argv: [IN_IMAGE.bash],
    codeFile: "main.sh",
    // A shell that sources the file is not `bash main.sh` (docs/decisions/0003-microvm.md).
    prestartScript: null,
    sessionScript: null,
    traceback: null,
    seeds: [],
    extras: {
      key: "debian",
      inPackages: true,
      listLabel: "bash (Debian packages)",
      toolLabel: "bash",
      countLabel: "Debian",
    },
    pool: "at-start",
    // What `node`, `python3` and `python3.12` on the image's PATH run (IMAGE_ENV).
    shellStarts: [
      { path: IN_IMAGE.node20, names: ["node", "npm", "npx"] },
      { path: IN_IMAGE.python311, names: ["python3", "python", "pip3", "pip", "python3.11"] },
      { path: IN_IMAGE.python312, names: ["python3.12"] },
    ],
    description: { family: "bash" },
  },
  "python3.11": {
    argv: [IN_IMAGE.python311],
    codeFile: "main.py",
    prestartScript: "prestart.py",
    sessionScript: "session.py",
    traceback: "python",
    // matplotlib's font cache, scanned once at image build time, so a first plot does not rescan
    // (one file per matplotlib version: Debian's for python3.11, the lock's for python3.12).
    seeds: ["matplotlib-font-cache"],
    extras: {
      key: "python3.11",
      inPackages: false,
      listLabel: "python3.11 (Debian packages)",
      toolLabel: "python3.11",
      countLabel: "python3.11",
    },
    pool: "at-start",
    description: { family: "python", preinstalled: "numpy, pandas, matplotlib, pillow, scipy" },
  },
  "python3.12": {
    argv: [IN_IMAGE.python312],
    codeFile: "main.py",
    prestartScript: "prestart.py",
    sessionScript: "session.py",
    traceback: "python",
    seeds: ["matplotlib-font-cache"],
    extras: {
      key: "python3.12",
      inPackages: true,
      listLabel: "python3.12",
      toolLabel: "python3.12",
      countLabel: "python3.12",
    },
    pool: "at-start",
    description: {
      family: "python",
      preinstalled: PYTHON_LOCK_STACK,
      onlyWith: "numpy",
    },
  },
  node20: {
    argv: [IN_IMAGE.node20],
    codeFile: "main.js",
    // Reseeds OpenSSL's DRBG and V8's generator before the code runs.
    prestartScript: "prestart.js",
    sessionScript: "session.js",
    traceback: null,
    seeds: [],
    extras: {
      key: "node20",
      inPackages: true,
      listLabel: "node20 (npm packages: require() or import from any file)",
      toolLabel: "node20 (require() or import)",
      countLabel: "npm",
    },
    pool: "at-start",
    description: { family: "node" },
  },
  "python3.13": {
    argv: [IN_IMAGE.python313],
    codeFile: "main.py",
    prestartScript: "prestart.py",
    sessionScript: "session.py",
    traceback: "python",
    seeds: ["matplotlib-font-cache"],
    // The image config's python3.12 wheelhouse or index is python3.12's alone.
    extras: null,
    pool: "once-called",
    description: {
      family: "python",
      preinstalled: PYTHON_LOCK_STACK,
      onlyWith: "numpy",
    },
  },
  node24: {
    argv: [IN_IMAGE.node24],
    codeFile: "main.js",
    prestartScript: "prestart.js",
    sessionScript: "session.js",
    traceback: null,
    seeds: [],
    // The image config's npm packages are installed and checked for node20 (a native addon is
    // built for one Node ABI).
    extras: null,
    pool: "once-called",
    description: { family: "node" },
  },
} as const satisfies Record<RuntimeName, RuntimeEntry>;

/** One runtime's entry. */
export const runtimeEntry = (runtime: RuntimeName): RuntimeEntry => RUNTIME_TABLE[runtime];

/**
 * The interpreter command of a runtime inside the image (the runtime table's); the engine appends
 * the code file. Fixed paths, so callers need no manifest to build a command line.
 */
export function runtimeArgv(runtime: RuntimeName): string[] {
  return [...runtimeEntry(runtime).argv];
}

/**
 * The runtimes the image config extends, in the order its additions are listed (the table's
 * order), each with its extras entry.
 */
export const EXTRAS: readonly { runtime: RuntimeName; extras: ExtrasEntry }[] = (
  Object.keys(RUNTIME_TABLE) as RuntimeName[]
).flatMap((runtime) => {
  const extras: ExtrasEntry | null = RUNTIME_TABLE[runtime].extras;
  return extras ? [{ runtime, extras }] : [];
});

/** Runtimes whose pools are kept only once called (RuntimeEntry.pool). */
export const ONCE_CALLED: readonly RuntimeName[] = RUNTIMES.filter(
  (r) => RUNTIME_TABLE[r].pool === "once-called",
);

/**
 * The display modules every Python of a sandbox imports from DISPLAY_PYTHONPATH (src/runtimes/
 * spec.ts; docs/decisions/0017-outputs.md): display() and matplotlib's backend, whatever runtime
 * started that Python (a bash call's python3 shows its figures too).
 */
export const GUEST_PYTHON_MODULES: readonly string[] = [
  "python/scratchrun_display.py",
  "python/scratchrun_mpl.py",
];

/**
 * Every pre-start and session script some runtime uses, each once, and the display modules (next
 * to the agent for namespace jails; the microVM initramfs carries them).
 */
export const GUEST_SCRIPTS: readonly string[] = [
  ...new Set(
    RUNTIMES.flatMap((r) =>
      [RUNTIME_TABLE[r].prestartScript, RUNTIME_TABLE[r].sessionScript].filter((s) => s !== null),
    ),
  ),
  ...GUEST_PYTHON_MODULES,
];
