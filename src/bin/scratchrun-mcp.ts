#!/usr/bin/env node
// `scratchrun-mcp` (what `npx -y scratchrun-mcp` runs): the stdio MCP server, or, given a command
// first (`npx -y scratchrun-mcp setup`), that `scratchrun` command: every one of src/cli/commands.ts.
// A first word that is neither a command nor an option is answered as `scratchrun` answers it
// (unknown command, the usage), not taken for the server's argument.
import { runMcpStdio } from "../cli/mcp.js";
import { isCommandName } from "../cli/commands.js";
import { unknownSettingWarnings } from "../schema/settings/unknown.js";

const argv = process.argv.slice(2);
const first = argv[0];

// Once, before any command or the server starts; stderr only (stdout is the server's JSON-RPC).
for (const line of unknownSettingWarnings(process.env, "scratchrun-mcp"))
  process.stderr.write(`${line}\n`);

if (
  isCommandName(first) ||
  (first !== undefined && !first.startsWith("-")) ||
  first === "--help" ||
  first === "-h"
) {
  const { main } = await import("../cli/main.js");
  main(argv).then(
    (code) => process.exit(code),
    (e: unknown) => {
      process.stderr.write(`scratchrun: ${e instanceof Error ? e.message : String(e)}\n`);
      process.exit(1);
    },
  );
} else {
  runMcpStdio(argv).catch((e: unknown) => {
    process.stderr.write(
      `scratchrun-mcp: ${oneLine(e instanceof Error ? e.message : String(e))}\n`,
    );
    process.exit(1);
  });
}

/** A start-up failure is one line, however the message was built. */
function oneLine(s: string): string {
  return s.replace(/\s*\n\s*/g, " ");
}
