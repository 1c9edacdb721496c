import { z } from "zod";
import type { ExecOutcome, FileOut } from "../engine/result.js";
import { ERROR_CODES, ScratchRunError, type ErrorCode } from "../errors.js";
import { HTTP_ERROR_CODES } from "../http/respond.js";
import type { CallerPolicy } from "../policy/resolve.js";
import type { OutputImage } from "../engine/outputs.js";
import type { BatchOutcome } from "../engine/batch.js";
import {
  batchSummarySchema,
  errorOutputShape,
  execOutputShape,
  NETWORK_MODES,
  outputFormShape,
  returnedFileShape,
  RUNTIMES,
  streamOutputShape,
  type ExecResult,
} from "../schema/exec.js";
import type { CallPolicy } from "../schema/policy.js";

/**
 * The REST body of a result: the tool's structured result, where each returned file with status
 * "ok" also carries its bytes as `content_base64`, and so does each output's image form. Remote
 * mode turns it back into the engine's ExecOutcome, so both sides render the very same MCP
 * content.
 */
export const wireFileShape = returnedFileShape.extend({ content_base64: z.string().optional() });
const wireForms = z.array(
  z.strictObject(outputFormShape.extend({ content_base64: z.string().optional() }).shape),
);
const wireOutputSchema = z.discriminatedUnion("type", [
  z.strictObject(streamOutputShape.shape),
  z.strictObject({ type: z.literal("display"), data: wireForms }),
  z.strictObject({ type: z.literal("result"), data: wireForms }),
  z.strictObject(errorOutputShape.shape),
]);
export const wireResultSchema = z.strictObject({
  ...execOutputShape,
  files: z.array(z.strictObject(wireFileShape.shape)),
  outputs: z.array(wireOutputSchema).optional(),
});
export type WireResult = z.infer<typeof wireResultSchema>;

/** The REST body of a call with `inputs`: each input's result as a call's body, and the summary. */
export const wireBatchSchema = z.strictObject({
  results: z.array(wireResultSchema),
  summary: z.strictObject(batchSummarySchema.shape),
});
export type WireBatch = z.infer<typeof wireBatchSchema>;

export function batchToWire(batch: BatchOutcome): WireBatch {
  return { results: batch.entries.map(outcomeToWire), summary: batch.summary };
}

/** Parses a server's answer to a call with `inputs` strictly, as wireToOutcome does a call's. */
export function wireToBatch(body: unknown): BatchOutcome {
  const parsed = wireBatchSchema.safeParse(body);
  if (!parsed.success)
    throw new ScratchRunError("INTERNAL", "the ScratchRun server sent a malformed result");
  return { entries: parsed.data.results.map(wireToOutcome), summary: parsed.data.summary };
}

/** The engine's codes, then the ones only the HTTP layer answers with. */
export const WIRE_ERROR_CODES = [...ERROR_CODES, ...HTTP_ERROR_CODES] as const;
export const wireErrorSchema = z.strictObject({
  error: z.strictObject({ code: z.enum(WIRE_ERROR_CODES), message: z.string() }),
});
export type WireError = z.infer<typeof wireErrorSchema>;

export function outcomeToWire(outcome: ExecOutcome): WireResult {
  const contents = [...outcome.files];
  const files = outcome.result.files.map((f) => {
    if (f.status !== "ok") return { ...f };
    const content = contents.shift();
    return content ? { ...f, content_base64: content.content.toString("base64") } : { ...f };
  });
  const outputs = outcome.result.outputs?.map((o, i) => {
    if (o.type !== "display" && o.type !== "result") return { ...o };
    const image = outcome.images.find((im) => im.output === i);
    const data = o.data.map((f) =>
      image && f.mime_type === image.mimeType && f.text === undefined && !f.left_out
        ? { ...f, content_base64: image.content.toString("base64") }
        : { ...f },
    );
    return { ...o, data };
  });
  return { ...outcome.result, files, ...(outputs ? { outputs } : {}) };
}

