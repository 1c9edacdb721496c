/**
 * Pre-started interpreters, shared by both backends: the agent starts the runtime's interpreter
 * before the call (guest/agent-prestart.c; a microVM snapshot template, a pooled namespace jail)
 * and hands it the call when a fresh start would have been the same. Python's may also have
 * pre-imported modules (docs/decisions/0011-preimport.md). One mechanism: the same agent options,
 * scripts and fast-path rules on both backends.
 */
import { renderPreimportSpec, type Preimport, type PreimportLayout } from "../images/preimport.js";
import { MATPLOTLIB_CACHE_DIR } from "../images/paths.js";
import { runtimeEntry } from "../runtimes/table.js";
import type { RuntimeName } from "../schema/exec.js";
import { CODE_DIR, WORKDIR, WRITABLE_ROOTS } from "../schema/limits.js";

/** A pooled sandbox's interpreter: started plain, or with the runtime's pre-imports done. */
export type Flavour = "plain" | "preimport";

/**
 * Calls asking for less memory than this get a plain interpreter: a pre-imported one's pages
 * (~63 MB charged for numpy, pandas and matplotlib in a namespace jail, decision 0011) count
 * against the call's memory_mb, and below the default they would take more than a third of it.
 * Pools hold sandboxes of the default size; microVM templates of other sizes pre-import only at
 * or above this.
 */
export const PREIMPORT_MIN_MEMORY_MB = 256;

/**
 * The interpreter a runtime's sandbox pre-starts, with its script (the runtime table's
 * prestartScript): python's (guest/prestart.py) and node's (guest/prestart.js, which reseeds
 * OpenSSL's DRBG and V8's generator before the code runs); none for bash, since a shell that
 * sources the file is not `bash main.sh` (docs/decisions/0003-microvm.md).
 */
export function prestartInterpreter(runtime: RuntimeName): string | undefined {
  const { argv, prestartScript } = runtimeEntry(runtime);
  return prestartScript === null ? undefined : argv[0];
}

/**
 * Where a pre-import's writes go and what it seeds: matplotlib's font cache from the image (the
 * file every python3.11 call is seeded with, engine-factory.ts matplotlibSeed), so the import
 * does not scan every font; the writable areas are left as found.
 */
export const PREIMPORT_LAYOUT: PreimportLayout = {
  seed: { from: `/${MATPLOTLIB_CACHE_DIR}`, to: `${WORKDIR}/.cache/matplotlib` },
  scratch: [...WRITABLE_ROOTS, "/dev/shm", CODE_DIR],
};

/** The agent's --preimport argument for a runtime's pre-import. */
export const preimportSpec = (p: Preimport): string => renderPreimportSpec(p, PREIMPORT_LAYOUT);

/**
 * The agent's pre-start arguments for a pooled sandbox of `runtime` and `flavour` (scripts under
 * `scriptDir` inside the sandbox); none for bash or when a pre-import was asked of a runtime
 * without one.
 */
export function agentPrestartArgs(
  runtime: RuntimeName,
  flavour: Flavour,
  preimport: Preimport | undefined,
  scriptDir: string,
): string[] {
  const { argv, prestartScript } = runtimeEntry(runtime);
  if (prestartScript === null) return [];
  const args = ["--prestart", argv[0], `${scriptDir}/${prestartScript}`];
  if (flavour === "preimport") {
    if (!preimport) throw new Error(`${runtime} has no pre-import`);
    args.push("--preimport", preimportSpec(preimport));
  }
  return args;
}
