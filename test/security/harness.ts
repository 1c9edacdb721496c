import assert from "node:assert/strict";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { startServer, type ExecStructured, type McpHarness } from "../helpers/mcp-client.js";
import { PY } from "../helpers/pythons.js";

/**
 * Shared plumbing for the adversarial suite: every case drives the built server through the
 * SDK's stdio client, exactly as an attacker-controlled model would, and reads back what the
 * hostile program inside could do. Promise ids are in docs/SECURITY.md and docs/THREAT-MODEL.md.
 */
/**
 * Every backend the product ships: each promise is held on each (docs/SPECIFICATION.md names the
 * test per backend). Where a case cannot apply the same way on a backend (a VM has its own kernel,
 * init and sysfs), the test says why and asserts what does apply there.
 */
export const SECURITY_BACKENDS = TEST_BACKENDS;

export interface SecurityServer {
  h: McpHarness;
  /** Runs a call that must be accepted; returns the structured result. */
  run(args: Record<string, unknown>): Promise<ExecStructured>;
  close(): Promise<void>;
}

/**
 * One server per file and backend, started as a user would. `runtimes`: the runtimes the file
 * calls, which alone get a warm sandbox (SCRATCHRUN_POOL_SIZE): a microVM template costs a TCG
 * boot per runtime, so a file that only calls bash builds only bash's.
 */
export async function securityServer(
  backend: string,
  env: Record<string, string> = {},
  runtimes: readonly string[] = ["bash", PY],
): Promise<SecurityServer> {
  const base: HostSnapshot = snapshot();
  const h = await startServer({
    SCRATCHRUN_ISOLATION: backend,
    SCRATCHRUN_POOL_SIZE: runtimes.map((r) => `${r}=1`).join(","),
    ...env,
  });
  return {
    h,
    async run(args) {
      return (await h.exec(args)).s;
    },
    async close() {
      await h.close();
      await assertNoLeaks(base);
    },
  };
}

/** Python source from lines (keeps the hostile programs readable in the test). */
export const py = (...lines: string[]): string => lines.join("\n");

/** Lines of the form "KEY value" printed by a probe, as a map. */
export function report(stdout: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of stdout.split("\n")) {
    const i = line.indexOf(" ");
    if (i > 0) out.set(line.slice(0, i), line.slice(i + 1));
  }
  return out;
}

/** A probe line "name result" where result must not say ALLOWED. */
export function assertAllRefused(stdout: string, expected: number): void {
  const lines = stdout.trim().split("\n");
  assert.equal(lines.length, expected, stdout);
  for (const line of lines) assert.doesNotMatch(line, /ALLOWED/, line);
}
