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

/** Parses untrusted input into a typed request, or throws INVALID_INPUT naming every problem. */
export function parseExecRequest(input: unknown): ExecRequest {
  const parsed = execInputSchema.safeParse(input);
  if (!parsed.success)
    throw new ScratchRunError(
      "INVALID_INPUT",
      `Invalid request: ${formatIssues(parsed.error.issues)}`,
    );
  return parsed.data;
}
