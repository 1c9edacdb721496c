import { z } from "zod";
import { LIMITS, CODE_DIR } from "./limits.js";
import { decodeFileContent, fileContentSchema, type FileContent } from "./file-content.js";
import { checkEnvName, normaliseSandboxPath } from "./paths.js";
import { DEFAULT_POLICY, policyKey, type CallPolicy } from "./policy.js";
import { limitField, networkField, runtimeField } from "./policy-fields.js";
import type { NetworkMode } from "./names.js";
import { REFUSAL_REASONS } from "../net/proxy/reasons.js";
import { AllowlistError, parseAllowlistEntry } from "../net/allowlist.js";

export { NETWORK_MODES, type NetworkMode } from "./names.js";
export { RUNTIMES, type RuntimeName } from "../runtimes/names.js";

const utf8Bytes = (s: string) => Buffer.byteLength(s, "utf8");

/** A session id: 128 random bits, base64url (src/engine/sessions.ts makes them). */
export const SESSION_ID_PATTERN = /^[A-Za-z0-9_-]{22}$/;

/**
 * A path inside the sandbox in its absolute, normalised form: only the schema makes one, so a path
 * that skipped validation cannot reach the engine (a type error, not a check at run time).
 */
export type SandboxPath = string & { readonly __brand: "SandboxPath" };

/** The absolute, normalised form of a path (the schema's; an issue on ctx if it is refused). */
function toSandboxPath(
  field: string,
  path: string,
  at: PropertyKey[],
  ctx: z.RefinementCtx,
): SandboxPath | null {
  const p = normaliseSandboxPath(path);
  if (p.ok) return p.path as SandboxPath;
  ctx.addIssue({ code: "custom", path: at, message: `${field}: ${p.error}` });
  return null;
}

/**
 * `return_files`, each path checked and made absolute and normalised once, and every file kept
 * once: two spellings of one file ("ok.txt", "/home/user/./ok.txt") are one path, kept where it
 * first stood, and the file is read and returned once.
 */
function uniqueSandboxPaths(paths: readonly string[], ctx: z.RefinementCtx): SandboxPath[] {
  const out = new Set<SandboxPath>();
  paths.forEach((path, i) => {
    const p = toSandboxPath("return_files", path, [i], ctx);
    if (p) out.add(p);
  });
  return [...out];
}

/** The checks of `secrets` that need no other field (the engine checks the rest). */
function checkSecrets(
  secrets: Record<string, { value: string; hosts: string[] }>,
  ctx: z.RefinementCtx,
): void {
  const { maxEntries, minValueBytes, maxValueBytes, maxHosts } = LIMITS.secrets;
  const issue = (message: string) => ctx.addIssue({ code: "custom", message });
  const entries = Object.entries(secrets);
  if (entries.length > maxEntries)
    issue(`secrets has ${entries.length} entries; at most ${maxEntries}`);
  for (const [name, { value, hosts }] of entries) {
    const err = checkEnvName(name);
    if (err) issue(`secret name ${JSON.stringify(name)}: ${err}`);
    const n = utf8Bytes(value);
    if (n < minValueBytes || n > maxValueBytes)
      issue(`secret ${name}: value is ${n} bytes; ${minValueBytes} to ${maxValueBytes}`);
    if (!/^[\x20-\x7e]*$/.test(value))
      issue(
        `secret ${name}: value must be printable ASCII (it goes into HTTP headers and URLs as is)`,
      );
    if (hosts.length === 0 || hosts.length > maxHosts)
      issue(`secret ${name}: hosts has ${hosts.length} entries; 1 to ${maxHosts}`);
    for (const h of hosts) {
      try {
        parseAllowlistEntry(h);
      } catch (e) {
        if (!(e instanceof AllowlistError)) throw e;
        issue(`secret ${name}: hosts: ${e.message}`);
      }
    }
  }
}

