import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { request } from "node:https";
import { isIP } from "node:net";
import { classifyAddress } from "../net/addresses.js";
import type { OAuthClient } from "../store/oauth.js";
import { checkRedirectUri, isMetadataClientId } from "./uris.js";

/**
 * Client ID metadata documents (the IETF draft MCP adopted): a client_id that is an https URL
 * names a JSON document the client hosts, which this server fetches when the client asks for
 * authorization. That fetch is the server reaching out on a stranger's word, so it is bounded:
 * https only (certificates verified), no redirects followed, `timeoutMs` for the whole exchange,
 * at most `maxBytes` read, and every address the name resolves to must be public (no loopback,
 * private, link-local or metadata-service ranges: src/net/addresses.ts), checked on the address
 * actually connected to, so a name that rebinds between check and connect gains nothing.
 * `allowLoopback` is for tests only (a test's own https server on 127.0.0.1); no setting
 * turns it on.
 */
export interface MetadataFetchOptions {
  timeoutMs: number;
  maxBytes: number;
  allowLoopback: boolean;
  /** Extra CA certificates to trust (tests: their own self-signed server). */
  ca?: string | Buffer;
}

export const METADATA_FETCH: MetadataFetchOptions = {
  timeoutMs: 5000,
  maxBytes: 64 * 1024,
  allowLoopback: false,
};

export type MetadataResult = { ok: true; client: OAuthClient } | { ok: false; message: string };

/** Whether the fetch may connect to this address. */
export function addressAllowed(address: string, allowLoopback: boolean): boolean {
  const c = classifyAddress(address);
  if (!c.valid) return false;
  if (!c.blocked) return true;
  const loop = c.family === 4 ? /^127\./.test(c.address) : c.address === "::1";
  return allowLoopback && loop;
}

/** The document's fields, checked (pure): a public client whose redirect URIs pass. */
export function parseClientMetadata(clientId: string, doc: unknown): MetadataResult {
  if (typeof doc !== "object" || doc === null || Array.isArray(doc))
    return { ok: false, message: "the client metadata document is not a JSON object" };
  const d = doc as Record<string, unknown>;
  if (d.client_id !== clientId)
    return { ok: false, message: "the document's client_id is not the URL it was fetched from" };
  const method = d.token_endpoint_auth_method ?? "none";
  if (method !== "none")
    return {
      ok: false,
      message: `token_endpoint_auth_method ${String(method)} is not supported: public clients only ("none")`,
    };
  if ("client_secret" in d)
    return { ok: false, message: "a client metadata document must not carry a client_secret" };
  const uris = d.redirect_uris;
  if (!Array.isArray(uris) || uris.length === 0 || uris.length > 20)
    return { ok: false, message: "redirect_uris must list 1-20 URIs" };
  const checked: string[] = [];
  for (const u of uris) {
    const c = checkRedirectUri(u);
    if (!c.ok) return { ok: false, message: c.message };
    checked.push(c.uri);
  }
  const name = d.client_name ?? new URL(clientId).host;
  if (typeof name !== "string" || name.length === 0 || name.length > 100)
    return { ok: false, message: "client_name must be 1-100 characters" };
  return { ok: true, client: { clientId, kind: "metadata", name, redirectUris: checked } };
}

/** Fetches and checks the document `clientId` names, within `options`' bounds. */
export function fetchClientMetadata(
  clientId: string,
  options: MetadataFetchOptions = METADATA_FETCH,
): Promise<MetadataResult> {
  if (!isMetadataClientId(clientId))
    return Promise.resolve({
      ok: false,
      message: "client_id is neither a registered client nor an https metadata document URL",
    });
  const url = new URL(clientId);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (isIP(host) && !addressAllowed(host, options.allowLoopback))
    return Promise.resolve({ ok: false, message: `client_id's host ${host} is not public` });
  const guarded = (
    name: string,
    opts: { all?: boolean },
    cb: (e: Error | null, a: string | LookupAddress[], f?: number) => void,
  ) =>
    dnsLookup(name, { all: true }, (e, addrs) => {
      if (e) return cb(e, "", 0);
      const bad = addrs.find((a) => !addressAllowed(a.address, options.allowLoopback));
      if (bad || addrs.length === 0)
        return cb(new Error(`${name} resolves to ${bad?.address ?? "nothing"}, not public`), "", 0);
      if (opts.all) return cb(null, addrs);
      cb(null, addrs[0]!.address, addrs[0]!.family);
    });
  return new Promise((resolve) => {
    let done = false;
    const finish = (r: MetadataResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.destroy();
      resolve(r);
    };
    const req = request(
      url,
      {
        method: "GET",
        headers: { accept: "application/json" },
        lookup: guarded as never,
        agent: false,
        ...(options.ca ? { ca: options.ca } : {}),
      },
      (res) => {
        const remote = res.socket.remoteAddress ?? "";
        if (!addressAllowed(remote, options.allowLoopback))
          return finish({ ok: false, message: `connected to ${remote}, not a public address` });
        if (res.statusCode !== 200)
          return finish({
            ok: false,
            message: `fetching the client metadata document answered ${res.statusCode} (redirects are not followed)`,
          });
        if (!/^application\/([a-z.+-]*\+)?json\b/i.test(res.headers["content-type"] ?? ""))
          return finish({ ok: false, message: "the client metadata document is not JSON" });
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          size += c.length;
          if (size > options.maxBytes)
            return finish({
              ok: false,
              message: `the client metadata document is over ${options.maxBytes} bytes`,
            });
          chunks.push(c);
        });
        res.on("end", () => {
          let doc: unknown;
          try {
            doc = JSON.parse(Buffer.concat(chunks).toString("utf8"));
          } catch {
            return finish({ ok: false, message: "the client metadata document is not valid JSON" });
          }
          finish(parseClientMetadata(clientId, doc));
        });
        res.on("error", (e) => finish({ ok: false, message: e.message }));
      },
    );
    const timer = setTimeout(
      () =>
        finish({
          ok: false,
          message: `fetching the client metadata document took over ${options.timeoutMs} ms`,
        }),
      options.timeoutMs,
    );
    req.on("error", (e) =>
      finish({ ok: false, message: `fetching the client metadata document failed: ${e.message}` }),
    );
    req.end();
  });
}
