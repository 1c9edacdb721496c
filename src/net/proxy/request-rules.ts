/**
 * The rules every request a broker forwards must pass, pure (docs/decisions/0015-brokered-
 * secrets.md, "Each request, framed"). A broker writes a real secret into a request's head and
 * sends it on; a request that the broker and the bound host could read differently lets the code
 * hide a second request inside the first, whose answer then carries a later request's head, value
 * and all, back to the code (issue 43). So each request of a connection, not only its first, is
 * held to what peekHttpHead (http-head.ts) asks of a first request, and its body's framing is
 * named here so the broker writes it out itself:
 *
 * - TRACE (echoes the head it got, value included) and CONNECT (a tunnel) are refused;
 * - the target is origin-form (`/path?query`): an absolute-form target names a host of its own;
 * - exactly one Host, and it is the connection's bound name;
 * - at most one framing header: one `Transfer-Encoding: chunked` (nothing else), or one
 *   `Content-Length` of digits; both together, a second of either, or any other coding is refused.
 */
import { normaliseHostname } from "../allowlist.js";
import type { RefusalReason } from "./reasons.js";

/** How a request's body is delimited, as the broker re-emits it upstream. */
export type BodyFraming =
  | { kind: "none" }
  | { kind: "length"; bytes: number }
  /** Chunked: the broker chunks what it forwards itself (the length is not known ahead). */
  | { kind: "chunked" };

export type RequestVerdict =
  { ok: true; framing: BodyFraming } | { ok: false; reason: RefusalReason; why: string };

/** Methods a broker never forwards. */
const REFUSED_METHODS = new Set(["TRACE", "CONNECT"]);
/** A Content-Length a broker takes (up to 2^53: what a JS number holds exactly). */
const LENGTH = /^[0-9]{1,15}$/;

function refuse(reason: RefusalReason, why: string): RequestVerdict {
  return { ok: false, reason, why };
}

/**
 * Whether the request (method, target and raw headers as `IncomingMessage.rawHeaders` gives
 * them: name, value, name, value, …) may go on to bound host `name`, and its body's framing.
 */
export function checkBrokeredRequest(
  name: string,
  method: string,
  target: string,
  rawHeaders: readonly string[],
): RequestVerdict {
  if (REFUSED_METHODS.has(method.toUpperCase())) return refuse("protocol", `method ${method}`);
  if (!target.startsWith("/")) {
    const absolute = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(target);
    return refuse(absolute ? "host_mismatch" : "protocol", "the target is not origin-form");
  }
  const hosts: string[] = [];
  const codings: string[] = [];
  const lengths: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const key = (rawHeaders[i] as string).toLowerCase();
    const value = (rawHeaders[i + 1] as string).trim();
    if (key === "host") hosts.push(value);
    else if (key === "transfer-encoding") codings.push(value);
    else if (key === "content-length") lengths.push(value);
  }
  if (hosts.length !== 1) return refuse("host_mismatch", `${hosts.length} Host headers`);
  const host = normaliseHostname(/^(.*?)(:[0-9]*)?$/.exec(hosts[0] as string)?.[1] ?? "");
  if (host !== name) return refuse("host_mismatch", "Host is not the connection's name");
  if (codings.length > 0 && lengths.length > 0)
    return refuse("protocol", "both Transfer-Encoding and Content-Length");
  if (codings.length > 0) {
    if (codings.length !== 1 || (codings[0] as string).toLowerCase() !== "chunked")
      return refuse("protocol", "a Transfer-Encoding other than one chunked");
    return { ok: true, framing: { kind: "chunked" } };
  }
  if (lengths.length > 0) {
    if (lengths.length !== 1 || !LENGTH.test(lengths[0] as string))
      return refuse("protocol", "a Content-Length other than one number");
    return { ok: true, framing: { kind: "length", bytes: Number(lengths[0]) } };
  }
  return { ok: true, framing: { kind: "none" } };
}
