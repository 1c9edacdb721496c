import { ScratchRunError } from "../errors.js";
import type { Logger } from "../http/log.js";
import type { SessionInfo } from "../schema/session.js";
import type { SessionRow, SessionStore } from "../store/sessions.js";
import type { Engine } from "../engine/engine.js";

/** Where a session lives in a cluster: the worker's address and its process's worker_id. */
export type SessionPlacement = { worker: string; workerId: string | null };

/** Who started or calls a session, as the records name it. */
type Caller = { keyId: string; transport: "rest" | "mcp" };

/** What the recorder needs of the engine: its session ends, and ending one. */
type RecordedEngine = {
  onSessionEnd?: Engine["onSessionEnd"];
  endSession?: Engine["endSession"];
};

/** A session of the caller whose sandbox's process died without ending it (error code docs). */
export function sessionLost(): ScratchRunError {
  return new ScratchRunError(
    "SESSION_LOST",
    "session_id: this session was lost (the process holding its sandbox stopped: a worker lost or a server restarted); its files and interpreter are gone",
    { fix: "Start a new session with scratchrun_session_start and run its setup again" },
  );
}

/**
 * The service's side of the session records (src/store/sessions.ts): a row written before a
 * session's id is handed out, closed at every end the engine reports (whoever ended it: its
 * caller, a lifetime, shutdown), and read to name a call's session and tell a lost one.
 */
export class SessionRecorder {
  /** Record writes not yet settled (a shutdown waits for them). */
  private readonly writes = new Set<Promise<unknown>>();
  private readonly unsubscribe: () => void;

  constructor(
    private readonly engine: RecordedEngine,
    private readonly records: SessionStore,
    private readonly log: Logger,
    /** The API replica this service is (its records name it). */
    private readonly replicaId: string | undefined,
  ) {
    this.unsubscribe = engine.onSessionEnd
      ? engine.onSessionEnd((info, why) => {
          log.info(
            { session_calls: info.calls, runtime: info.runtime, reason: why },
            "session ended",
          );
          this.write(() => records.endById(info.session_id, why, info.calls));
        })
      : () => {};
  }

  /** A record write, logged if it fails, awaited by `close`. */
  private write(write: () => Promise<unknown>): void {
    const p = write().catch((e: unknown) =>
      this.log.error(
        { err: e instanceof Error ? e.message : String(e) },
        "session record write failed",
      ),
    );
    this.writes.add(p);
    void p.finally(() => this.writes.delete(p));
  }

  /**
   * Takes one of the caller's key's `perKey` session slots before the start (its record, marked
   * starting): BUSY when the key holds them all, open or starting, on any replica.
   */
  async reserve(
    caller: Caller,
    req: { runtime: string; memory_mb: number; network: string },
    perKey: number,
  ): Promise<string> {
    const id = await this.records.reserve(
      {
        keyId: caller.keyId,
        transport: caller.transport,
        runtime: req.runtime,
        memoryMb: req.memory_mb,
        network: req.network,
        replicaId: this.replicaId ?? null,
      },
      perKey,
    );
    if (id === null)
      throw new ScratchRunError(
        "BUSY",
        `this API key has ${perKey} sessions open or starting, the most one key may keep at once`,
        { fix: "End one with scratchrun_session_end first" },
      );
    return id;
  }

  /** A start that failed, or was abandoned: its slot is given back. */
  async release(recordId: string): Promise<void> {
    await this.records
      .release(recordId)
      .catch((e: unknown) =>
        this.log.error(
          { err: e instanceof Error ? e.message : String(e) },
          "session record write failed",
        ),
      );
  }

  /**
   * A started session's record, completed before its id is handed out (an API replica routes its
   * calls by it). A session that cannot be recorded is ended, not handed out unrecorded.
   */
  async started(
    recordId: string,
    caller: Caller,
    info: SessionInfo,
    placement: SessionPlacement | undefined,
  ): Promise<void> {
    try {
      await this.records.placed(recordId, {
        sessionId: info.session_id,
        runtime: info.runtime,
        memoryMb: info.memory_mb,
        network: info.network,
        isolation: info.isolation,
        ...(placement ? { worker: placement.worker, workerId: placement.workerId } : {}),
      });
    } catch (e) {
      await this.engine.endSession?.(info.session_id, caller.keyId).catch(() => {});
      throw e;
    }
  }

  /**
   * The record of the caller's session `id`, or undefined: none, or another key's (which is
   * answered as an unknown id is, wherever the call goes next).
   */
  async own(caller: Caller, id: string): Promise<SessionRow | undefined> {
    const row = await this.records.find(id);
    return row && row.key_id === caller.keyId ? row : undefined;
  }

  /** Stops listening and waits until every record write has settled. */
  async close(): Promise<void> {
    this.unsubscribe();
    await Promise.all([...this.writes]);
  }
}