/** Parses a server's result body strictly; a malformed one is an engine failure, not a result. */
export function wireToOutcome(body: unknown): ExecOutcome {
  const parsed = wireResultSchema.safeParse(body);
  if (!parsed.success)
    throw new ScratchRunError("INTERNAL", "the ScratchRun server sent a malformed result");
  const files: FileOut[] = [];
  const infos = parsed.data.files.map(({ content_base64, ...info }) => {
    if (info.status === "ok" && content_base64 !== undefined)
      files.push({
        path: info.path,
        mimeType: info.mime_type,
        content: Buffer.from(content_base64, "base64"),
      });
    return info;
  });
  const images: OutputImage[] = [];
  const outputs = parsed.data.outputs?.map((o, i) => {
    if (o.type !== "display" && o.type !== "result") return o;
    const data = o.data.map(({ content_base64, ...form }) => {
      if (content_base64 !== undefined)
        images.push({
          output: i,
          mimeType: form.mime_type,
          content: Buffer.from(content_base64, "base64"),
        });
      return form;
    });
    return { ...o, data };
  });
  const result: ExecResult = { ...parsed.data, files: infos, ...(outputs ? { outputs } : {}) };
  return { result, files, images };
}

const ENGINE_CODES = new Set<string>(ERROR_CODES);

/**
 * An error body back into the error the engine would have thrown locally. A body the server
 * refused (too large, not JSON) is the request's fault, as the engine's INVALID_INPUT is: a
 * worker's such refusal reaches the replica's caller as 400, not as a server to retry.
 */
export function wireToError(status: number, body: unknown): ScratchRunError {
  const parsed = wireErrorSchema.safeParse(body);
  if (!parsed.success)
    return new ScratchRunError("INTERNAL", `the ScratchRun server answered HTTP ${status}`);
  const { code, message } = parsed.data.error;
  if (ENGINE_CODES.has(code)) return new ScratchRunError(code as ErrorCode, message);
  if (code === "PAYLOAD_TOO_LARGE" || code === "UNSUPPORTED_MEDIA_TYPE")
    return new ScratchRunError("INVALID_INPUT", message);
  return new ScratchRunError("NOT_READY", `the ScratchRun server refused the call: ${message}`, {
    fix:
      code === "UNAUTHORIZED"
        ? "Check SCRATCHRUN_API_KEY (create one with `scratchrun keys create --name N`)"
        : "Check SCRATCHRUN_URL",
  });
}

const SOURCES = ["server", "key", "host"] as const;
const range = z.strictObject({
  default: z.number().int(),
  max: z.number().int(),
  source: z.enum(SOURCES),
});

/**
 * What GET /v1/info tells a key about its own limits: the policy its calls are held to and its
 * quota. Remote mode builds its tool schema from it, so an agent behind `scratchrun-mcp` sees
 * its key's runtimes and maxima too.
 */
export const limitsWireSchema = z.strictObject({
  runtimes: z.array(z.enum(RUNTIMES)).min(1),
  runtimes_source: z.enum(SOURCES),
  networks: z.array(z.enum(NETWORK_MODES)).min(1),
  networks_source: z.enum(SOURCES),
  timeout_ms: range,
  memory_mb: range,
  concurrency: z.number().int(),
  rate_per_minute: z.number(),
  egress_allow: z.array(z.string()).optional(),
});
export type LimitsWire = z.infer<typeof limitsWireSchema>;

export function limitsToWire(p: CallerPolicy): LimitsWire {
  const c = p.call;
  return {
    runtimes: [...c.runtimes],
    runtimes_source: c.sources.runtimes,
    networks: [...c.networks],
    networks_source: c.sources.networks,
    timeout_ms: { ...c.timeoutMs, source: c.sources.timeoutMs },
    memory_mb: { ...c.memoryMb, source: c.sources.memoryMb },
    concurrency: p.quota.maxConcurrent,
    rate_per_minute: p.quota.ratePerMinute,
    ...(p.egressAllow ? { egress_allow: [...p.egressAllow] } : {}),
  };
}

/** The call policy a server reported for a key, or null if it sent none (an older server). */
export function policyFromWire(limits: unknown): CallPolicy | null {
  const r = limitsWireSchema.safeParse(limits);
  if (!r.success) return null;
  const l = r.data;
  return {
    runtimes: RUNTIMES.filter((x) => l.runtimes.includes(x)),
    networks: NETWORK_MODES.filter((x) => l.networks.includes(x)),
    timeoutMs: { default: l.timeout_ms.default, max: l.timeout_ms.max },
    memoryMb: { default: l.memory_mb.default, max: l.memory_mb.max },
    sources: {
      runtimes: l.runtimes_source,
      networks: l.networks_source,
      timeoutMs: l.timeout_ms.source,
      memoryMb: l.memory_mb.source,
    },
  };
}
