/**
 * scratchrun_session_start's input and the session it answers with (docs/decisions/0013-sessions.md):
 * the sandbox every call of the session shares. Runtimes, networks and memory come from the
 * caller's policy, as a call's do.
 */
import { z } from "zod";
import { ScratchRunError } from "../errors.js";
import { LIMITS } from "./limits.js";
import { DEFAULT_POLICY, type CallPolicy } from "./policy.js";
import { limitField, networkField, runtimeField } from "./policy-fields.js";
import { formatIssues, protoKeyPaths } from "./validate.js";

const { idleTimeoutMs, lifetimeMs } = LIMITS.session;

export function sessionStartShapeFor(policy: CallPolicy) {
  const { runtimes, memoryMb } = policy;
  return {
    runtime: runtimeField(policy).describe(
      `The runtime every call of the session uses: ${runtimes.join(" | ")}`,
    ),
    memory_mb: limitField(policy, "memoryMb").describe(
      `Memory limit of the session's sandbox in MB, for all its calls together (default ${memoryMb.default}, max ${memoryMb.max})`,
    ),
    network: networkField(policy).describe(
      'The session\'s network, "public" or "none", for all its calls',
    ),
    idle_timeout_ms: z
      .number()
      .int()
      .min(idleTimeoutMs.min)
      .max(idleTimeoutMs.max)
      .default(idleTimeoutMs.default)
      .describe(
        `The session ends after this long without a call (default ${idleTimeoutMs.default}, max ${idleTimeoutMs.max})`,
      ),
    lifetime_ms: z
      .number()
      .int()
      .min(lifetimeMs.min)
      .max(lifetimeMs.max)
      .default(lifetimeMs.default)
      .describe(
        `The session ends this long after it started, whatever it is doing (default ${lifetimeMs.default}, max ${lifetimeMs.max})`,
      ),
  };
}

export const sessionStartShape = sessionStartShapeFor(DEFAULT_POLICY);
export const sessionStartSchema = z.strictObject(sessionStartShape);
export type SessionStartRequest = z.output<typeof sessionStartSchema>;

export const sessionEndShape = {
  session_id: z.string().describe("The session to end (from scratchrun_session_start)"),
};

/** What a started session is, as the tools and the REST API answer. */
export const sessionInfoShape = {
  session_id: z.string(),
  runtime: z.string(),
  memory_mb: z.number().int(),
  network: z.enum(["public", "none"]),
  isolation: z.string(),
  expires_at: z.string(),
  idle_timeout_ms: z.number().int(),
  calls: z.number().int(),
};
export const sessionInfoSchema = z.object(sessionInfoShape);
export type SessionInfo = z.infer<typeof sessionInfoSchema>;

export function parseSessionStart(
  input: unknown,
  policy: CallPolicy = DEFAULT_POLICY,
): SessionStartRequest {
  const proto = protoKeyPaths(input);
  if (proto.length)
    throw new ScratchRunError(
      "INVALID_INPUT",
      'Invalid request: the key "__proto__" is not allowed',
    );
  const parsed = z.strictObject(sessionStartShapeFor(policy)).safeParse(input ?? {});
  if (!parsed.success)
    throw new ScratchRunError(
      "INVALID_INPUT",
      `Invalid request: ${formatIssues(parsed.error.issues)}`,
    );
  return parsed.data;
}
