import { totalmem } from "node:os";
import { RAISE_CEILINGS } from "../schema/limits.js";
import type { LimitSource } from "../schema/policy.js";

/**
 * The most any call may get where it runs, whatever a server's or a key's policy says: the
 * timeout ceiling, and memory up to a share of the host's RAM (`source` "host"); an API replica,
 * which runs no sandbox, uses the recordable ceiling and leaves the host's to its workers.
 */
export interface Ceiling {
  timeoutMs: number;
  memoryMb: number;
  /** "host" when memory is bounded by this host's RAM. */
  memorySource: LimitSource;
}

const MIB = 1024 * 1024;

/** What this host gives one sandbox at most: half of its RAM (RAISE_CEILINGS.hostMemoryShare). */
export function hostCeiling(totalBytes: number = totalmem()): Ceiling {
  return {
    timeoutMs: RAISE_CEILINGS.timeoutMs,
    memoryMb: Math.floor((totalBytes / MIB) * RAISE_CEILINGS.hostMemoryShare),
    memorySource: "host",
  };
}

/** For a process that runs no sandbox (an API replica): what a policy may name at all. */
export const RECORDABLE_CEILING: Ceiling = {
  timeoutMs: RAISE_CEILINGS.timeoutMs,
  memoryMb: RAISE_CEILINGS.memoryMb,
  memorySource: "server",
};
