/**
 * `doctor`'s view of the local service (decision 0018): whether it runs, whether this user may
 * open its socket, whether its version is ours, and where its log is. Reads the socket and the
 * state file beside it, nothing else: as an ordinary user this is all doctor checks, and it
 * writes nothing (no cache, nothing in the user's home).
 */
import { existsSync } from "node:fs";
import { openLocalService } from "../remote/local-service.js";
import { setting } from "../schema/settings/read.js";
import { VERSION } from "../version.js";
import type { Check } from "./doctor-checks.js";
import { readServiceState, SERVICE_GROUP, stateFileFor } from "./service-state.js";

const START =
  "as root: scratchrun setup (where systemd runs it starts the service), else scratchrun daemon under your supervisor";

/** The local service's checks; `required` for a user who can run nothing but through it. */
export async function localServiceChecks(
  env: NodeJS.ProcessEnv,
  required: boolean,
): Promise<Check[]> {
  const socket = setting("SCRATCHRUN_SOCKET", env);
  const state = readServiceState(socket);
  const running: Check = {
    name: "local service",
    required,
    ...(state?.live
      ? {
          ok: true,
          detail: `${state.state.version} runs (pid ${state.state.pid}) on ${socket}, isolation ${state.state.isolation}; its log: ${state.state.log === "journal" ? "journalctl -u scratchrun" : state.state.log}`,
        }
      : {
          ok: false,
          detail: existsSync(socket)
            ? `${socket} is there but no service runs (${stateFileFor(socket)} names none that is alive)`
            : `not running (no ${socket})`,
          fix: START,
        }),
  };
  if (!state?.live) return [running];
  let access: Check;
  try {
    const service = await openLocalService(socket);
    if (service.kind === "answers") {
      access = {
        name: "local service access",
        required,
        ok: true,
        detail: `this user (uid ${process.getuid?.()}) reaches it: calls run as uid:${process.getuid?.()}, network: ${service.engine.networkNote}`,
      };
      await service.engine.close();
    } else
      access = {
        name: "local service access",
        required,
        ok: false,
        detail:
          service.kind === "denied"
            ? `uid ${process.getuid?.()} may not open ${socket} (root and the group ${SERVICE_GROUP} may)`
            : `${socket} does not answer`,
        fix:
          service.kind === "denied"
            ? `sudo usermod -aG ${SERVICE_GROUP} $USER, then log in again; or set SCRATCHRUN_URL and SCRATCHRUN_API_KEY (remote mode)`
            : START,
      };
  } catch (e) {
    access = {
      name: "local service access",
      required,
      ok: false,
      detail: e instanceof Error ? e.message : String(e),
    };
  }
  const version: Check = {
    name: "local service version",
    required,
    ok: state.state.version === VERSION,
    detail: `service ${state.state.version}, this scratchrun ${VERSION}`,
    fix: "restart the service after an update (systemctl restart scratchrun), or run the scratchrun installed beside it",
  };
  return [running, access, version];
}
