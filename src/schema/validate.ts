import type { z } from "zod";
import { ScratchRunError } from "../errors.js";
import { execInputSchema, type ExecRequest } from "./exec.js";

/** Formats zod issues as one line per problem, naming the field: what a model can act on. */
export function formatIssues(issues: readonly z.core.$ZodIssue[]): string {
  return issues
    .map((issue) => {
      const field = issue.path.length ? issue.path.map(String).join(".") : "request";
      return `${field}: ${issue.message}`;
    })
    .join("; ");
}

/**
 * Record fields whose own `__proto__` key (JSON.parse keeps it) would vanish: zod builds records
 * by assignment, which sets the prototype instead, so the file or variable would silently not
 * exist. Refused rather than dropped.
 */
function protoKeyFields(input: unknown): string[] {
  if (typeof input !== "object" || input === null) return [];
  return ["env", "files"].filter((field) => {
    const value = (input as Record<string, unknown>)[field];
    return typeof value === "object" && value !== null && Object.hasOwn(value, "__proto__");
  });
}

/** Parses untrusted input into a typed request, or throws INVALID_INPUT naming every problem. */
export function parseExecRequest(input: unknown): ExecRequest {
  const proto = protoKeyFields(input);
  if (proto.length)
    throw new ScratchRunError(
      "INVALID_INPUT",
      `Invalid request: ${proto.map((f) => `${f}: the key "__proto__" is not allowed`).join("; ")}`,
    );
  const parsed = execInputSchema.safeParse(input);
  if (!parsed.success)
    throw new ScratchRunError(
      "INVALID_INPUT",
      `Invalid request: ${formatIssues(parsed.error.issues)}`,
    );
  return parsed.data;
}
