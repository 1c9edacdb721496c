#!/usr/bin/env node
// `scratchrun-mcp` (what `npx -y scratchrun-mcp` runs): the stdio MCP server, or, given a command
// first (`npx -y scratchrun-mcp setup`), that `scratchrun` command.
import { runMcpStdio } from "../cli/mcp.js";
import { unknownSettingWarnings } from "../schema/settings/unknown.js";

const COMMANDS = new Set([
  "setup",
  "doctor",
  "serve",
  "daemon",
  "keys",
  "run",
  "help",
  "--help",
  "-h",
]);
const argv = process.argv.slice(2);

// Once, before any command or the server starts; stderr only (stdout is the server's JSON-RPC).
for (const line of unknownSettingWarnings(process.env, "scratchrun-mcp"))
  process.stderr.write(`${line}\n`);

if (argv[0] !== undefined && COMMANDS.has(argv[0])) {
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
