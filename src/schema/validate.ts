import type { z } from "zod";
import { ScratchRunError } from "../errors.js";
import { execInputSchemaFor, type ExecInput, type ExecRequest } from "./exec.js";
import { asFileContent } from "./file-content.js";
import { DEFAULT_POLICY, type CallPolicy } from "./policy.js";

/** Formats zod issues as one line per problem, naming the field: what a model can act on. */
export function formatIssues(issues: readonly z.core.$ZodIssue[]): string {
  return issues
    .map((issue) => {
      // An input by its index as JSON counts it (inputs[3].env); other paths as before
      // (runtimes.0), which key-policy messages and their callers already name.
      const field = issue.path.length
        ? issue.path
            .map((p, i) =>
              i === 1 && issue.path[0] === "inputs" && typeof p === "number"
                ? `[${p}]`
                : `${i ? "." : ""}${String(p)}`,
            )
            .join("")
        : "request";
      return `${field}: ${issue.message}`;
    })
    .join("; ");
}

/**
 * Where the raw input has an own `__proto__` key: at the top level and in every object value
 * (`env`, `files`). JSON.parse keeps such a key as ordinary data, but every later object copy
 * (zod records, the MCP SDK's argument record, an object spread into a new literal) either drops it
 * or turns it into the copy's prototype, so the key would vanish instead of being refused like any
 * other unknown key or invalid name. Checked on the untouched input, before anything copies it.
 * Two levels deep is all the schema has: anything deeper is refused by type anyway.
 */
export function protoKeyPaths(input: unknown): string[] {
  if (typeof input !== "object" || input === null || Array.isArray(input)) return [];
  const paths = Object.hasOwn(input, "__proto__") ? ["request"] : [];
  const own = (value: unknown) =>
    typeof value === "object" && value !== null && Object.hasOwn(value, "__proto__");
  for (const [field, value] of Object.entries(input)) {
    if (own(value)) paths.push(field);
    // `inputs`: each entry, and its env and files, are objects a copy would drop the key from too.
    if (field === "inputs" && Array.isArray(value))
      value.forEach((entry: unknown, i) => {
        if (own(entry)) paths.push(`inputs[${i}]`);
        if (typeof entry !== "object" || entry === null) return;
        for (const [sub, v] of Object.entries(entry)) if (own(v)) paths.push(`inputs[${i}].${sub}`);
      });
  }
  return paths;
}

/**
 * A request as input again, for a server that parses it anew (an API replica's worker, remote
 * mode's service): each file's bytes as text, or base64 where they are not UTF-8; and for a
 * session's call, `memory_mb` and `network` only where its caller named them, so that defaults
 * it did not name are not held against the session there either (docs/decisions/0013-sessions.md).
 */
export function requestToWire(req: ExecRequest): ExecInput {
  const { named, files, inputs, ...fields } = req;
  const wire: ExecInput = { ...fields, files: wireFiles(files) };
  if (inputs)
    wire.inputs = inputs.map(({ env, files }) => ({
      ...(env ? { env } : {}),
      ...(files ? { files: wireFiles(files) } : {}),
    }));
  if (req.session_id !== undefined)
    for (const field of ["memory_mb", "network"] as const)
      if (!named.includes(field)) delete wire[field];
  return wire;
}

const wireFiles = (files: Record<string, Buffer>) =>
  Object.fromEntries(Object.entries(files).map(([path, bytes]) => [path, asFileContent(bytes)]));

/**
 * Parses untrusted input into a typed request with the schema of the caller's policy (the
 * product's by default), or throws INVALID_INPUT naming every problem and the limit it broke.
 */
export function parseExecRequest(input: unknown, policy: CallPolicy = DEFAULT_POLICY): ExecRequest {
  const proto = protoKeyPaths(input);
  if (proto.length)
    throw new ScratchRunError(
      "INVALID_INPUT",
      `Invalid request: ${proto.map((f) => `${f}: the key "__proto__" is not allowed`).join("; ")}`,
    );
  const parsed = execInputSchemaFor(policy).safeParse(input);
  if (!parsed.success)
    throw new ScratchRunError(
      "INVALID_INPUT",
      `Invalid request: ${formatIssues(parsed.error.issues)}`,
    );
  const named = Object.keys(input as object) as (keyof ExecInput)[];
  return { ...parsed.data, named };
}
