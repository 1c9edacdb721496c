/**
 * The fields a caller's policy shapes, as a call (exec.ts) and a session's start (session.ts)
 * both take them: the runtimes and networks it allows, and a limit's maximum and default. Each
 * refuses what the policy does not allow with the policy's own words (policy.ts).
 */
import { z } from "zod";
import type { RuntimeName } from "../runtimes/names.js";
import { LIMITS } from "./limits.js";
import type { NetworkMode } from "./names.js";
import { maxMessage, networkMessage, runtimeMessage, type CallPolicy } from "./policy.js";

/** One of the policy's runtimes. */
export function runtimeField(policy: CallPolicy) {
  return z.enum(policy.runtimes as readonly RuntimeName[] as [RuntimeName, ...RuntimeName[]], {
    error: (issue) => runtimeMessage(issue.input, policy),
  });
}

/** One of the policy's networks; default its first. */
export function networkField(policy: CallPolicy) {
  return z
    .enum(policy.networks as readonly NetworkMode[] as [NetworkMode, ...NetworkMode[]], {
      error: (issue) => networkMessage(issue.input, policy),
    })
    .default(policy.networks[0] ?? "none");
}

/** A whole number from the product's minimum to the policy's maximum; default the policy's. */
export function limitField(policy: CallPolicy, limit: "timeoutMs" | "memoryMb") {
  return z
    .number()
    .int()
    .min(LIMITS[limit].min)
    .max(policy[limit].max, { error: () => maxMessage(policy, limit) })
    .default(policy[limit].default);
}
