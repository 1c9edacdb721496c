import { runChecks } from "../setup/checks.js";

/** `scratchrun doctor`: every check, what is missing and the exact fix; exit 1 if any failed. */
export async function runDoctor(_argv: string[]): Promise<number> {
  const checks = await runChecks();
  let failed = 0;
  for (const c of checks) {
    const mark = c.ok ? "ok  " : c.required ? "FAIL" : "warn";
    if (!c.ok && c.required) failed++;
    process.stdout.write(`${mark}  ${c.name}: ${c.detail}\n`);
    if (!c.ok && c.fix) process.stdout.write(`      fix: ${c.fix}\n`);
  }
  process.stdout.write(
    failed ? `\n${failed} required check(s) failed\n` : "\nall required checks passed\n",
  );
  return failed ? 1 : 0;
}
