import { GENERATED_BLOCKS, renderGeneratedBlocks } from "../schema/limits-doc.js";
import { COMMANDS, usageLine } from "./commands.js";

/**
 * The docs' generated blocks, all of them: the schema's (`src/schema/limits-doc.ts`) and the
 * command list (`commands`), rendered from `COMMANDS`. `scripts/gen-docs.mjs` writes them and
 * `test/schema/docs.unit.test.ts` fails while a doc differs. Pure.
 */
export function commandsTable(): string {
  return [
    "| Command | What it does |",
    "|---|---|",
    // A table cell's | is escaped, inside code too (GFM).
    ...COMMANDS.map(
      (c) =>
        `| \`${usageLine(c).replaceAll("|", "\\|")}\` | ${c.root ? "as root: " : ""}${c.summary} |`,
    ),
  ].join("\n");
}

export const DOC_BLOCKS: Readonly<Record<string, () => string>> = {
  ...GENERATED_BLOCKS,
  commands: commandsTable,
};

/** A doc with every generated block rendered afresh. */
export function renderDocBlocks(doc: string): string {
  return renderGeneratedBlocks(doc, DOC_BLOCKS);
}
