import { IMAGE_ENV } from "./in-image.js";
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

/** The environment every call starts from; the caller's `env` is laid over it. */
export const BASE_ENV: Readonly<Record<string, string>> = {
  ...IMAGE_ENV,
  USER: "user",
  TMPDIR: "/tmp",
  PYTHONUNBUFFERED: "1",
  PYTHONDONTWRITEBYTECODE: "1",
};
