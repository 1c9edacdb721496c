/**
 * DNS-rebinding defence for a server bound to loopback: a browser page on evil.example that
 * resolves its name to 127.0.0.1 still sends `Host: evil.example` (and its own Origin), so only
 * loopback names with the server's own port are accepted. Pure functions.
 */

export function isLoopbackBind(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

const LOOPBACK_NAMES = /^(localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])$/;

/** `name:port` → its parts, for Host header values; null when malformed. */
export function splitHostPort(value: string): { name: string; port: number | null } | null {
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(value);
  if (!m) return null;
  const port = m[2] === undefined ? null : Number(m[2]);
  if (port !== null && (port < 1 || port > 65535)) return null;
  return { name: m[1]!.toLowerCase(), port };
}

function loopbackAuthority(value: string, port: number, defaultPort: number | null): boolean {
  const hp = splitHostPort(value);
  if (!hp || !LOOPBACK_NAMES.test(hp.name)) return false;
  return (hp.port ?? defaultPort) === port;
}

export type OriginCheck = { ok: true } | { ok: false; reason: string };

/**
 * For a loopback-bound server: Host must be a loopback name with our port; Origin, when sent,
 * must be http(s) on a loopback name with our port. Other binds pass (keys guard them, and no
 * CORS headers are sent but on the OAuth endpoints a browser client reads, src/oauth/routes.ts).
 */
export function checkHostOrigin(
  headers: { host?: string | undefined; origin?: string | undefined },
  server: { bindHost: string; port: number },
): OriginCheck {
  if (!isLoopbackBind(server.bindHost)) return { ok: true };
  if (headers.host === undefined || !loopbackAuthority(headers.host, server.port, 80))
    return { ok: false, reason: "Host header is not this loopback server" };
  if (headers.origin !== undefined) {
    const m = /^(https?):\/\/([^/?#@]+)$/i.exec(headers.origin);
    if (!m) return { ok: false, reason: "Origin is not a loopback http(s) origin" };
    const defaultPort = m[1]!.toLowerCase() === "https" ? 443 : 80;
    if (!loopbackAuthority(m[2]!, server.port, defaultPort))
      return { ok: false, reason: "Origin is not this loopback server" };
  }
  return { ok: true };
}
