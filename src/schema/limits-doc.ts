import { LIMITS } from "./limits.js";
import { RUNTIMES } from "./exec.js";
import { settingsTable } from "./settings/doc.js";
import { ERROR_CODES, ERROR_CODE_MEANINGS } from "../errors.js";

/**
 * The parts of the docs that quote limits or settings, rendered from `LIMITS` and `SETTINGS` so
 * that no doc can say a number or a variable the code does not have. A doc holds each block between `<!-- generated:NAME -->` and
 * `<!-- /generated:NAME -->`; `scripts/gen-docs.mjs` rewrites them and `test/schema/docs.unit.test.ts`
 * fails when a doc differs from its rendering.
 */

/** Bytes in the unit a reader would write: "1 MiB", "32 KiB", "1000 bytes". */
export function formatBytes(n: number): string {
  if (n >= 1024 * 1024 && n % (1024 * 1024) === 0) return `${n / (1024 * 1024)} MiB`;
  if (n >= 1024 && n % 1024 === 0) return `${n / 1024} KiB`;
  return `${n} bytes`;
}

const code = (s: string) => `\`${s}\``;

function parameterTable(): string {
  const L = LIMITS;
  const rows: [string, string, string, string][] = [
    ["runtime", RUNTIMES.map(code).join(" \\| "), "required", "one of these"],
    ["code", "string", "required", formatBytes(L.codeBytes.max)],
    [
      "timeout_ms",
      "integer",
      String(L.timeoutMs.default),
      `${L.timeoutMs.min} – ${L.timeoutMs.max}`,
    ],
    ["memory_mb", "integer", String(L.memoryMb.default), `${L.memoryMb.min} – ${L.memoryMb.max}`],
    [
      "env",
      "object NAME → value",
      "`{}`",
      `${L.env.maxEntries} entries, names \`[A-Za-z_][A-Za-z0-9_]*\` of at most ${L.env.maxNameBytes} bytes, values ${formatBytes(L.env.maxValueBytes)}, ${formatBytes(L.env.maxTotalBytes)} in all`,
    ],
    [
      "secrets",
      "object NAME → `{value, hosts}`",
      "`{}`",
      `${L.secrets.maxEntries} secrets, names as \`env\`'s, values ${L.secrets.minValueBytes} – ${L.secrets.maxValueBytes} bytes of printable ASCII, 1 – ${L.secrets.maxHosts} hosts each (allowlist entries); the code gets NAME = a placeholder, the egress proxy writes the value into headers and URL queries of HTTP(S) requests to those hosts only; needs \`network: "public"\`, and the call then reaches only its allowlist (on a server without one, only the secrets' hosts)`,
    ],
    [
      "files",
      'object path → UTF-8 text, or `{"base64": …}` for bytes',
      "`{}`",
      `${L.files.maxCount} files, ${formatBytes(L.files.maxFileBytes)} each, ${formatBytes(L.files.maxTotalBytes)} total`,
    ],
    [
      "return_files",
      "string[]",
      "`[]`",
      `${L.returnFiles.maxCount} paths; ${formatBytes(L.returnFiles.maxFileBytes)} each, ${formatBytes(L.returnFiles.maxTotalBytes)} total returned; a file named twice (\`ok.txt\`, \`/home/user/./ok.txt\`) is returned once`,
    ],
    [
      "network",
      "`public` \\| `none`",
      "`public`",
      "`public` = internet yes; private ranges, metadata, the host, its LAN and gateway never; `none` = loopback only",
    ],
    [
      "max_output_bytes",
      "integer",
      String(L.shownOutputBytes.default),
      `${L.shownOutputBytes.min} – ${L.shownOutputBytes.max} per stream shown; longer output keeps its head and tail with the omitted byte count`,
    ],
    [
      "redact_env",
      "boolean",
      "`true`",
      "replace `env` values (6+ characters) by `[redacted:NAME]` in stdout, stderr, streamed output and returned text files (`secrets` values always are)",
    ],
    [
      "inputs",
      "`{env?, files?}`[]",
      "none (one run)",
      `1 – ${L.inputs.maxEntries} entries, each laid over the call's \`env\` and \`files\` and held to their limits; the same code runs once per entry in its own fresh sandbox, as many at once as the caller's concurrency allows; one result per entry in order and a summary; each entry's streams show at most ${L.answerChars.max.toLocaleString("en-US")} / (5 × entries) bytes (at least ${formatBytes(L.shownOutputBytes.min)}), so the answer stays within its characters; not with \`session_id\``,
    ],
  ];
  return [
    "| Parameter | Type | Default | Limit |",
    "|---|---|---|---|",
    ...rows.map(([name, type, def, limit]) => `| ${code(name)} | ${type} | ${def} | ${limit} |`),
  ].join("\n");
}

