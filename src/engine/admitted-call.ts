/**
 * The skeleton every call runs in, a fresh call's and a session cell's alike: its own abort
 * (the caller's signal wired to it), a slot of the engine's admission (cancelled while queued:
 * answered as a cancelled call, no sandbox started), the agent's request, the sandbox's run, and
 * its outcome as the call's result.
 */
import type { BackendOutcome, Isolation } from "../backends/types.js";
import type { AgentFile, AgentRequest } from "../protocol/types.js";
import type { ExecRequest } from "../schema/exec.js";
import type { Admission } from "./admission.js";
import { toAgentRequest } from "./request.js";
import { cancelledOutcome, toExecOutcome, type ExecOutcome } from "./result.js";

export interface AdmittedCall {
  admission: Admission;
  isolation: Isolation;
  /** The uid the guest's code runs as (Backend.codeIds). */
  codeIds: number | null;
  /** The request as it runs (its network and memory as the call gets them). */
  request: ExecRequest;
  /** Files the agent writes before the code (a runtime's or a session's first seeds). */
  seeds?: readonly AgentFile[] | undefined;
  /** The caller's signal: aborting it aborts the call. */
  signal?: AbortSignal | undefined;
  /** The call's own abort (default: a new one); a session keeps it to cancel its running cell. */
  call?: AbortController;
  /** Runs the agent's request in the sandbox, with the call's signal. */
  run: (request: AgentRequest, signal: AbortSignal) => Promise<BackendOutcome>;
}

/** The call's result, and what the sandbox reported (null: cancelled while queued). */
export async function runAdmitted(
  c: AdmittedCall,
): Promise<{ result: ExecOutcome; outcome: BackendOutcome | null }> {
  const call = c.call ?? new AbortController();
  const onAbort = () => call.abort();
  c.signal?.addEventListener("abort", onAbort, { once: true });
  if (c.signal?.aborted) call.abort();
  const queuedAt = Date.now();
  try {
    const admitted = await c.admission.acquire(call.signal);
    if (!admitted.ok)
      return {
        result: cancelledOutcome(c.request, c.isolation, Date.now() - queuedAt),
        outcome: null,
      };
    const started = Date.now();
    try {
      const agentRequest = toAgentRequest(c.request, c.codeIds, c.seeds);
      const outcome = await c.run(agentRequest, call.signal);
      const result = toExecOutcome(c.request, outcome, Date.now() - started, call.signal.aborted);
      return { result, outcome };
    } finally {
      admitted.release();
    }
  } finally {
    c.signal?.removeEventListener("abort", onAbort);
  }
}
