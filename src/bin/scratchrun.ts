#!/usr/bin/env node
import { main } from "../cli/main.js";

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`scratchrun: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  },
);
