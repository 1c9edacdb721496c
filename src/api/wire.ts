import { z } from "zod";
import type { ExecOutcome, FileOut } from "../engine/result.js";
import { ScratchRunError, type ErrorCode } from "../errors.js";
import { execOutputShape, returnedFileShape, type ExecResult } from "../schema/exec.js";

/**
 * The REST body of a result: the tool's structured result, where each returned file with status
 * "ok" also carries its bytes as `content_base64`. Remote mode turns it back into the engine's
 * ExecOutcome, so both sides render the very same MCP content.
 */
export const wireFileShape = returnedFileShape.extend({ content_base64: z.string().optional() });
export const wireResultSchema = z.strictObject({
  ...execOutputShape,
  files: z.array(z.strictObject(wireFileShape.shape)),
});
export type WireResult = z.infer<typeof wireResultSchema>;

export const ERROR_CODES = [
  "INVALID_INPUT",
  "NOT_READY",
  "BUSY",
  "SANDBOX_FAILED",
  "INTERNAL",
  "UNAUTHORIZED",
  "FORBIDDEN",
  "NOT_FOUND",
  "PAYLOAD_TOO_LARGE",
  "UNSUPPORTED_MEDIA_TYPE",
] as const;
export const wireErrorSchema = z.strictObject({
  error: z.strictObject({ code: z.enum(ERROR_CODES), message: z.string() }),
});
export type WireError = z.infer<typeof wireErrorSchema>;

export function outcomeToWire(outcome: ExecOutcome): WireResult {
  const contents = [...outcome.files];
  const files = outcome.result.files.map((f) => {
    if (f.status !== "ok") return { ...f };
    const content = contents.shift();
    return content ? { ...f, content_base64: content.content.toString("base64") } : { ...f };
  });
  return { ...outcome.result, files };
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
  const result: ExecResult = { ...parsed.data, files: infos };
  return { result, files };
}

const ENGINE_CODES = new Set<string>(["INVALID_INPUT", "NOT_READY", "BUSY", "SANDBOX_FAILED"]);

/** An error body back into the error the engine would have thrown locally. */
export function wireToError(status: number, body: unknown): ScratchRunError {
  const parsed = wireErrorSchema.safeParse(body);
  if (!parsed.success)
    return new ScratchRunError("INTERNAL", `the ScratchRun server answered HTTP ${status}`);
  const { code, message } = parsed.data.error;
  if (ENGINE_CODES.has(code)) return new ScratchRunError(code as ErrorCode, message);
  return new ScratchRunError("NOT_READY", `the ScratchRun server refused the call: ${message}`, {
    fix:
      code === "UNAUTHORIZED"
        ? "Check SCRATCHRUN_API_KEY (create one with `scratchrun keys create --name N`)"
        : "Check SCRATCHRUN_URL",
  });
}
