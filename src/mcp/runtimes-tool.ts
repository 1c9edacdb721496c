import type { PoolsReport } from "../backends/types.js";
import type { EngineOptions } from "../engine/engine.js";
import { EXTRAS } from "../runtimes/table.js";

export const RUNTIMES_TOOL_NAME = "scratchrun_runtimes";

export const runtimesToolDefinition = {
  name: RUNTIMES_TOOL_NAME,
  title: "List the runtimes and their packages",
  description:
    "Lists the runtimes scratchrun_exec offers, with exact interpreter versions and the packages each has preinstalled (including what this server's operator added), read from the runtime image itself.",
  inputSchema: { type: "object" as const, properties: {}, additionalProperties: false },
  annotations: { readOnlyHint: true, openWorldHint: false, idempotentHint: true },
};

/** One line: each warm pool's state and since when, and when they were all first full. */
function poolsLine(pools: PoolsReport): string {
  const kinds = pools.kinds
    .filter((k) => k.state !== "off")
    .map((k) => `${k.kind} ${k.state} (${k.ready}/${k.size}) since ${k.since}`);
  const full =
    pools.fullAfterMs === null
      ? "not all full yet"
      : `all first full ${(pools.fullAfterMs / 1000).toFixed(1)} s after start`;
  return `warm pools: ${kinds.length > 0 ? kinds.join(", ") : "none kept"}; ${full}`;
}

function versions(pkgs: Record<string, string> | undefined): string {
  return Object.entries(pkgs ?? {})
    .map(([p, v]) => `${p} ${v}`)
    .join(", ");
}

/** The image manifest as text a model can read, plus the same data structured. */
export function callRuntimesTool(engine: {
  readonly options: Pick<EngineOptions, "runtimes">;
  readonly backend?: { pools?(): PoolsReport };
}) {
  const info = engine.options.runtimes;
  const pools = engine.backend?.pools?.();
  if (!info)
    return { content: [{ type: "text" as const, text: "No runtime information on this server." }] };
  const lines: string[] = [];
  for (const [name, rt] of Object.entries(info.runtimes)) {
    const pkgs = versions(rt.packages);
    lines.push(`${name}: ${rt.version}${pkgs ? `; packages: ${pkgs}` : ""}`);
  }
  const extras = info.extras;
  if (extras) {
    const added = [
      ...EXTRAS.map(({ extras: { key, listLabel } }) => {
        return [listLabel, versions(extras[key])];
      }),
      ["files", extras.files.map((f) => `${f.path} (${f.bytes} bytes)`).join(", ")],
    ].filter(([, v]) => v);
    if (added.length > 0)
      lines.push(
        `added by this server's operator: ${added.map(([k, v]) => `${k}: ${v}`).join("; ")}`,
      );
  }
  for (const note of info.notes) lines.push(`note: ${note}`);
  if (pools) lines.push(poolsLine(pools));
  return {
    content: [{ type: "text" as const, text: lines.join("\n") }],
    structuredContent: {
      runtimes: info.runtimes,
      notes: info.notes,
      ...(extras ? { extras } : {}),
      ...(pools ? { pools } : {}),
    },
  };
}
