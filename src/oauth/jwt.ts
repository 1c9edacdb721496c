import { createPublicKey, verify, type JsonWebKey, type KeyObject } from "node:crypto";

/**
 * Checks a JWT (JWS compact form) from a trusted OIDC issuer: its signature against the issuer's
 * published keys, and its claims (iss, aud, exp, nbf, iat, sub). Pure but for the signature's
 * crypto. Only asymmetric algorithms are taken, and only those the key itself is for: `none`,
 * the HMAC family (a public key posing as a shared secret), a header naming its own key (`jwk`,
 * `jku`, `x5u` are never read) and a critical extension are refused, whatever the issuer says.
 */
export const JWT_ALGORITHMS = ["RS256", "ES256"] as const;
export type JwtAlgorithm = (typeof JWT_ALGORITHMS)[number];

/** A public key as a JWKS lists it (RFC 7517); other members are ignored. */
export interface Jwk {
  kty?: unknown;
  kid?: unknown;
  use?: unknown;
  alg?: unknown;
  crv?: unknown;
  n?: unknown;
  e?: unknown;
  x?: unknown;
  y?: unknown;
}

export interface JwtExpect {
  issuer: string;
  /** One of the token's audiences must be exactly this. */
  audience: string;
  keys: readonly Jwk[];
  /** Seconds since the epoch (default: now). */
  nowS?: number;
  /** Clock skew allowed on exp, nbf and iat. */
  skewS?: number;
}

export interface JwtClaims {
  iss: string;
  sub: string;
  aud: string | string[];
  exp: number;
  [claim: string]: unknown;
}

export type JwtOutcome =
  | { ok: true; claims: JwtClaims }
  /** `unknownKey`: no published key matched the header, so a newer key set might (rotation). */
  | { ok: false; reason: string; unknownKey?: true };

/** Longer than any token an issuer sends: a bound before any parsing. */
export const JWT_MAX_CHARS = 16 * 1024;
const SEGMENT = /^[A-Za-z0-9_-]+$/;

function json(segment: string): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(Buffer.from(segment, "base64url").toString("utf8"));
    return typeof v === "object" && v !== null && !Array.isArray(v)
      ? (v as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

/** Whether `s` has the shape of a JWS compact token (three base64url segments). */
export function looksLikeJwt(s: string): boolean {
  const parts = s.split(".");
  return parts.length === 3 && parts.every((p) => SEGMENT.test(p));
}

/** The public key a JWK describes, when it is one this algorithm may use; else null. */
function keyFor(alg: JwtAlgorithm, jwk: Jwk): KeyObject | null {
  if (jwk.use !== undefined && jwk.use !== "sig") return null;
  if (jwk.alg !== undefined && jwk.alg !== alg) return null;
  let pub: JsonWebKey;
  if (alg === "RS256") {
    if (jwk.kty !== "RSA" || typeof jwk.n !== "string" || typeof jwk.e !== "string") return null;
    pub = { kty: "RSA", n: jwk.n, e: jwk.e };
  } else {
    if (jwk.kty !== "EC" || jwk.crv !== "P-256") return null;
    if (typeof jwk.x !== "string" || typeof jwk.y !== "string") return null;
    pub = { kty: "EC", crv: "P-256", x: jwk.x, y: jwk.y };
  }
  try {
    const key = createPublicKey({ key: pub, format: "jwk" });
    // A short RSA modulus is forgeable: below 2048 bits the key is not one.
    if (alg === "RS256" && (key.asymmetricKeyDetails?.modulusLength ?? 0) < 2048) return null;
    return key;
  } catch {
    return null;
  }
}

export function verifyJwt(token: string, expect: JwtExpect): JwtOutcome {
  const no = (reason: string): JwtOutcome => ({ ok: false, reason });
  if (token.length > JWT_MAX_CHARS) return no("the token is longer than any issuer's");
  if (!looksLikeJwt(token)) return no("not a signed JWT (three base64url parts)");
  const [h, p, s] = token.split(".") as [string, string, string];
  const header = json(h);
  if (!header) return no("the JWT header is not a JSON object");
  const alg = header.alg;
  if (!JWT_ALGORITHMS.includes(alg as JwtAlgorithm))
    return no(`alg ${JSON.stringify(alg)} is not accepted (${JWT_ALGORITHMS.join(", ")} only)`);
  if (header.crit !== undefined) return no("critical header extensions are not understood");
  const kid = header.kid;
  if (kid !== undefined && typeof kid !== "string") return no("kid is not a string");
  const candidates = expect.keys.filter((k) => (kid === undefined ? true : k.kid === kid));
  const usable = candidates
    .map((k) => keyFor(alg as JwtAlgorithm, k))
    .filter((k): k is KeyObject => k !== null);
  // Without a kid the issuer must publish exactly one key for this algorithm.
  if (usable.length === 0 || (kid === undefined && usable.length !== 1))
    return {
      ok: false,
      reason: `no published key of the issuer ${kid === undefined ? "is the one" : `has kid ${JSON.stringify(kid)} and is`} for ${String(alg)}`,
      unknownKey: true,
    };
  const signature = Buffer.from(s, "base64url");
  if (alg === "ES256" && signature.length !== 64) return no("the ES256 signature is not 64 bytes");
  const signed = Buffer.from(`${h}.${p}`, "ascii");
  const good = verify(
    "sha256",
    signed,
    alg === "ES256" ? { key: usable[0]!, dsaEncoding: "ieee-p1363" } : usable[0]!,
    signature,
  );
  if (!good) return no("the signature does not verify with the issuer's key");
  const c = json(p);
  if (!c) return no("the JWT payload is not a JSON object");
  const now = expect.nowS ?? Math.floor(Date.now() / 1000);
  const skew = expect.skewS ?? 60;
  if (c.iss !== expect.issuer) return no(`iss is not ${expect.issuer}`);
  const aud = c.aud;
  const audiences = typeof aud === "string" ? [aud] : Array.isArray(aud) ? aud : [];
  if (!audiences.includes(expect.audience))
    return no(`the token is not for this audience (${expect.audience})`);
  if (typeof c.exp !== "number" || !Number.isFinite(c.exp)) return no("exp is missing");
  if (now >= c.exp + skew) return no("the token expired");
  if (c.nbf !== undefined && (typeof c.nbf !== "number" || c.nbf > now + skew))
    return no("the token is not valid yet (nbf)");
  if (c.iat !== undefined && (typeof c.iat !== "number" || c.iat > now + skew))
    return no("the token is issued in the future (iat)");
  if (typeof c.sub !== "string" || c.sub.length === 0) return no("sub is missing");
  return { ok: true, claims: c as JwtClaims };
}