/** Why an environment is refused as a whole (a call's, or a call's with an input's laid over it). */
function envTotalIssues(env: Record<string, string>): string[] {
  const issues: string[] = [];
  const entries = Object.entries(env);
  const total = entries.reduce((n, [k, v]) => n + utf8Bytes(k) + utf8Bytes(v) + 2, 0);
  if (total > LIMITS.env.maxTotalBytes)
    issues.push(`env totals ${total} bytes; at most ${LIMITS.env.maxTotalBytes}`);
  if (entries.length > LIMITS.env.maxEntries)
    issues.push(`env has ${entries.length} entries; at most ${LIMITS.env.maxEntries}`);
  return issues;
}

/** Why an environment is refused: as a whole, and each name and value. */
function envIssues(env: Record<string, string>): string[] {
  const issues = envTotalIssues(env);
  for (const [name, value] of Object.entries(env)) {
    const err = checkEnvName(name);
    if (err) issues.push(`env name ${JSON.stringify(name)}: ${err}`);
    if (value.includes("\0")) issues.push(`env ${name}: value contains a NUL byte`);
    if (utf8Bytes(value) > LIMITS.env.maxValueBytes)
      issues.push(`env ${name}: value is longer than ${LIMITS.env.maxValueBytes} bytes`);
  }
  return issues;
}

function checkEnv(env: Record<string, string>, ctx: z.RefinementCtx): void {
  for (const message of envIssues(env)) ctx.addIssue({ code: "custom", message });
}

/** Why a set of files (a call's, or a call's with an input's laid over it) is refused as a whole. */
function filesTotalIssues(files: Record<SandboxPath, Buffer>): string[] {
  const issues: string[] = [];
  const entries = Object.values(files);
  if (entries.length > LIMITS.files.maxCount)
    issues.push(`files has ${entries.length} entries; at most ${LIMITS.files.maxCount}`);
  const total = entries.reduce((n, bytes) => n + bytes.length, 0);
  if (total > LIMITS.files.maxTotalBytes)
    issues.push(`files total ${total} bytes; at most ${LIMITS.files.maxTotalBytes}`);
  return issues;
}

