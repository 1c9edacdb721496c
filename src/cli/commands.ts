import { RUNTIMES } from "../runtimes/names.js";

/**
 * Every command `scratchrun` knows, once: `main.ts` dispatches from this list (a name without a
 * handler does not compile), `scratchrun-mcp` runs any of them given first (`npx -y scratchrun-mcp
 * setup`), and the usage text, the README's command list and ARCHITECTURE's (the generated block
 * `commands`, `src/cli/doc-blocks.ts`) are rendered from it.
 */
export interface CommandInfo {
  readonly name: string;
  /** What follows `scratchrun NAME` on its usage line. */
  readonly args: string;
  /** One line: what it does. */
  readonly summary: string;
  /** Refused, or useless, unless run as root. */
  readonly root: boolean;
}

export const COMMANDS = [
  {
    name: "run",
    args: `--runtime <${RUNTIMES.join("|")}> [options] <file | ->`,
    summary: "run code once in a fresh sandbox, with the tool's options as flags (below)",
    root: false,
  },
  {
    name: "mcp",
    args: "[--egress-allow LIST]",
    summary: "the stdio MCP server (what scratchrun-mcp runs given no command)",
    root: false,
  },
  {
    name: "doctor",
    args: "",
    summary: "check what this host can do, and how to fix what is missing",
    root: false,
  },
  {
    name: "setup",
    args: "[--image-config PATH]",
    summary: "packages, agent, runtime image, microVM guest, templates, local service (idempotent)",
    root: true,
  },
  {
    name: "image",
    args: "build [--force] [--image-config PATH]",
    summary: "build the runtime image with the image config",
    root: true,
  },
  {
    name: "templates",
    args: "",
    summary: "make and keep the microVM snapshot templates the pools start from (setup runs it)",
    root: true,
  },
  {
    name: "serve",
    args: "[--role all|api|worker] [--host H] [--port N]",
    summary: "the HTTP service: REST /v1/exec, MCP at /mcp, the console at /console",
    root: true,
  },
  {
    name: "daemon",
    args: "[--socket PATH]",
    summary: "the local service: every user's engine on a unix socket (setup installs it)",
    root: true,
  },
  {
    name: "service",
    args: "install",
    summary: "the world-readable install, PATH, group and systemd unit (setup runs it)",
    root: true,
  },
  {
    name: "keys",
    args: "create --name N | list | update | revoke <id|name>",
    summary: "the HTTP service's API keys and their policies",
    root: false,
  },
  {
    name: "users",
    args: "create | invite | list | role | reset | remove --name N",
    summary: "the console's people: an invite is a one-time link; passwords on stdin",
    root: false,
  },
] as const satisfies readonly CommandInfo[];

export type CommandName = (typeof COMMANDS)[number]["name"];

export const COMMAND_NAMES: readonly CommandName[] = COMMANDS.map((c) => c.name);

export function isCommandName(s: string | undefined): s is CommandName {
  return s !== undefined && (COMMAND_NAMES as readonly string[]).includes(s);
}

/** `scratchrun NAME ARGS`, the command's usage line. */
export function usageLine(c: CommandInfo): string {
  return `scratchrun ${c.name}${c.args ? ` ${c.args}` : ""}`;
}
