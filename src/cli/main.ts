import { RUNTIMES } from "../runtimes/names.js";
import { runDoctor } from "./doctor.js";
import { runMcpStdio } from "./mcp.js";
import { runCommand } from "./run.js";
import { COMMANDS, type CommandName, isCommandName, usageLine } from "./commands.js";

const USAGE = `scratchrun — run code in a fresh sandbox per call

Usage:
${commandLines()}

Run options (the same as the scratchrun_exec tool's parameters):
  --runtime R            ${RUNTIMES.join(" | ")} (required)
  --code TEXT            code to run instead of a file
  --timeout-ms N         wall-clock timeout (default 10000, max 30000)
  --memory-mb N          memory limit (default 256, max 512)
  --env NAME=VALUE       environment variable for the code (repeatable)
  --secret NAME=HOSTS    brokered secret: the value of $NAME here, sent by the egress proxy
                         to HOSTS (comma list) only; the code sees a placeholder (repeatable)
  --file PATH=LOCAL      write LOCAL's content to PATH in the sandbox first (repeatable)
  --return-file PATH     capture PATH after the run (repeatable)
  --network MODE         public | none
  --max-output-bytes N   per stream, how much output to show (head and tail; default 32768)
  --no-redact-env        show env values in the output instead of [redacted:NAME]
  --out-dir DIR          write returned files into DIR
  --json                 print the structured result as JSON
  --isolation B          microvm | namespace (overrides SCRATCHRUN_ISOLATION; also for mcp)
  --image-config PATH    the image config (overrides SCRATCHRUN_IMAGE_CONFIG; also for mcp,
                         serve, doctor, setup and image build)

Environment: SCRATCHRUN_ISOLATION=namespace|microvm chooses the backend; SCRATCHRUN_IMAGE_CONFIG
names the image config (extra Debian, python and npm packages, files); SCRATCHRUN_URL and
SCRATCHRUN_API_KEY make \`scratchrun mcp\` forward every call to a ScratchRun server instead.
SCRATCHRUN_EGRESS_ALLOW (or --egress-allow for mcp and serve) limits network "public" to these
names over HTTP(S): domain names and *. wildcards, comma-separated ("pypi.org,*.github.com").
`;

/** The usage lines, one per command of COMMANDS, each with its summary below it. */
function commandLines(): string {
  return COMMANDS.map((c) => {
    const line = `  ${usageLine(c)}`;
    const summary = `${c.root ? "as root: " : ""}${c.summary}`;
    return `${line}\n      ${summary}`;
  }).join("\n");
}

/** What each command of COMMANDS runs; a command without a row here does not compile. */
const HANDLERS: Record<CommandName, (argv: string[]) => Promise<number>> = {
  run: runCommand,
  mcp: async (argv) => {
    await runMcpStdio(argv);
    return new Promise<number>(() => {});
  },
  doctor: runDoctor,
  setup: async (argv) => (await import("./setup.js")).runSetup(argv),
  image: async (argv) => (await import("./image.js")).runImage(argv),
  templates: async (argv) => (await import("./templates.js")).runTemplates(argv),
  serve: async (argv) => (await import("./serve.js")).runServe(argv),
  daemon: async (argv) => (await import("./daemon.js")).runDaemon(argv),
  service: async (argv) => (await import("./service.js")).runService(argv),
  keys: async (argv) => (await import("./keys.js")).runKeys(argv),
  users: async (argv) => (await import("./users.js")).runUsers(argv),
};

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (isCommandName(command)) return HANDLERS[command](rest);
  switch (command) {
    case undefined:
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(USAGE);
      return command === undefined ? 2 : 0;
    default:
      process.stderr.write(`scratchrun: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
      return 2;
  }
}
