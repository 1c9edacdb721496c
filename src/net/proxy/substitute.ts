/**
 * Brokered secrets' substitution, pure (docs/decisions/0015-brokered-secrets.md): in one request
 * head for host `name`, each placeholder of a secret bound to `name` becomes its value in header
 * values (and inside `Basic` credentials, e.g. `curl -u user:$TOKEN`) and in the URL's query; then no
 * placeholder of any of the call's secrets may be left anywhere in the head (request target,
 * header names and values, Basic credentials), or the request is refused. Bodies are not read.
 */
import { isAllowed, type DomainAllowlist } from "../allowlist.js";

export interface HeldSecret {
  placeholder: string;
  value: string;
  hosts: DomainAllowlist;
}

export type Substituted =
  | { ok: true; target: string; headers: string[] }
  /** A placeholder is left that may not go to this host. */
  | { ok: false };

const BASIC = /^(basic[ \t]+)([A-Za-z0-9+/=]+)[ \t]*$/i;

function replaceAll(text: string, secrets: readonly HeldSecret[], encode: boolean): string {
  let out = text;
  for (const s of secrets)
    if (out.includes(s.placeholder))
      out = out.split(s.placeholder).join(encode ? encodeURIComponent(s.value) : s.value);
  return out;
}

/** A header value with Basic credentials decoded (to look into) or null when it has none. */
function basicOf(value: string): { prefix: string; decoded: string } | null {
  const m = BASIC.exec(value);
  if (!m) return null;
  return {
    prefix: m[1] ?? "Basic ",
    decoded: Buffer.from(m[2] ?? "", "base64").toString("latin1"),
  };
}

function substituteValue(value: string, bound: readonly HeldSecret[]): string {
  const basic = basicOf(value);
  if (basic) {
    const decoded = replaceAll(basic.decoded, bound, false);
    if (decoded !== basic.decoded)
      return `${basic.prefix}${Buffer.from(decoded, "latin1").toString("base64")}`;
  }
  return replaceAll(value, bound, false);
}

/**
 * The head of a request to `name` with its bound placeholders replaced; `headers` flat as
 * `IncomingMessage.rawHeaders` (name, value, name, value, …). With `write` false nothing is
 * replaced (a value may not go over this connection), so any placeholder refuses the request.
 */
export function substituteHead(
  name: string,
  target: string,
  headers: readonly string[],
  secrets: readonly HeldSecret[],
  write = true,
): Substituted {
  const bound = write ? secrets.filter((s) => isAllowed(s.hosts, name)) : [];
  const q = target.indexOf("?");
  const outTarget =
    q === -1 ? target : target.slice(0, q + 1) + replaceAll(target.slice(q + 1), bound, true);
  const outHeaders: string[] = [];
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const h = headers[i] as string;
    outHeaders.push(h, substituteValue(headers[i + 1] as string, bound));
  }
  // What is left: the target, every header, and Basic credentials decoded.
  const left = [outTarget, ...outHeaders];
  for (let i = 1; i < outHeaders.length; i += 2) {
    const basic = basicOf(outHeaders[i] as string);
    if (basic) left.push(basic.decoded);
  }
  if (secrets.some((s) => left.some((t) => t.includes(s.placeholder)))) return { ok: false };
  return { ok: true, target: outTarget, headers: outHeaders };
}
