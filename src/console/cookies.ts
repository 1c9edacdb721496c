/**
 * The console's cookies, pure: parsing the Cookie header, and the Set-Cookie of a session
 * (HttpOnly, SameSite=Lax, Path=/; Secure and the `__Host-` prefix behind TLS, so no other
 * host or path can set or read it).
 */
export function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (header ?? "").split(";")) {
    const i = part.indexOf("=");
    if (i <= 0) continue;
    const name = part.slice(0, i).trim();
    if (!out.has(name)) out.set(name, part.slice(i + 1).trim());
  }
  return out;
}

export function sessionCookieName(secure: boolean): string {
  return secure ? "__Host-scratchrun_session" : "scratchrun_session";
}

/** The sign-in form's own CSRF cookie (double submit: no session exists yet to hold a token). */
export function signinCookieName(secure: boolean): string {
  return secure ? "__Host-scratchrun_signin" : "scratchrun_signin";
}

/** A sign-in through the trusted OIDC issuer in progress: its state, nonce and PKCE verifier. */
export function oidcCookieName(secure: boolean): string {
  return secure ? "__Host-scratchrun_oidc" : "scratchrun_oidc";
}

export function setCookie(
  name: string,
  value: string,
  o: { secure: boolean; maxAgeS: number; sameSite: "Lax" | "Strict" },
): string {
  return [
    `${name}=${value}`,
    "Path=/",
    "HttpOnly",
    `SameSite=${o.sameSite}`,
    `Max-Age=${Math.max(0, Math.floor(o.maxAgeS))}`,
    ...(o.secure ? ["Secure"] : []),
  ].join("; ");
}
