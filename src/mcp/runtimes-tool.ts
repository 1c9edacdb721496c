import type { EngineOptions } from "../engine/engine.js";

export const RUNTIMES_TOOL_NAME = "scratchrun_runtimes";

export const runtimesToolDefinition = {
  name: RUNTIMES_TOOL_NAME,
  title: "List the runtimes and their packages",
  description:
    "Lists the runtimes scratchrun_exec offers, with exact interpreter versions and the packages each has preinstalled, read from the runtime image itself.",
  inputSchema: { type: "object" as const, properties: {}, additionalProperties: false },
  annotations: { readOnlyHint: true, openWorldHint: false, idempotentHint: true },
};

/** The image manifest as text a model can read, plus the same data structured. */
export function callRuntimesTool(engine: { readonly options: Pick<EngineOptions, "runtimes"> }) {
  const info = engine.options.runtimes;
  if (!info)
    return { content: [{ type: "text" as const, text: "No runtime information on this server." }] };
  const lines: string[] = [];
  for (const [name, rt] of Object.entries(info.runtimes)) {
    const pkgs = Object.entries(rt.packages ?? {})
      .map(([p, v]) => `${p} ${v}`)
      .join(", ");
    lines.push(`${name}: ${rt.version}${pkgs ? `; packages: ${pkgs}` : ""}`);
  }
  for (const note of info.notes) lines.push(`note: ${note}`);
  return {
    content: [{ type: "text" as const, text: lines.join("\n") }],
    structuredContent: { runtimes: info.runtimes, notes: info.notes },
  };
}
