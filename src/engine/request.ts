import type { AgentFile, AgentRequest } from "../protocol/types.js";
import type { ExecRequest } from "../schema/exec.js";
import { CODE_DIR, LIMITS, WORKDIR } from "../schema/limits.js";
import { callEnv, runtimeSpec } from "../runtimes/spec.js";

const encoder = new TextEncoder();

/**
 * Turns a validated call into the agent request: the code becomes a read-only file in the code
 * directory, the caller's env is laid over the base env (`callEnv`; paths are absolute since the schema), and the runtime's
 * seed files (e.g. matplotlib's font cache, built once into the image) go in first.
 */
export function toAgentRequest(
  req: ExecRequest,
  uid: number | null,
  seedFiles: readonly AgentFile[] = [],
): AgentRequest {
  const spec = runtimeSpec(req.runtime);
  const codePath = `${CODE_DIR}/${spec.codeFile}`;
  // The schema made every path absolute and normalised, and decoded every file once.
  const files = Object.entries(req.files).map(([path, content]) => ({
    path,
    mode: 0o644,
    content,
  }));
  return {
    timeoutMs: req.timeout_ms,
    maxStdoutBytes: LIMITS.outputBytes.default,
    maxStderrBytes: LIMITS.outputBytes.default,
    maxFileBytes: LIMITS.returnFiles.maxFileBytes,
    maxTotalFileBytes: LIMITS.returnFiles.maxTotalBytes,
    uid,
    gid: uid,
    cwd: WORKDIR,
    argv: [...spec.argv, codePath],
    env: callEnv(req.env),
    // Seed files (caches the image prepared) first; a caller's file of the same path wins.
    files: [
      { path: codePath, mode: 0o444, content: encoder.encode(req.code) },
      ...seedFiles.filter((seed) => !files.some((f) => f.path === seed.path)),
      ...files,
    ],
    returnFiles: req.return_files,
  };
}
