/**
 * Brokered secrets' substitution, pure (docs/decisions/0015-brokered-secrets.md): in one request
 * head for host `name`, each placeholder of a secret bound to `name` becomes its value only in a
 * credential field: the value of a header that carries credentials (`Authorization`,
 * `Proxy-Authorization`, and names such as `X-Api-Key`, `X-Auth-Token`, `Private-Token`; inside
 * `Basic` credentials too, e.g. `curl -u user:$TOKEN`) and of a query parameter named like one
 * (`key`, `api_key`, `access_token`, `sig`). Anywhere else a bound host may hand it straight back
 * (a request id it echoes, a CORS Origin it reflects, a redirect that keeps the query: found in
 * review after issue 43), so there it is not written. Then no placeholder of any of the call's
 * secrets may be left anywhere in the head (request target, header names and values, Basic
 * credentials), or the request is refused. Bodies are not read.
 */
import { isAllowed, type DomainAllowlist } from "../allowlist.js";

export interface HeldSecret {
  placeholder: string;
  value: string;
  hosts: DomainAllowlist;
}

export type Substituted =
  | { ok: true; target: string; headers: string[] }
  /** A placeholder is left that may not go to this host, or sits outside a credential field. */
  | { ok: false };

const BASIC = /^(basic[ \t]+)([A-Za-z0-9+/=]+)[ \t]*$/i;

/**
 * Whether a header or query parameter named `field` carries credentials: its name, split at `-`,
 * `_` and `.`, holds one of these words (so `X-Api-Key`, `apikey`, `X-Auth-Token`, `access_token`,
 * `Ocp-Apim-Subscription-Key`, not `X-Request-Id`, `Origin`, `page` or `Cookie`).
 */
const CREDENTIAL_WORDS = new Set([
  "authorization",
  "auth",
  "key",
  "apikey",
  "token",
  "secret",
  "password",
  "passwd",
  "signature",
  "sig",
  "credential",
  "credentials",
]);
export function isCredentialField(field: string): boolean {
  return field
    .toLowerCase()
    .split(/[-_.]/)
    .some((word) => CREDENTIAL_WORDS.has(word));
}

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

/** The query with bound placeholders written into credential parameters' values only. */
function substituteQuery(query: string, bound: readonly HeldSecret[]): string {
  return query
    .split("&")
    .map((part) => {
      const eq = part.indexOf("=");
      if (eq === -1) return part;
      let key = part.slice(0, eq);
      try {
        key = decodeURIComponent(key.replace(/\+/g, " "));
      } catch {
        // not percent-decodable: taken as written
      }
      return isCredentialField(key)
        ? part.slice(0, eq + 1) + replaceAll(part.slice(eq + 1), bound, true)
        : part;
    })
    .join("&");
}

/**
 * The head of a request to `name` with its bound placeholders replaced in credential fields;
 * `headers` flat as `IncomingMessage.rawHeaders` (name, value, name, value, …). With `write`
 * false nothing is replaced (a value may not go over this connection), so any placeholder
 * refuses the request.
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
    q === -1 ? target : target.slice(0, q + 1) + substituteQuery(target.slice(q + 1), bound);
  const outHeaders: string[] = [];
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const h = headers[i] as string;
    const v = headers[i + 1] as string;
    outHeaders.push(h, isCredentialField(h) ? substituteValue(v, bound) : v);
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

/**
 * A response header value with every secret's value (as written, and percent-encoded as in a
 * query) put back as its placeholder: a bound host that reflects a credential field (a redirect
 * keeping `?access_token=`, a header echoing `X-Api-Key`) hands the code only what it sent.
 */
export function scrubValue(value: string, secrets: readonly HeldSecret[]): string {
  let out = value;
  for (const s of secrets)
    for (const form of new Set([s.value, encodeURIComponent(s.value)]))
      if (out.includes(form)) out = out.split(form).join(s.placeholder);
  return out;
}
