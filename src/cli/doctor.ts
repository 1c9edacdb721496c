import { parseArgs } from "node:util";
import { withImageConfig } from "../images/config-load.js";
import { nodeCheck, runChecks } from "./doctor-checks.js";
import { localServiceChecks } from "./doctor-service.js";

/** `scratchrun doctor`: every check, what is missing and the exact fix; exit 1 if any failed. */
export async function runDoctor(argv: string[]): Promise<number> {
  let flag: string | undefined;
  try {
    flag = parseArgs({ args: argv, options: { "image-config": { type: "string" } }, strict: true })
      .values["image-config"];
  } catch (e) {
    process.stderr.write(`scratchrun doctor: ${(e as Error).message}\n`);
    return 2;
  }
  const env = withImageConfig(process.env, flag);
  // An ordinary user runs nothing here but through the local service: doctor checks that alone,
  // and reads nothing that would build or cache on the user's behalf (decision 0018).
  const root = process.getuid?.() === 0;
  const checks = root
    ? [...(await runChecks(env)), ...(await localServiceChecks(env, false))]
    : [nodeCheck(), ...(await localServiceChecks(env, true))];
  if (!root)
    process.stdout.write(
      `as uid ${process.getuid?.()}: ScratchRun runs here through the local service (root runs scratchrun doctor for the host's checks)\n`,
    );
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
