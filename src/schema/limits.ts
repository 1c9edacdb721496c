/**
 * Every limit and default of a call, in one place, with units in the names.
 * The zod schema (exec.ts), the MCP tool, the CLI and the docs all read these.
 */
export const LIMITS = {
  timeoutMs: { default: 10_000, min: 100, max: 30_000 },
  memoryMb: { default: 256, min: 32, max: 512 },
  /** Code, UTF-8 bytes. */
  codeBytes: { max: 1024 * 1024 },
  /** maxTotalBytes keeps the whole environment well inside the kernel's exec limits. */
  env: { maxEntries: 64, maxNameBytes: 128, maxValueBytes: 32 * 1024, maxTotalBytes: 256 * 1024 },
  /**
   * Brokered secrets (docs/decisions/0015-brokered-secrets.md): values are header-safe ASCII, at
   * least as long as what output redaction catches (MIN_REDACT_LENGTH), each bound to 1 to
   * maxHosts allowlist entries.
   */
  secrets: { maxEntries: 8, minValueBytes: 6, maxValueBytes: 8 * 1024, maxHosts: 8 },
  files: { maxCount: 64, maxFileBytes: 5 * 1024 * 1024, maxTotalBytes: 8 * 1024 * 1024 },
  /**
   * Returned files travel base64-encoded inside one MCP message, and MCP stdio clients refuse
   * messages over 10 MiB: 6 MiB of files is 8 MiB of base64.
   */
  returnFiles: { maxCount: 32, maxFileBytes: 4 * 1024 * 1024, maxTotalBytes: 6 * 1024 * 1024 },
  /**
   * What a call's code shows beside its streams (docs/decisions/0017-outputs.md): matplotlib
   * figures, `display()`, a session cell's last expression. Bounded like returned files: outputs
   * past `maxCount` are left out and named (a figure past it is never rendered), one output's
   * forms together are at most `maxBytes`, a call's outputs together at most `maxTotalBytes`.
   */
  outputs: { maxCount: 20, maxBytes: 2 * 1024 * 1024, maxTotalBytes: 6 * 1024 * 1024 },
  /**
   * `inputs` (one call over many inputs, each in its own fresh sandbox): at most `maxEntries`. A
   * call's answer is shared by its inputs: each input's streams show at most answerChars.max /
   * (5 × inputs) bytes (and shownOutputBytes.max / inputs; never under shownOutputBytes.min), so
   * the whole answer stays within answerChars and answerBytes as one call's does.
   */
  inputs: { maxEntries: 16 },
  /** One MCP answer never grows past this; files that would push it over are left out, said so. */
  answerBytes: { max: 9 * 1024 * 1024 },
  /**
   * Characters one answer holds, its text blocks, text resources and structuredContent together
   * (image blocks and binary resources apart): what scratchrun_exec declares in tools/list as
   * `_meta["anthropic/maxResultSizeChars"]`, the most Claude Code takes inline (it writes a larger
   * result to a file and shows the model a preview, and takes 50,000 when a tool declares
   * nothing, less than a default call's two streams can fill). Past it, text files, outputs' text
   * forms and then the streams' head and tail are cut, and named (mcp/answer-chars.ts).
   */
  answerChars: { max: 500_000 },
  /** Largest JSON-RPC line the stdio server reads (a request's files are at most 8 MiB). */
  requestLineBytes: { max: 64 * 1024 * 1024 },
  pathBytes: { max: 1024 },
  /** Per stream, what the sandbox may write before it is stopped with exit_reason output_limit. */
  outputBytes: { default: 1024 * 1024, min: 1024, max: 1024 * 1024 },
  /** Per stream, what the result shows (head and tail); max_output_bytes chooses within this. */
  shownOutputBytes: { default: 32 * 1024, min: 1024, max: 256 * 1024 },
  /** Images larger than this come back as a resource with a note instead of inline. */
  inlineImageBytes: { max: 2 * 1024 * 1024 },
  /** Size of each RAM-backed writable area (/tmp and the working directory), MiB. */
  scratchMb: 128,
  /** Processes and threads in one sandbox. */
  pids: 128,
  /**
   * Sessions (docs/decisions/0013-sessions.md): how long one may sit between calls and live in
   * all, and how many a server and one caller (an API key, or stdio's one client) keep at once,
   * and how much memory (their `memory_mb` together) they may hold, per server and per caller.
   */
  session: {
    idleTimeoutMs: { default: 10 * 60_000, min: 1000, max: 60 * 60_000 },
    lifetimeMs: { default: 60 * 60_000, min: 1000, max: 24 * 60 * 60_000 },
    perServer: 8,
    perCaller: 3,
    memoryMbPerServer: 4096,
    memoryMbPerCaller: 1024,
  },
} as const;

/** Writable areas inside every sandbox; absolute paths in files/return_files must lie in one. */
export const WORKDIR = "/home/user";
export const WRITABLE_ROOTS = [WORKDIR, "/tmp"] as const;
/** Where the agent writes the code file; never a user path. */
export const CODE_DIR = "/run/scratchrun";

/**
 * How far an operator may raise a call's maxima, server-wide (`--max-timeout-ms`,
 * `--max-memory-mb`) or per API key (`scratchrun keys create|update`); the defaults and maxima in
 * LIMITS stay the product's. Memory is bounded by the host: a sandbox gets at most
 * `hostMemoryShare` of the host's RAM (checked when a server starts); `memoryMb` bounds what a
 * key's policy may record (a server caps it at what its host allows).
 */
export const RAISE_CEILINGS = {
  timeoutMs: 15 * 60_000,
  hostMemoryShare: 0.5,
  memoryMb: 1024 * 1024,
} as const;
