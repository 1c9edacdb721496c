import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "../http/log.js";
import { reapOrphanSandboxes } from "../jail/reap.js";
import { drainBoundMs } from "../api/server.js";
import { SandboxTracker } from "../store/sandbox-tracker.js";
import type { Engine } from "../engine/engine.js";
import { openDatabase } from "../store/db.js";
import { acquireHomeLock } from "../store/lock.js";
import { SandboxStore } from "../store/sandboxes.js";
import { startWorkerServer, type WorkerServer } from "./worker-server.js";

export interface WorkerRoleOptions {
  /** The state directory (SCRATCHRUN_HOME): its SQLite file and lock. */
  home: string;
  logger: Logger;
  host: string;
  port: number;
  token: string;
  /**
   * Builds the worker's engine, once the state directory is locked and a predecessor's orphans
   * are reaped (the caller composes it: the cluster layer sits below compose/).
   */
  createEngine: () => Promise<Engine>;
  /** Upper bound on how long a drain waits for calls in flight. */
  drainTimeoutMs?: number;
  /** How long a stopping worker still answers polls after ending its sessions. */
  endedSessionsLingerMs?: number;
}

/** Replicas poll every second by default: two polls' time. */
export const ENDED_SESSIONS_LINGER_MS = 2000;

export interface WorkerRole {
  readonly server: WorkerServer;
  readonly isolation: string;
  /** Drains (no new calls; in-flight ones finish), then stops everything. */
  stop(): Promise<void>;
}

/**
 * `scratchrun serve --role worker`: like one server's start (the state directory's lock, orphans
 * of a dead predecessor reaped by ownership, sandboxes recorded while they run), but no keys, no
 * records and no database credentials: the local SQLite file holds only the sandboxes table.
 */
export async function startWorkerRole(o: WorkerRoleOptions): Promise<WorkerRole> {
  const home = o.home;
  const db = openDatabase(home);
  const lock = acquireHomeLock(home);
  const sandboxes = new SandboxStore(db);
  const reaped = await reapOrphanSandboxes({ recorded: sandboxes.names() });
  sandboxes.clear();
  o.logger.info(
    {
      home,
      reaped_sandboxes: reaped.cgroups.length,
      reaped_processes: reaped.processes.length,
    },
    "recovered",
  );
  const engine = await o.createEngine();
  const server = await startWorkerServer({
    engine,
    token: o.token,
    logger: o.logger,
    host: o.host,
    port: o.port,
    tracker: new SandboxTracker(sandboxes),
  });
  let stopping: Promise<void> | undefined;
  return {
    server,
    isolation: engine.backend.isolation,
    stop: () =>
      (stopping ??= (async () => {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          server.drain(),
          new Promise(
            (r) =>
              (timer = setTimeout(r, o.drainTimeoutMs ?? drainBoundMs(server.latestDeadline()))),
          ),
        ]);
        clearTimeout(timer);
        // Its sessions end with it (they cannot move); their ends stay in the status a moment
        // longer, so that the replicas' polls close their records as "shutdown", not "lost".
        const open = engine.sessions.count;
        await engine.endAllSessions();
        if (open > 0) await sleep(o.endedSessionsLingerMs ?? ENDED_SESSIONS_LINGER_MS);
        await server.close();
        await engine.close();
        db.close();
        lock.release();
      })()),
  };
}
