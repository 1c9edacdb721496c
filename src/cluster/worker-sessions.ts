import { readJsonBody } from "../http/body.js";
import { answerError, closeSignal, refuse, sendError, sendJson } from "../http/respond.js";
import type { Exchange } from "../http/router.js";
import type { Logger } from "../http/log.js";
import type { Engine } from "../engine/engine.js";
import { sessionDigest } from "../store/sessions.js";
import {
  ENDED_SESSIONS_KEPT_MS,
  workerSessionEndSchema,
  workerSessionStartSchema,
  type EndedSession,
} from "./protocol.js";

/**
 * A worker's sessions (docs/decisions/0013-sessions.md, "Cluster mode"): started and ended for
 * the replica's caller (`owner`, its key id), run by the worker's own engine, and every end kept
 * in a short list the status reports, so that replicas, which hold the records, close them.
 * Only digests of session ids go in the status.
 */
export class WorkerSessions {
  private ended: EndedSession[] = [];
  private readonly unsubscribe: () => void;
  private readonly ceiling;

  constructor(
    private readonly engine: Engine,
    private readonly logger: Logger,
    private readonly bodyCap: number,
  ) {
    this.ceiling = engine.ceilingPolicy;
    this.unsubscribe = engine.onSessionEnd((info, reason) => {
      this.ended.push({
        id_sha256: sessionDigest(info.session_id),
        reason,
        calls: info.calls,
        at: Date.now(),
      });
      logger.info({ reason, calls: info.calls }, "session ended");
    });
  }

  /** For the status: sessions open, and the ends of the last ENDED_SESSIONS_KEPT_MS. */
  status(now = Date.now()): { open: number; ended: EndedSession[] } {
    this.ended = this.ended.filter((e) => now - e.at < ENDED_SESSIONS_KEPT_MS).slice(-4096);
    return { open: this.engine.sessions.count, ended: this.ended };
  }

  /** POST /v1/worker/sessions. */
  async start({ req, res }: Exchange, workerId: string): Promise<void> {
    const body = await readJsonBody(req, this.bodyCap);
    if (!body.ok) return refuse(res, body.refusal);
    const parsed = workerSessionStartSchema.safeParse(body.value);
    if (!parsed.success) return sendError(res, 400, "INVALID_INPUT", "Malformed session start");
    const { owner, request, egress_allow } = parsed.data;
    const signal = closeSignal(res);
    try {
      const info = await this.engine.startSession(request, {
        owner,
        policy: this.ceiling,
        ...(egress_allow ? { egressAllow: egress_allow } : {}),
        signal,
      });
      // The replica went away before the answer: nobody holds the id, so nobody may keep it.
      if (res.destroyed || signal.aborted) {
        await this.engine.endSession(info.session_id, owner).catch(() => {});
        return;
      }
      sendJson(res, 201, { session: info, worker_id: workerId });
    } catch (e) {
      answerError(res, e);
    }
  }

  /** POST /v1/worker/sessions/end. */
  async end({ req, res }: Exchange): Promise<void> {
    const body = await readJsonBody(req, this.bodyCap);
    if (!body.ok) return refuse(res, body.refusal);
    const parsed = workerSessionEndSchema.safeParse(body.value);
    if (!parsed.success) return sendError(res, 400, "INVALID_INPUT", "Malformed session end");
    try {
      const end = parsed.data;
      if ("id_sha256" in end) {
        const ended = await this.engine.sessions.endByDigest(end.owner, end.id_sha256, "policy");
        return sendJson(res, 200, { ended });
      }
      const info = await this.engine.endSession(end.session_id, end.owner);
      sendJson(res, 200, { session: info });
    } catch (e) {
      answerError(res, e);
    }
  }

  close(): void {
    this.unsubscribe();
  }
}
