/**
 * The image config from disk: read, parsed (config.ts), and what it names checked (the files exist
 * and are what they must be). SCRATCHRUN_IMAGE_CONFIG and --image-config name the file.
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { resolve } from "node:path";
import {
  IMAGE_CONFIG_ENV,
  MAX_CONFIG_BYTES,
  parseImageConfig,
  type ConfigResult,
  type ImageConfig,
} from "./config.js";
import { unpinnedRequirements } from "./pip-index.js";

/** Problems with what the config names on disk (missing files, an unhashed requirements file). */
export function configSourceProblems(config: ImageConfig): string[] {
  const errors: string[] = [];
  const kind = (p: string): "file" | "dir" | "missing" | "other" => {
    if (!existsSync(p)) return "missing";
    const st = statSync(p);
    return st.isFile() ? "file" : st.isDirectory() ? "dir" : "other";
  };
  if (config.npm?.lockfile) {
    const lock = config.npm.lockfile;
    if (kind(lock) !== "file") errors.push(`node20.lockfile: ${lock} is not a file`);
    else {
      try {
        const parsed = JSON.parse(readFileSync(lock, "utf8")) as { lockfileVersion?: unknown };
        if (typeof parsed.lockfileVersion !== "number")
          errors.push(`node20.lockfile: ${lock} is not an npm package-lock.json`);
      } catch (e) {
        errors.push(`node20.lockfile: ${lock} is not JSON (${(e as Error).message})`);
      }
    }
  }
  const py = config.python312;
  if (py?.kind === "wheelhouse") {
    if (kind(py.wheelhouse) !== "dir")
      errors.push(`python3.12.wheelhouse: ${py.wheelhouse} is not a directory`);
    else if (!readdirSync(py.wheelhouse).some((n) => n.endsWith(".whl")))
      errors.push(`python3.12.wheelhouse: ${py.wheelhouse} holds no .whl file`);
  } else if (py?.kind === "index") {
    if (kind(py.requirements) !== "file")
      errors.push(`python3.12.requirements: ${py.requirements} is not a file`);
    else {
      const bad = unpinnedRequirements(readFileSync(py.requirements, "utf8"));
      if (bad.length > 0)
        errors.push(
          `python3.12.requirements: ${py.requirements} must pin every requirement with == and --hash=sha256:… (pip --require-hashes); not pinned: ${bad.slice(0, 3).join(" | ")}${bad.length > 3 ? ` and ${bad.length - 3} more` : ""}`,
        );
    }
  }
  for (const f of config.files) {
    const k = kind(f.source);
    if (k === "missing")
      errors.push(`files[${JSON.stringify(f.target)}]: ${f.source} does not exist`);
    else if (k === "other")
      errors.push(
        `files[${JSON.stringify(f.target)}]: ${f.source} is neither a file nor a directory`,
      );
  }
  return errors;
}

/** Reads, parses and checks the config file at `path`; every problem in one error string. */
export function loadImageConfig(path: string): ConfigResult {
  const abs = resolve(path);
  let text: string;
  try {
    if (statSync(abs).size > MAX_CONFIG_BYTES)
      return { ok: false, error: `image config ${abs}: larger than ${MAX_CONFIG_BYTES} bytes` };
    text = readFileSync(abs, "utf8");
  } catch (e) {
    return {
      ok: false,
      error: `image config ${abs}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
    };
  }
  const real = realpathSync(abs);
  const parsed = parseImageConfig(text, real);
  if (!parsed.ok) return parsed;
  const problems = configSourceProblems(parsed.config);
  if (problems.length > 0)
    return { ok: false, error: `image config ${real}: ${problems.join("; ")}` };
  return parsed;
}

/** The config `path` names (SCRATCHRUN_IMAGE_CONFIG), none, or why it is unusable. */
export function imageConfigAt(
  path: string | undefined,
): { ok: true; config: ImageConfig | null } | { ok: false; error: string } {
  if (!path) return { ok: true, config: null };
  return loadImageConfig(path);
}

/** The environment with a command line's --image-config laid over SCRATCHRUN_IMAGE_CONFIG. */
export function withImageConfig(
  env: NodeJS.ProcessEnv,
  flag: string | undefined,
): NodeJS.ProcessEnv {
  return flag === undefined ? env : { ...env, [IMAGE_CONFIG_ENV]: resolve(flag) };
}
