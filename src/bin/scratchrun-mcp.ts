#!/usr/bin/env node
import { runMcpStdio } from "../cli/mcp.js";

runMcpStdio(process.argv.slice(2)).catch((e: unknown) => {
  process.stderr.write(`scratchrun-mcp: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
