/**
 * The few host tools sandbox networking drives (ip, nft, sysctl), each run with a deadline and
 * optionally inside a named network namespace. No shell: argv only, names validated by callers.
 */
import { execFile } from "node:child_process";

const TOOL_PATHS: Record<"ip" | "nft" | "sysctl", string> = {
  ip: "/usr/sbin/ip",
  nft: "/usr/sbin/nft",
  sysctl: "/usr/sbin/sysctl",
};

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs argv; resolves with the exit code (never rejects for a non-zero exit). */
export function runCommand(
  argv: string[],
  input?: string,
  timeoutMs = 10_000,
): Promise<CommandResult> {
  const [file, ...args] = argv;
  if (!file) return Promise.reject(new TypeError("empty argv"));
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024, encoding: "utf8" },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : -1) : 0;
        resolve({ code, stdout, stderr: stderr || (error && code === -1 ? error.message : "") });
      },
    );
    if (input !== undefined) child.stdin?.end(input);
  });
}

/** argv for `tool args...` inside netns `ns` (null: the current, i.e. root, namespace). */
export function inNetns(
  ns: string | null,
  tool: keyof typeof TOOL_PATHS,
  args: string[],
): string[] {
  const path = TOOL_PATHS[tool];
  if (ns === null) return [path, ...args];
  if (tool === "ip") return [path, "-n", ns, ...args];
  return [TOOL_PATHS.ip, "netns", "exec", ns, path, ...args];
}

export class CommandError extends Error {
  constructor(
    readonly argv: string[],
    readonly result: CommandResult,
  ) {
    super(`${argv.join(" ")} failed (${result.code}): ${result.stderr.trim().slice(0, 500)}`);
    this.name = "CommandError";
  }
}

/** Runs and throws CommandError on a non-zero exit. */
export async function mustRun(argv: string[], input?: string): Promise<string> {
  const result = await runCommand(argv, input);
  if (result.code !== 0) throw new CommandError(argv, result);
  return result.stdout;
}
