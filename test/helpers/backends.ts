import { setting } from "../../src/schema/settings/read.js";

/**
 * The backends the shared suites run against. Every backend the product ships is listed here;
 * a suite runs once per backend (parametrised, never copied), and nothing is skipped because a
 * host "can't": a missing QEMU or image fails the run. SCRATCHRUN_TEST_BACKENDS narrows the list
 * for a developer's quick loop; CI (CI=true) always runs every backend.
 */
const ALL = ["namespace", "microvm"] as const;
export type TestBackend = (typeof ALL)[number];

const narrowed = setting("SCRATCHRUN_TEST_BACKENDS", process.env);

export const TEST_BACKENDS: readonly TestBackend[] =
  process.env.CI === "true" || !narrowed ? ALL : ALL.filter((b) => narrowed.split(",").includes(b));

/** Names of env vars whose values tests plant in the server and then hunt for. */
export const SERVER_SECRET = "sr-test-server-secret-4f1c9a";

/** The isolation a result must report for a backend: microvm says whether KVM or TCG ran it. */
export function expectedIsolation(backend: TestBackend): RegExp {
  return backend === "namespace" ? /^namespace$/ : /^microvm-(kvm|tcg)$/;
}
