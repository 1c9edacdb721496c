/**
 * The stdio server's first question (decision 0018): does this machine's local service answer on
 * its socket? If it does, every call goes there, as remote mode's go to a URL, and the caller is
 * this process's uid as the kernel reports it to the service (no key). A client and a service of
 * different versions refuse each other here, in one line.
 */
import { accessSync, constants } from "node:fs";
import { connect } from "node:net";
import { dirname } from "node:path";
import { userInfo } from "node:os";
import { ScratchRunError } from "../errors.js";
import { VERSION } from "../version.js";
import { RemoteEngine } from "./client.js";

export type LocalService =
  | { kind: "answers"; engine: RemoteEngine }
  /** No socket there, or one nothing listens on (a service killed outright left it). */
  | { kind: "absent" }
  /** The socket is there and this uid may not open it (not in its group). */
  | { kind: "denied" };

/** What connect(2) on the socket said (pure reading of its error code). */
export function connectOutcome(code: string | undefined): "absent" | "denied" | "error" {
  if (code === "ENOENT" || code === "ECONNREFUSED" || code === "ENOTSOCK" || code === "ENOTDIR")
    return "absent";
  if (code === "EACCES" || code === "EPERM") return "denied";
  return "error";
}

/** Whether this process may pass through `dir` (search permission). */
function passable(dir: string): boolean {
  try {
    accessSync(dir, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function tryConnect(socket: string): Promise<"ok" | "absent" | "denied"> {
  return new Promise((resolve, reject) => {
    const s = connect(socket);
    s.once("connect", () => {
      s.destroy();
      resolve("ok");
    });
    s.once("error", (e: NodeJS.ErrnoException) => {
      const outcome = connectOutcome(e.code);
      if (outcome === "error")
        reject(
          new ScratchRunError("NOT_READY", `cannot open the local service at ${socket}`, {
            fix: `${e.message}; scratchrun doctor shows what is there`,
            cause: e,
          }),
        );
      // A directory closed to this user holds no service: a running one opens its directory.
      else if (outcome === "denied" && !passable(dirname(socket))) resolve("absent");
      else resolve(outcome);
    });
  });
}

/** Connects to the local service at `socket`, or says why not (absent, denied). */
export async function openLocalService(socket: string): Promise<LocalService> {
  const reached = await tryConnect(socket);
  if (reached !== "ok") return { kind: reached };
  const engine = await RemoteEngine.connect({ kind: "socket", socket });
  if (engine.serverVersion !== VERSION)
    throw new ScratchRunError(
      "NOT_READY",
      `scratchrun-mcp ${VERSION} and the local service at ${socket} (${engine.serverVersion}) are different versions`,
      {
        fix: "After an update root restarts the service (systemctl restart scratchrun, or the supervisor's scratchrun daemon); or run the scratchrun-mcp installed beside it (scratchrun setup puts it on PATH)",
      },
    );
  return { kind: "answers", engine };
}

/** Who this process is, for a refusal: `alice (uid 1001)`, or the uid alone. */
function whoAmI(): { name: string | null; uid: number } {
  const uid = process.getuid?.() ?? -1;
  try {
    return { name: userInfo().username, uid };
  } catch {
    return { name: null, uid };
  }
}

/**
 * The one line a user who cannot use local mode gets: the socket is not theirs to open (join
 * the group), or no service answers and they are not root (ask root to install it), each with
 * remote mode beside it.
 */
export function localRefusal(kind: "absent" | "denied", socket: string): ScratchRunError {
  const me = whoAmI();
  const remote =
    "or set SCRATCHRUN_URL and SCRATCHRUN_API_KEY to use a ScratchRun server (remote mode)";
  if (kind === "denied")
    return new ScratchRunError(
      "NOT_READY",
      `cannot open ScratchRun's local service at ${socket}: ${me.name ?? `uid ${me.uid}`} is not in the group scratchrun`,
      {
        fix: `Ask root to add you (sudo usermod -aG scratchrun ${me.name ?? "YOU"}), then log in again (a running session keeps the groups it started with), ${remote}`,
      },
    );
  return new ScratchRunError(
    "NOT_READY",
    `ScratchRun must run as root to create cgroups and jails, and no local service answers at ${socket}`,
    {
      fix: `Ask root to run scratchrun setup, which installs the service (where systemd does not run, root starts scratchrun daemon), ${remote}; scratchrun doctor shows what is there`,
    },
  );
}
