import assert from "node:assert/strict";
import type { TestContext } from "node:test";

/**
 * "Can't run here" is a skip on a developer's machine and a failure in CI (CI=true), so a CI run
 * can never go green by skipping what it was meant to prove.
 */
export const IN_CI = process.env.CI === "true";

/** For { skip } options: the reason outside CI; in CI nothing is skipped and the test fails. */
export function skipOutsideCi(reason: string | null | undefined): string | undefined {
  return reason && !IN_CI ? reason : undefined;
}

/** Inside a test: skip outside CI, fail in CI. */
export function cannotRunHere(t: TestContext, reason: string): void {
  if (IN_CI) assert.fail(`cannot run here (CI=true makes this a failure): ${reason}`);
  t.skip(reason);
}
