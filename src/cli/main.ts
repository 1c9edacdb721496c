import { RUNTIMES } from "../runtimes/names.js";
import { runDoctor } from "./doctor.js";
import { runMcpStdio } from "./mcp.js";
import { runCommand } from "./run.js";

const USAGE = `scratchrun — run code in a fresh sandbox per call

Usage:
  scratchrun run --runtime <${RUNTIMES.join("|")}> [options] <file | ->
  scratchrun mcp [--egress-allow LIST]   start the stdio MCP server (same as scratchrun-mcp)
  scratchrun doctor              check what this host can do, and how to fix what is missing
  scratchrun setup               as root: install the Debian packages, build the agent, the runtime
                                 image and the microVM guest (idempotent; progress on stderr)
  scratchrun image build         as root: build the runtime image with the image config (--help)
  scratchrun templates           as root: build and keep the microVM snapshot templates the server's
                                 pools start from, so its first calls need no cold boot (setup runs it)
  scratchrun serve [--host H] [--port N]   the HTTP service: REST /v1/exec, MCP at /mcp (--help)
  scratchrun daemon              as root: the local service, every user's engine on a unix socket
                                 (group scratchrun); setup installs it (--help)
  scratchrun service install     as root: a world-readable copy, scratchrun and scratchrun-mcp on
                                 every user's PATH, the group and the service (setup runs it)
  scratchrun keys create --name N | list | revoke <id|name>   API keys of the HTTP service
  scratchrun users create --name N [--role admin|member]   console users (password on stdin)

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

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "run":
      return runCommand(rest);
    case "mcp":
      await runMcpStdio(rest);
      return new Promise<number>(() => {});
    case "serve":
      return (await import("./serve.js")).runServe(rest);
    case "daemon":
      return (await import("./daemon.js")).runDaemon(rest);
    case "service":
      return (await import("./service.js")).runService(rest);
    case "keys":
      return (await import("./keys.js")).runKeys(rest);
    case "users":
      return (await import("./users.js")).runUsers(rest);
    case "doctor":
      return runDoctor(rest);
    case "image":
      return (await import("./image.js")).runImage(rest);
    case "setup":
      return (await import("./setup.js")).runSetup(rest);
    case "templates":
      return (await import("./templates.js")).runTemplates(rest);
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
