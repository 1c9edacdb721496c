import { closeSync, mkdirSync, openSync, renameSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { pino } from "pino";
import { createLogger } from "../http/log.js";
import { readProcStat } from "../jail/procfs.js";
import { requireRoot } from "../jail/root.js";
import { setting } from "../schema/settings/read.js";
import { settingsFrom } from "../schema/settings/values.js";
import { VERSION } from "../version.js";
import { runServe } from "./serve.js";
import { SERVICE_GROUP, writeServiceState } from "./service-state.js";

export const DEFAULT_LOG_FILE = "/var/log/scratchrun/scratchrun.log";

export const DAEMON_USAGE = `scratchrun daemon [--socket PATH] [--log-file PATH|-] [serve's options]

The local service (as root): one engine for every user of this machine, on a unix socket that
root and the group ${SERVICE_GROUP} may open (SCRATCHRUN_SOCKET, default
/run/scratchrun/scratchrun.sock). A user's scratchrun-mcp forwards to it, the caller the uid the
kernel proves (uid:N in scratchrun keys). systemd runs it from setup's unit; anywhere else, run it
under your supervisor. It is scratchrun serve --socket: serve's options apply (--help there), and
TCP listens only when --host or --port is given.

  --socket PATH      the socket (default SCRATCHRUN_SOCKET)
  --log-file PATH    where the log goes (default ${DEFAULT_LOG_FILE}; under systemd the
                     journal; - for stderr); scratchrun doctor names it
`;

/** Where the log goes: the journal under systemd (JOURNAL_STREAM), else a file or stderr (pure). */
export function logTarget(flag: string | undefined, journalStream: string | undefined): string {
  if (flag !== undefined) return flag === "-" ? "stderr" : flag;
  return journalStream ? "journal" : DEFAULT_LOG_FILE;
}

/** The log file, opened for appending (0640, root's); one over 64 MiB is moved to `.1` first. */
function openLog(path: string): number {
  mkdirSync(dirname(path), { recursive: true, mode: 0o755 });
  try {
    if (statSync(path).size > 64 * 1024 * 1024) renameSync(path, `${path}.1`);
  } catch {
    // none yet
  }
  closeSync(openSync(path, "a", 0o640));
  return openSync(path, "a");
}

/** `scratchrun daemon`: serve --socket, with its log where doctor says and its state file. */
export async function runDaemon(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(DAEMON_USAGE);
    return 0;
  }
  requireRoot();
  let socket = setting("SCRATCHRUN_SOCKET", env);
  let logFlag: string | undefined;
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const [flag, inline] = a.startsWith("--") && a.includes("=") ? a.split(/=(.*)/s) : [a];
    if (flag !== "--socket" && flag !== "--log-file") {
      rest.push(a);
      continue;
    }
    const value = inline ?? argv[++i];
    if (value === undefined || value === "") throw new Error(`${flag} needs a value`);
    if (flag === "--socket") socket = value;
    else logFlag = value;
  }
  const log = logTarget(logFlag, env.JOURNAL_STREAM);
  const logger = createLogger(
    settingsFrom(process.env).logLevel,
    log === "stderr" || log === "journal"
      ? pino.destination(2)
      : pino.destination({ fd: openLog(log), sync: true }),
  );
  return runServe(["--socket", socket, ...rest], env, {
    logger,
    listening(api, isolation) {
      writeServiceState({
        pid: process.pid,
        start_time: readProcStat(process.pid)?.startTime ?? "",
        version: VERSION,
        socket,
        log,
        isolation,
        url: api.url.startsWith("unix:") ? null : api.url,
      });
      process.stderr.write(
        `scratchrun: local service ${VERSION} on ${socket} (group ${SERVICE_GROUP}); log: ${log}\n`,
      );
    },
  });
}
