import { IMAGE_ENV, IN_IMAGE } from "./in-image.js";
import { runtimeEntry, runtimeArgv } from "./table.js";
import type { RuntimeName } from "./names.js";

export interface RuntimeSpec {
  /** Interpreter command inside the rootfs; the code file path is appended. */
  argv: string[];
  /** Name of the code file, whose extension some interpreters care about. */
  codeFile: string;
}

export function runtimeSpec(runtime: RuntimeName): RuntimeSpec {
  return { argv: runtimeArgv(runtime), codeFile: runtimeEntry(runtime).codeFile };
}

/**
 * Where every Python of a sandbox finds ScratchRun's display modules (guest/python/: display()
 * and matplotlib's backend; docs/decisions/0017-outputs.md): python/ in the agent's directory, on
 * both backends.
 */
export const DISPLAY_PYTHONPATH = `${IN_IMAGE.mountPoints[2]}/python`;

/**
 * The environment every call starts from; the caller's `env` is laid over it. matplotlib draws
 * with Agg, as the image's matplotlibrc says, through ScratchRun's backend, whose show() (and the
 * end of the call) shows the figures as outputs.
 */
export const BASE_ENV: Readonly<Record<string, string>> = {
  ...IMAGE_ENV,
  MPLBACKEND: "module://scratchrun_mpl",
  PYTHONPATH: DISPLAY_PYTHONPATH,
  USER: "user",
  TMPDIR: "/tmp",
  PYTHONUNBUFFERED: "1",
  PYTHONDONTWRITEBYTECODE: "1",
};

/**
 * A call's environment: the caller's over the base, except that a caller's PYTHONPATH keeps the
 * display modules after its own entries (matplotlib's backend must stay importable).
 */
export function callEnv(env: Readonly<Record<string, string>>): Record<string, string> {
  const merged = { ...BASE_ENV, ...env };
  const own = env.PYTHONPATH;
  if (own !== undefined && own !== DISPLAY_PYTHONPATH)
    merged.PYTHONPATH = own ? `${own}:${DISPLAY_PYTHONPATH}` : DISPLAY_PYTHONPATH;
  return merged;
}
