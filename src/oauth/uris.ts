/**
 * The URI checks of the authorization server, pure: what a client may register as a redirect
 * URI, what may be a client ID metadata document's URL, and the exact match a redirect must be.
 * Nothing is ever redirected to before these pass (an unchecked redirect is an open redirect).
 */

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "[::1]", "localhost"]);

export type UriCheck = { ok: true; uri: string } | { ok: false; message: string };

/**
 * A redirect URI a client may register: absolute, no fragment, no user info; https anywhere, or
 * http only to a loopback host (a native client's local listener, RFC 8252 §7.3). Other schemes
 * (private-use `com.example.app:/cb`) are accepted for native apps when they contain a dot.
 */
export function checkRedirectUri(value: unknown): UriCheck {
  if (typeof value !== "string" || value.length === 0 || value.length > 2000)
    return { ok: false, message: "a redirect URI is a string of 1-2000 characters" };
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return { ok: false, message: `redirect URI ${JSON.stringify(value)} is not an absolute URI` };
  }
  if (u.hash !== "" || value.includes("#"))
    return { ok: false, message: "a redirect URI has no fragment" };
  if (u.username !== "" || u.password !== "")
    return { ok: false, message: "a redirect URI has no user info" };
  if (u.protocol === "https:") return { ok: true, uri: value };
  if (u.protocol === "http:") {
    if (LOOPBACK_HOSTS.has(u.hostname)) return { ok: true, uri: value };
    return { ok: false, message: "an http redirect URI must be to a loopback host; use https" };
  }
  if (
    /^[a-z][a-z0-9+-]*\.[a-z0-9.+-]+:$/.test(u.protocol) &&
    !/^(javascript|data|file|vbscript):/i.test(value)
  )
    return { ok: true, uri: value };
  return { ok: false, message: `redirect URI scheme ${u.protocol} is not allowed` };
}

/** Whether `presented` is one of the client's redirect URIs, character for character. */
export function redirectAllowed(presented: string, registered: readonly string[]): boolean {
  return registered.includes(presented);
}

/**
 * A client_id that is a client ID metadata document's URL: https, a path beyond "/", no
 * fragment, no user info, no dot segments (the draft's rules).
 */
export function isMetadataClientId(value: string): boolean {
  if (!value.startsWith("https://")) return false;
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return false;
  }
  if (u.href !== value) return false;
  return (
    u.protocol === "https:" &&
    u.pathname !== "/" &&
    u.hash === "" &&
    u.username === "" &&
    u.password === "" &&
    !/\/\.\.?(\/|$)/.test(value.slice(value.indexOf(u.host) + u.host.length))
  );
}

/** The redirect with the authorization response's parameters added (RFC 6749 §4.1.2). */
export function withParams(redirectUri: string, params: Record<string, string | null>): string {
  const u = new URL(redirectUri);
  for (const [k, v] of Object.entries(params)) if (v !== null) u.searchParams.set(k, v);
  return u.toString();
}

/**
 * A path on this server a sign-in may continue to: one slash then not a second one or a
 * backslash (`//evil.example` and `/\evil.example` are other hosts to a browser), printable.
 */
export function isLocalPath(value: string): boolean {
  return /^\/(?![/\\])[\x21-\x7e]*$/.test(value) && !value.includes("\\");
}