/** `files`: each path checked and made absolute once, each file's content decoded once. */
function toSandboxFiles(
  files: Record<string, FileContent>,
  ctx: z.RefinementCtx,
): Record<SandboxPath, Buffer> {
  const entries = Object.entries(files);
  if (entries.length > LIMITS.files.maxCount)
    ctx.addIssue({
      code: "custom",
      message: `files has ${entries.length} entries; at most ${LIMITS.files.maxCount}`,
    });
  let total = 0;
  const out: Record<SandboxPath, Buffer> = {};
  for (const [path, content] of entries) {
    const p = normaliseSandboxPath(path);
    if (!p.ok) {
      ctx.addIssue({ code: "custom", message: `files[${JSON.stringify(path)}]: ${p.error}` });
      continue;
    }
    const key = p.path as SandboxPath;
    if (Object.hasOwn(out, key))
      ctx.addIssue({ code: "custom", message: `files: ${key} is given twice` });
    const decoded = decodeFileContent(content);
    if (!decoded.ok) {
      ctx.addIssue({
        code: "custom",
        message: `files[${JSON.stringify(path)}]: ${decoded.error}`,
      });
      continue;
    }
    out[key] = decoded.bytes;
    const size = decoded.bytes.length;
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
  return out;
}

/**
 * One entry of `inputs`: an overlay on the call's own env and files (an input's variable or file
 * of the same name wins). Each is checked as a call's is, alone here and laid over the call's in
 * `checkInputs`.
 */
const inputEntrySchema = z.strictObject({
  env: z
    .record(z.string(), z.string())
    .superRefine(checkEnv)
    .optional()
    .describe("Variables laid over the call's env for this input"),
  files: z
    .record(z.string(), fileContentSchema)
    .transform(toSandboxFiles)
    .optional()
    .describe("Files laid over the call's files for this input (same forms as `files`)"),
});
export type InputEntry = z.output<typeof inputEntrySchema>;

/** What `checkRequest` reads of a request: the fields that constrain each other. */
interface RequestFields {
  inputs?: InputEntry[] | undefined;
  session_id?: string | undefined;
  network: NetworkMode;
  env: Record<string, string>;
  secrets: Record<string, { value: string; hosts: string[] }>;
  files: Record<SandboxPath, Buffer>;
}

/** What only the whole request can check: `inputs`, then the secrets' rules. */
function checkRequest(req: RequestFields, ctx: z.RefinementCtx): void {
  checkInputs(req, ctx);
  checkSecretRules(req, ctx);
}

/** Where a call with secrets finds the CA bundle (the host's roots and the call's CA), read-only. */
export const CA_BUNDLE_PATH = `${CODE_DIR}/ca-bundle.pem`;
/** The variables that point TLS clients at it: OpenSSL (python ssl, httpx), requests, curl, node, git. */
export const CA_BUNDLE_ENV = [
  "SSL_CERT_FILE",
  "REQUESTS_CA_BUNDLE",
  "CURL_CA_BUNDLE",
  "NODE_EXTRA_CA_CERTS",
  "GIT_SSL_CAINFO",
] as const;

/**
 * The secrets' rules that need the request's other fields: not in a session's call, network
 * "public" asked for, no env name of theirs and none of the CA bundle's variables (in the call's
 * env, and in each input's laid over it). What needs the server (its network, its allowlist and
 * the key's) is the engine's: src/engine/secrets.ts.
 */
function checkSecretRules(req: RequestFields, ctx: z.RefinementCtx): void {
  const names = Object.keys(req.secrets);
  if (names.length === 0) return;
  const issue = (path: PropertyKey[], message: string, fix: string) =>
    ctx.addIssue({ code: "custom", path, message: `${message}. ${fix}` });
  if (req.session_id !== undefined)
    issue(["secrets"], "not in a session's call", "run calls with secrets without session_id");
  if (req.network !== "public")
    issue(
      ["network"],
      'secrets need network "public" (the egress proxy sends them)',
      'set network: "public", or pass the value in env',
    );
  const envs: { path: PropertyKey[]; env: Record<string, string> }[] = [
    { path: ["secrets"], env: req.env },
  ];
  req.inputs?.forEach((entry, i) => {
    if (entry.env) envs.push({ path: ["inputs", i, "env"], env: { ...req.env, ...entry.env } });
  });
  for (const { path, env } of envs) {
    for (const name of names)
      if (Object.hasOwn(env, name)) issue(path, `${name} is also in env`, "give each name once");
    for (const name of CA_BUNDLE_ENV)
      if (Object.hasOwn(env, name))
        issue(
          path,
          `env ${name}: a call with secrets sets it (to the CA bundle at ${CA_BUNDLE_PATH})`,
          `leave ${name} out of env`,
        );
  }
}

/**
 * What only the whole request can check about `inputs`: not with a session (one sandbox), and
 * each input laid over the call's env and files still within a call's limits. Each refusal names
 * the input by its index, and any one refuses the call before anything runs.
 */
function checkInputs(req: RequestFields, ctx: z.RefinementCtx): void {
  if (req.inputs === undefined) return;
  if (req.session_id !== undefined)
    ctx.addIssue({
      code: "custom",
      path: ["inputs"],
      message:
        "not with session_id: a session is one sandbox, and each input runs in a fresh one (call the session once per input)",
    });
  req.inputs.forEach((entry, i) => {
    if (entry.env)
      for (const message of envTotalIssues({ ...req.env, ...entry.env }))
        ctx.addIssue({
          code: "custom",
          path: ["inputs", i, "env"],
          message: `with the call's env: ${message}`,
        });
    if (entry.files)
      for (const message of filesTotalIssues({ ...req.files, ...entry.files }))
        ctx.addIssue({
          code: "custom",
          path: ["inputs", i, "files"],
          message: `with the call's files: ${message}`,
        });
  });
}

/**
 * The tool's input, exactly as the MCP tool, the HTTP API and the CLI accept it, for one policy:
 * the runtime and network enums, and timeout_ms and memory_mb's maxima and defaults, come from
 * it; everything else is the same for every caller. `DEFAULT_POLICY` (LIMITS) gives the product's
 * schema: `execInputShape`, the one the docs, openapi/openapi.json and the CLI's flags derive from.
 */
export function execInputShapeFor(policy: CallPolicy) {
  const { runtimes, networks, timeoutMs, memoryMb } = policy;
  return {
    runtime: runtimeField(policy).describe(`Runtime to use: ${runtimes.join(" | ")}`),
    code: z
      .string()
      .refine((s) => utf8Bytes(s) <= LIMITS.codeBytes.max, {
        message: `code is longer than ${LIMITS.codeBytes.max} bytes`,
      })
      .describe("Code to execute"),
    timeout_ms: limitField(policy, "timeoutMs").describe(
      `Wall-clock timeout in ms (default ${timeoutMs.default}, max ${timeoutMs.max})`,
    ),
    memory_mb: limitField(policy, "memoryMb").describe(
      `Memory limit in MB (default ${memoryMb.default}, max ${memoryMb.max})`,
    ),
    env: z
      .record(z.string(), z.string())
      .default({})
      .superRefine(checkEnv)
      .describe("Environment variables for the code (use for secrets, not code strings)"),
    secrets: z
      .record(
        z.string(),
        z.strictObject({
          value: z.string(),
          hosts: z.array(z.string()),
        }),
      )
      .default({})
      .superRefine(checkSecrets)
      .describe(
        `Brokered secrets, NAME → {value, hosts}: the code's environment gets NAME = a placeholder, and the egress proxy writes the value into request headers and URL queries of HTTP(S) requests to \`hosts\` only (allowlist entries: names and "*." wildcards); the value never enters the sandbox. Needs network "public"; the call then reaches only its allowlist (with none, only these hosts). At most ${LIMITS.secrets.maxEntries}; values ${LIMITS.secrets.minValueBytes}-${LIMITS.secrets.maxValueBytes} printable ASCII bytes`,
      ),
    files: z
      .record(z.string(), fileContentSchema)
      .default({})
      .transform(toSandboxFiles)
      .describe(
        'Files to write before execution: path → UTF-8 text, or {"base64": "…"} for binary content',
      ),
    return_files: z
      .array(z.string())
      .max(LIMITS.returnFiles.maxCount)
      .default([])
      .transform(uniqueSandboxPaths)
      .describe(
        "File paths to capture after execution (images render inline); a path named twice, in any spelling, is returned once",
      ),
    network: networkField(policy).describe(
      networks.includes("public")
        ? '"public" (default: internet yes, private ranges never) or "none" (no network)'
        : '"none" only (no network)',
    ),
    max_output_bytes: z
      .number()
      .int()
      .min(LIMITS.shownOutputBytes.min)
      .max(LIMITS.shownOutputBytes.max)
      .default(LIMITS.shownOutputBytes.default)
      .describe(
        `Per stream, how much output to return: longer output keeps its head and tail with the omitted byte count (default ${LIMITS.shownOutputBytes.default}, max ${LIMITS.shownOutputBytes.max})`,
      ),
    session_id: z
      .string()
      .regex(SESSION_ID_PATTERN, {
        message: "not a session id (scratchrun_session_start gives one)",
      })
      .optional()
      .describe(
        "Run in this session's sandbox (from scratchrun_session_start) instead of a fresh one: its files, and for python and node its interpreter, are kept from call to call",
      ),
    redact_env: z
      .boolean()
      .default(true)
      .describe(
        "Replace values passed in env (6+ characters) by [redacted:NAME] in stdout, stderr and returned text files (default true)",
      ),
    inputs: z
      .array(inputEntrySchema)
      .min(1)
      .max(LIMITS.inputs.maxEntries)
      .optional()
      .describe(
        `Run the same code once per entry, each in its own fresh sandbox, at once as far as your concurrency allows: each entry is {env?, files?} laid over the call's own (an entry's name wins; {} runs the call as is). The answer holds one result per entry, in order, and a summary; timeout_ms applies to each entry, and the answer's size is shared between them. 1 to ${LIMITS.inputs.maxEntries} entries; not with session_id`,
      ),
  };
}

/** The product's input shape (DEFAULT_POLICY): what the docs, the OpenAPI file and the CLI show. */
export const execInputShape = execInputShapeFor(DEFAULT_POLICY);
export const execInputSchema = z.strictObject(execInputShape).superRefine(checkRequest);

/** Schemas of the policies seen so far; bounded (a server has few distinct policies). */
const schemas = new Map<string, typeof execInputSchema>([
  [policyKey(DEFAULT_POLICY), execInputSchema],
]);
const MAX_CACHED_SCHEMAS = 256;

/** The strict input schema for one policy (built once per distinct policy). */
export function execInputSchemaFor(policy: CallPolicy): typeof execInputSchema {
  const key = policyKey(policy);
  let schema = schemas.get(key);
  if (!schema) {
    if (schemas.size >= MAX_CACHED_SCHEMAS) schemas.clear();
    schema = z.strictObject(execInputShapeFor(policy)).superRefine(checkRequest);
    schemas.set(key, schema);
  }
  return schema;
}

/**
 * A request in its final form, what the parse returns and the engine executes: validated,
 * defaulted, every path absolute, every file decoded into its bytes, the secrets' request rules
 * applied, and the fields its caller named recorded on it, so a copy (`{ ...req }`) keeps all of
 * it. `requestToWire` (validate.ts) turns it back into input for a server that parses it again.
 */
export type ExecRequest = z.output<typeof execInputSchema> & {
  /**
   * The top-level fields its caller named, before defaults: a session's call is held to the
   * session's memory_mb and network only where it named them (docs/decisions/0013-sessions.md).
   */
  readonly named: readonly (keyof ExecInput)[];
};
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
  /** Why, for status "error": a file the code wrote is never lost without a reason. */
  message: z.string().optional(),
});

