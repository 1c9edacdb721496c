/**
 * The backends the shared suites run against. Every backend the product ships is listed here;
 * a suite runs once per backend (parametrised, never copied), and nothing is skipped because a
 * host "can't": a missing QEMU or image fails the run.
 */
export const TEST_BACKENDS = ["namespace"] as const;
export type TestBackend = (typeof TEST_BACKENDS)[number];

/** Names of env vars whose values tests plant in the server and then hunt for. */
export const SERVER_SECRET = "sr-test-server-secret-4f1c9a";
