/**
 * Every limit and default of a call, in one place, with units in the names.
 * The zod schema (exec.ts), the MCP tool, the CLI and the docs all read these.
 */
export const LIMITS = {
  timeoutMs: { default: 10_000, min: 100, max: 30_000 },
  memoryMb: { default: 256, min: 32, max: 512 },
  /** Code, UTF-8 bytes. */
  codeBytes: { max: 1024 * 1024 },
  env: { maxEntries: 64, maxNameBytes: 128, maxValueBytes: 32 * 1024 },
  files: { maxCount: 64, maxFileBytes: 5 * 1024 * 1024, maxTotalBytes: 10 * 1024 * 1024 },
  returnFiles: { maxCount: 32, maxFileBytes: 10 * 1024 * 1024, maxTotalBytes: 20 * 1024 * 1024 },
  pathBytes: { max: 1024 },
  /** Per stream, what the sandbox may write before it is stopped with exit_reason output_limit. */
  outputBytes: { default: 1024 * 1024, min: 1024, max: 1024 * 1024 },
  /** Per stream, what the result shows (head and tail); max_output_bytes chooses within this. */
  shownOutputBytes: { default: 32 * 1024, min: 1024, max: 1024 * 1024 },
  /** Images larger than this come back as a resource with a note instead of inline. */
  inlineImageBytes: { max: 2 * 1024 * 1024 },
  /** Size of each RAM-backed writable area (/tmp and the working directory), MiB. */
  scratchMb: 128,
  /** Processes and threads in one sandbox. */
  pids: 128,
} as const;

/** Writable areas inside every sandbox; absolute paths in files/return_files must lie in one. */
export const WORKDIR = "/home/user";
export const WRITABLE_ROOTS = [WORKDIR, "/tmp"] as const;
/** Where the agent writes the code file; never a user path. */
export const CODE_DIR = "/run/scratchrun";