/**
 * The forms an output may come in (docs/decisions/0017-outputs.md): every text form a notebook
 * knows that a model reads, and the images an MCP client shows.
 */
export const OUTPUT_TEXT_MIMES = [
  "text/plain",
  "text/markdown",
  "text/latex",
  "application/json",
  "text/html",
  "image/svg+xml",
] as const;
export const OUTPUT_IMAGE_MIMES = ["image/png", "image/jpeg"] as const;

export const outputFormShape = z.object({
  mime_type: z.enum([...OUTPUT_TEXT_MIMES, ...OUTPUT_IMAGE_MIMES]),
  size_bytes: z.number().int(),
  /** The form itself, for a text form; an image's bytes are an image block of the answer. */
  text: z.string().optional(),
  /** Why an image's bytes are not in this answer (its size is said all the same). */
  left_out: z.string().optional(),
});

/**
 * One entry of a call's `outputs`, in the order the code wrote and showed them: a run of one
 * stream (its bytes as written; the text is in `stdout` / `stderr`), something it displayed
 * (`display()`, a matplotlib figure), a session cell's last expression (`result`), a Python
 * exception that ended it (`error`: its type, message and traceback, as Python printed it, from
 * the code's own frames on).
 */
export const streamOutputShape = z.object({
  type: z.literal("stream"),
  name: z.enum(["stdout", "stderr"]),
  size_bytes: z.number().int(),
});
export const errorOutputShape = z.object({
  type: z.literal("error"),
  ename: z.string(),
  evalue: z.string(),
  traceback: z.string(),
});
export const outputShape = z.discriminatedUnion("type", [
  streamOutputShape,
  z.object({ type: z.literal("display"), data: z.array(outputFormShape) }),
  z.object({ type: z.literal("result"), data: z.array(outputFormShape) }),
  errorOutputShape,
]);

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
  /** What the code wrote and showed, in order (docs/decisions/0017-outputs.md). */
  outputs: z.array(outputShape).optional(),
  /**
   * Outputs left out past LIMITS.outputs (a figure past the count is never rendered), or that the
   * sandbox sent malformed or cut off: how many, and the names of the first ones.
   */
  outputs_left_out: z.object({ count: z.number().int(), names: z.array(z.string()) }).optional(),
  message: z.string().optional(),
  /** Packets the egress filter dropped or refused (network "public" only). */
  network_blocked_packets: z.number().int().optional(),
  /**
   * On a server with an egress allowlist (network "public" only): each name (null: none was
   * sent, e.g. an IP address) and port the allowlist refused, why, and how many times.
   */
  network_refused: z
    .array(
      z.object({
        host: z.string().nullable(),
        port: z.number().int(),
        reason: z.enum(REFUSAL_REASONS),
        count: z.number().int(),
      }),
    )
    .optional(),
  /** Refusals beyond the distinct entries listed in network_refused. */
  network_refused_omitted: z.number().int().optional(),
  /**
   * Why the call's network is not what it asked for: "none" where it asked for "public" (this
   * server or host gives no network, and the operator's fix), or "public" whose packets the
   * host's own firewall dropped after ScratchRun's filter let them through.
   */
  network_reason: z.string().optional(),
  /** A session's call: the session after it (docs/decisions/0013-sessions.md). */
  session: z
    .object({
      session_id: z.string(),
      /** Calls the session has run, this one included. */
      calls: z.number().int(),
      expires_at: z.string(),
      /**
       * "kept": this call ran in the interpreter of the session's earlier calls; "fresh": in a new
       * one (the first call, or the previous interpreter ended); "none": bash, files only.
       */
      interpreter: z.enum(["kept", "fresh", "none"]),
      /** The session is over after this call (its sandbox ended); a new one must be started. */
      ended: z.boolean().optional(),
    })
    .optional(),
};
export const execOutputSchema = z.object(execOutputShape);
export type ExecResult = z.infer<typeof execOutputSchema>;
export type ReturnedFileInfo = z.infer<typeof returnedFileShape>;
export type Output = z.infer<typeof outputShape>;
export type OutputForm = z.infer<typeof outputFormShape>;

/** A call with `inputs`: how its inputs went (src/engine/batch.ts). */
export const batchSummarySchema = z.object({
  /** Inputs in the call. */
  count: z.number().int(),
  /** Inputs whose code exited 0. */
  passed: z.number().int(),
  /** The rest: an error exit, a timeout, an OOM, a cancelled or unstarted input. */
  failed: z.number().int(),
  /** How many inputs ended each way (only the reasons that occurred). */
  exit_reasons: z.partialRecord(z.enum(EXIT_REASONS), z.number().int()),
  /** The inputs' duration_ms: median (nearest rank) and largest. */
  duration_p50_ms: z.number().int(),
  duration_max_ms: z.number().int(),
  /** From the first input's start to the last one's answer. */
  wall_ms: z.number().int(),
  /** Inputs run at once at most. */
  concurrency: z.number().int(),
});

/** A call with `inputs`: one result per input, in order, each a single call's, and the summary. */
export const batchOutputSchema = z.object({
  results: z.array(execOutputSchema),
  summary: batchSummarySchema,
});
export type BatchResult = z.infer<typeof batchOutputSchema>;
