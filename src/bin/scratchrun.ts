#!/usr/bin/env node
import { main } from "../cli/main.js";
import { unknownSettingWarnings } from "../schema/settings/unknown.js";

for (const line of unknownSettingWarnings(process.env, "scratchrun"))
  process.stderr.write(`${line}\n`);

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`scratchrun: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  },
);