function resultLimits(): string {
  const L = LIMITS;
  return [
    `An image over ${formatBytes(L.inlineImageBytes.max)} comes back as a resource with a note`,
    `instead of inline. A program writing more than ${formatBytes(L.outputBytes.max)} to a stream is`,
    `stopped with \`exit_reason: "output_limit"\`. A call (or a session's cell) shows at most`,
    `${L.outputs.maxCount} outputs, each at most ${formatBytes(L.outputs.maxBytes)}, ${formatBytes(L.outputs.maxTotalBytes)} in all; the`,
    `rest are named, and a figure past them is never drawn. One answer stays under`,
    `${formatBytes(L.answerBytes.max)}: returned files and outputs' images that would pass it are left out and named.`,
    `Its text and structuredContent together stay under ${L.answerChars.max.toLocaleString("en-US")} characters, what`,
    "`scratchrun_exec` declares to clients as `anthropic/maxResultSizeChars`: past it, returned text",
    "files, outputs' text forms and then the streams' head and tail are cut, and named (a binary",
    "file's base64 is not text a model reads: it comes back within the file limits).",
  ].join("\n");
}

function errorCodes(): string {
  return [
    "| Code | Means |",
    "|---|---|",
    ...ERROR_CODES.map((c) => `| \`${c}\` | ${ERROR_CODE_MEANINGS[c]} |`),
  ].join("\n");
}

/**
 * Every generated block this layer can render, by name (`src/cli/doc-blocks.ts` adds the blocks
 * rendered from above it, the command list).
 */
export const GENERATED_BLOCKS: Readonly<Record<string, () => string>> = {
  "parameter-table": parameterTable,
  "result-limits": resultLimits,
  "settings-table": settingsTable,
  "error-codes": errorCodes,
};

const BLOCK = /(<!-- generated:([a-z-]+) -->\n)([\s\S]*?)(\n<!-- \/generated:\2 -->)/g;

/** The doc with every generated block rendered afresh from `blocks`; unknown block names throw. */
export function renderGeneratedBlocks(
  doc: string,
  blocks: Readonly<Record<string, () => string>> = GENERATED_BLOCKS,
): string {
  return doc.replace(BLOCK, (_all, open: string, name: string, _body: string, close: string) => {
    const render = blocks[name];
    if (!render) throw new Error(`unknown generated block "${name}"`);
    return `${open}${render()}${close}`;
  });
}

/** Names of the generated blocks a doc holds. */
export function generatedBlockNames(doc: string): string[] {
  return [...doc.matchAll(BLOCK)].map((m) => m[2] ?? "");
}

/**
 * Every byte size the code has (LIMITS and the agent protocol's frame caps), in doc form: a
 * quantity in MiB or KiB that a doc quotes must be one of these.
 */
export function knownByteSizes(extra: readonly number[] = []): Set<string> {
  const out = new Set<string>();
  const walk = (v: unknown, key: string) => {
    if (typeof v === "number" && /bytes/i.test(key)) out.add(formatBytes(v));
    else if (typeof v === "object" && v !== null)
      for (const [k, x] of Object.entries(v)) walk(x, /bytes/i.test(key) ? key : k);
  };
  walk(LIMITS, "");
  out.add(formatBytes(LIMITS.scratchMb * 1024 * 1024));
  for (const n of extra) out.add(formatBytes(n));
  return out;
}
