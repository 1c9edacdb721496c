import { z } from "zod";
import { LIMITS } from "./limits.js";
import { checkEnvName, normaliseSandboxPath } from "./paths.js";

export const RUNTIMES = ["python3.12", "python3.11", "node20", "bash"] as const;
export type RuntimeName = (typeof RUNTIMES)[number];

const utf8Bytes = (s: string) => Buffer.byteLength(s, "utf8");

const sandboxPath = (field: string) =>
  z.string().superRefine((value, ctx) => {
    const result = normaliseSandboxPath(value);
    if (!result.ok) ctx.addIssue({ code: "custom", message: `${field}: ${result.error}` });
  });

/** The tool's input, exactly as the MCP tool, the HTTP API and the CLI accept it. */
export const execInputShape = {
  runtime: z.enum(RUNTIMES).describe("Runtime to use: python3.12 | python3.11 | node20 | bash"),
  code: z
    .string()
    .refine((s) => utf8Bytes(s) <= LIMITS.codeBytes.max, {
      message: `code is longer than ${LIMITS.codeBytes.max} bytes`,
    })
    .describe("Code to execute"),
  timeout_ms: z
    .number()
    .int()
    .min(LIMITS.timeoutMs.min)
    .max(LIMITS.timeoutMs.max)
    .default(LIMITS.timeoutMs.default)
    .describe(
      `Wall-clock timeout in ms (default ${LIMITS.timeoutMs.default}, max ${LIMITS.timeoutMs.max})`,
    ),
  memory_mb: z
    .number()
    .int()
    .min(LIMITS.memoryMb.min)
    .max(LIMITS.memoryMb.max)
    .default(LIMITS.memoryMb.default)
    .describe(
      `Memory limit in MB (default ${LIMITS.memoryMb.default}, max ${LIMITS.memoryMb.max})`,
    ),
  env: z
    .record(z.string(), z.string())
    .default({})
    .superRefine((env, ctx) => {
      const entries = Object.entries(env);
      const total = entries.reduce((n, [k, v]) => n + utf8Bytes(k) + utf8Bytes(v) + 2, 0);
      if (total > LIMITS.env.maxTotalBytes)
        ctx.addIssue({
          code: "custom",
          message: `env totals ${total} bytes; at most ${LIMITS.env.maxTotalBytes}`,
        });
      if (entries.length > LIMITS.env.maxEntries)
        ctx.addIssue({
          code: "custom",
          message: `env has ${entries.length} entries; at most ${LIMITS.env.maxEntries}`,
        });
      for (const [name, value] of entries) {
        const err = checkEnvName(name);
        if (err)
          ctx.addIssue({ code: "custom", message: `env name ${JSON.stringify(name)}: ${err}` });
        if (value.includes("\0"))
          ctx.addIssue({ code: "custom", message: `env ${name}: value contains a NUL byte` });
        if (utf8Bytes(value) > LIMITS.env.maxValueBytes)
          ctx.addIssue({
            code: "custom",
            message: `env ${name}: value is longer than ${LIMITS.env.maxValueBytes} bytes`,
          });
      }
    })
    .describe("Environment variables for the code (use for secrets, not code strings)"),
  files: z
    .record(z.string(), z.string())
    .default({})
    .superRefine((files, ctx) => {
      const entries = Object.entries(files);
      if (entries.length > LIMITS.files.maxCount)
        ctx.addIssue({
          code: "custom",
          message: `files has ${entries.length} entries; at most ${LIMITS.files.maxCount}`,
        });
      let total = 0;
      const seen = new Set<string>();
      for (const [path, content] of entries) {
        const p = normaliseSandboxPath(path);
        if (!p.ok) {
          ctx.addIssue({ code: "custom", message: `files[${JSON.stringify(path)}]: ${p.error}` });
          continue;
        }
        if (seen.has(p.path))
          ctx.addIssue({ code: "custom", message: `files: ${p.path} is given twice` });
        seen.add(p.path);
        const size = utf8Bytes(content);
        total += size;
        if (size > LIMITS.files.maxFileBytes)
          ctx.addIssue({
            code: "custom",
            message: `files[${JSON.stringify(path)}]: ${size} bytes; at most ${LIMITS.files.maxFileBytes}`,
          });
      }
      if (total > LIMITS.files.maxTotalBytes)
        ctx.addIssue({
          code: "custom",
          message: `files total ${total} bytes; at most ${LIMITS.files.maxTotalBytes}`,
        });
    })
    .describe("Files to write before execution: path → UTF-8 content"),
  return_files: z
    .array(sandboxPath("return_files"))
    .max(LIMITS.returnFiles.maxCount)
    .default([])
    .describe("File paths to capture after execution (images render inline)"),
  network: z
    .enum(["public", "none"])
    .default("public")
    .describe('"public" (default: internet yes, private ranges never) or "none" (no network)'),
  max_output_bytes: z
    .number()
    .int()
    .min(LIMITS.shownOutputBytes.min)
    .max(LIMITS.shownOutputBytes.max)
    .default(LIMITS.shownOutputBytes.default)
    .describe(
      `Per stream, how much output to return: longer output keeps its head and tail with the omitted byte count (default ${LIMITS.shownOutputBytes.default}, max ${LIMITS.shownOutputBytes.max})`,
    ),
  redact_env: z
    .boolean()
    .default(true)
    .describe(
      "Replace values passed in env (6+ characters) by [redacted:NAME] in stdout, stderr and returned text files (default true)",
    ),
};

export const execInputSchema = z.strictObject(execInputShape);

/** A validated, defaulted request: what the engine executes. */
export type ExecRequest = z.output<typeof execInputSchema>;
export type ExecInput = z.input<typeof execInputSchema>;

export const EXIT_REASONS = [
  "ok",
  "error",
  "timeout",
  "oom",
  "output_limit",
  "killed",
  "cancelled",
] as const;
export type ExitReason = (typeof EXIT_REASONS)[number];

export const ISOLATIONS = ["microvm-kvm", "microvm-tcg", "namespace"] as const;

export const returnedFileShape = z.object({
  path: z.string(),
  status: z.enum(["ok", "missing", "not_regular", "too_large", "total_limit", "error"]),
  size_bytes: z.number().int(),
  mime_type: z.string(),
});

export const execOutputShape = {
  stdout: z.string(),
  stderr: z.string(),
  exit_code: z.number().int().nullable(),
  exit_reason: z.enum(EXIT_REASONS),
  signal: z.number().int().nullable(),
  duration_ms: z.number().int(),
  isolation: z.enum(ISOLATIONS),
  network: z.enum(["public", "none"]),
  stdout_truncated: z.boolean(),
  stderr_truncated: z.boolean(),
  /** Bytes left out of the middle of each stream (max_output_bytes); 0 when shown whole. */
  stdout_omitted_bytes: z.number().int(),
  stderr_omitted_bytes: z.number().int(),
  files: z.array(returnedFileShape),
  message: z.string().optional(),
  /** Packets the egress filter dropped (network "public" only). */
  network_blocked_packets: z.number().int().optional(),
};
export const execOutputSchema = z.object(execOutputShape);
export type ExecResult = z.infer<typeof execOutputSchema>;
export type ReturnedFileInfo = z.infer<typeof returnedFileShape>;
