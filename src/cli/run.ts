import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { parseArgs } from "node:util";
import { escapeControlChars } from "../engine/shape-output.js";
import { isScratchRunError } from "../errors.js";
import { execInputShape } from "../schema/exec.js";
import { asFileContent } from "../schema/file-content.js";
import { withImageConfig } from "../images/config-load.js";
import { createEngineFromEnv, withIsolation } from "../compose/engine-factory.js";

/**
 * How each schema field is given on the command line. Typed against the schema's keys, so a new
 * field without a flag fails to compile. `session_id` has none: a session outlives its calls, and
 * `scratchrun run` is one call in a process that exits after it; nor has `inputs`, a list of
 * overlays that flags cannot spell (the MCP tool and POST /v1/exec take it).
 */
export const CLI_FLAGS: Record<
  Exclude<keyof typeof execInputShape, "session_id" | "inputs">,
  string
> = {
  runtime: "runtime",
  code: "code",
  timeout_ms: "timeout-ms",
  memory_mb: "memory-mb",
  env: "env",
  secrets: "secret",
  files: "file",
  return_files: "return-file",
  network: "network",
  max_output_bytes: "max-output-bytes",
  redact_env: "no-redact-env",
};

function splitPair(flag: string, value: string): [string, string] {
  const i = value.indexOf("=");
  if (i <= 0) throw new Error(`--${flag} takes NAME=VALUE, got ${JSON.stringify(value)}`);
  return [value.slice(0, i), value.slice(i + 1)];
}

function toInt(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^-?\d+$/.test(value))
    throw new Error(`--${flag} takes an integer, got ${JSON.stringify(value)}`);
  return Number(value);
}

/** Parses `scratchrun run` arguments into the tool's input object (validated later, once). */
export function parseRunArgs(argv: string[]): {
  input: Record<string, unknown>;
  outDir?: string;
  json: boolean;
  isolation?: string;
  imageConfig?: string;
} {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      runtime: { type: "string" },
      code: { type: "string" },
      "timeout-ms": { type: "string" },
      "memory-mb": { type: "string" },
      env: { type: "string", multiple: true },
      secret: { type: "string", multiple: true },
      file: { type: "string", multiple: true },
      "return-file": { type: "string", multiple: true },
      network: { type: "string" },
      "max-output-bytes": { type: "string" },
      "no-redact-env": { type: "boolean", default: false },
      "out-dir": { type: "string" },
      json: { type: "boolean", default: false },
      isolation: { type: "string" },
      "image-config": { type: "string" },
    },
  });
  let code = values.code;
  if (code === undefined) {
    const source = positionals[0];
    if (source === undefined) throw new Error("give a file to run, `-` for stdin, or --code");
    code = readFileSync(source === "-" ? 0 : source, "utf8");
  } else if (positionals.length) {
    throw new Error("give either --code or a file, not both");
  }
  const input: Record<string, unknown> = { runtime: values.runtime, code };
  const timeout = toInt("timeout-ms", values["timeout-ms"]);
  if (timeout !== undefined) input.timeout_ms = timeout;
  const memory = toInt("memory-mb", values["memory-mb"]);
  if (memory !== undefined) input.memory_mb = memory;
  if (values.env) input.env = Object.fromEntries(values.env.map((v) => splitPair("env", v)));
  // --secret NAME=host,host: the value is this process's $NAME (never a command-line argument).
  if (values.secret)
    input.secrets = Object.fromEntries(
      values.secret.map((v) => {
        const [name, hosts] = splitPair("secret", v);
        const value = process.env[name];
        if (value === undefined) throw new Error(`--secret ${name}: $${name} is not set`);
        return [name, { value, hosts: hosts.split(",").filter((h) => h !== "") }];
      }),
    );
  if (values.file)
    input.files = Object.fromEntries(
      values.file.map((v) => {
        const [path, local] = splitPair("file", v);
        return [path, asFileContent(readFileSync(local))];
      }),
    );
  if (values["return-file"]) input.return_files = values["return-file"];
  if (values.network !== undefined) input.network = values.network;
  const shown = toInt("max-output-bytes", values["max-output-bytes"]);
  if (shown !== undefined) input.max_output_bytes = shown;
  if (values["no-redact-env"]) input.redact_env = false;
  return {
    input,
    json: values.json ?? false,
    ...(values["out-dir"] ? { outDir: values["out-dir"] } : {}),
    ...(values.isolation ? { isolation: values.isolation } : {}),
    ...(values["image-config"] ? { imageConfig: values["image-config"] } : {}),
  };
}

/**
 * What the code printed, for one of our output streams: a terminal gets control characters
 * escaped (no ANSI/OSC sequence of the code's reaches it: title changes, cursor moves, hidden
 * text), a pipe or file gets the bytes unchanged.
 */
export function forTerminal(stream: { isTTY?: boolean }, text: string): string {
  return stream.isTTY ? escapeControlChars(text) : text;
}

export async function runCommand(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseRunArgs(argv);
  } catch (e) {
    process.stderr.write(`scratchrun run: ${e instanceof Error ? e.message : String(e)}\n`);
    return 2;
  }
  let engine;
  try {
    // One call, then exit: no warm pool to fill unless asked for.
    const env = { SCRATCHRUN_POOL_SIZE: "0", ...process.env };
    engine = await createEngineFromEnv(
      withImageConfig(withIsolation(env, parsed.isolation), parsed.imageConfig),
    );
  } catch (e) {
    process.stderr.write(`scratchrun run: ${e instanceof Error ? e.message : String(e)}\n`);
    return 2;
  }
  const controller = new AbortController();
  process.once("SIGINT", () => controller.abort());
  try {
    const outcome = await engine.executeInput(parsed.input, { signal: controller.signal });
    const r = outcome.result;
    if (parsed.json) {
      process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
    } else {
      process.stdout.write(forTerminal(process.stdout, r.stdout));
      process.stderr.write(forTerminal(process.stderr, r.stderr));
      if (r.exit_reason !== "ok" && r.exit_reason !== "error")
        process.stderr.write(
          `scratchrun: ${r.exit_reason}${r.message ? `: ${escapeControlChars(r.message)}` : ""}\n`,
        );
    }
    if (parsed.outDir) {
      mkdirSync(parsed.outDir, { recursive: true });
      for (const f of outcome.files)
        writeFileSync(join(parsed.outDir, basename(f.path)), f.content);
    }
    if (r.exit_code !== null) return r.exit_code;
    return r.exit_reason === "timeout" ? 124 : 125;
  } catch (e) {
    process.stderr.write(
      `scratchrun run: ${isScratchRunError(e) ? `${e.code}: ` : ""}${e instanceof Error ? e.message : String(e)}\n`,
    );
    return 2;
  } finally {
    await engine.close();
  }
}
