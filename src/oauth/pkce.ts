import { createHash, timingSafeEqual } from "node:crypto";

/**
 * PKCE (RFC 7636) as OAuth 2.1 and MCP require it: S256 only. A challenge is the base64url
 * SHA-256 of a verifier of 43-128 unreserved characters; `plain` and a missing challenge are
 * refused at /oauth/authorize, a missing or wrong verifier at /oauth/token. Pure.
 */
const VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/;
const CHALLENGE = /^[A-Za-z0-9_-]{43}$/;

export type ChallengeCheck = { ok: true; challenge: string } | { ok: false; message: string };

/** The authorization request's code_challenge and code_challenge_method, checked. */
export function checkChallenge(
  challenge: string | undefined,
  method: string | undefined,
): ChallengeCheck {
  if (challenge === undefined)
    return { ok: false, message: "code_challenge is required (PKCE with S256)" };
  if (method !== "S256")
    return {
      ok: false,
      message: `code_challenge_method must be S256${method === undefined ? " (it defaults to plain, which is refused)" : `, not ${method}`}`,
    };
  if (!CHALLENGE.test(challenge))
    return { ok: false, message: "code_challenge must be 43 base64url characters (SHA-256)" };
  return { ok: true, challenge };
}

/** Whether `verifier` is the one whose S256 challenge was stored. */
export function verifierMatches(verifier: string | undefined, challenge: string): boolean {
  if (verifier === undefined || !VERIFIER.test(verifier)) return false;
  const got = Buffer.from(createHash("sha256").update(verifier, "ascii").digest("base64url"));
  const want = Buffer.from(challenge);
  return got.length === want.length && timingSafeEqual(got, want);
}

/** The S256 challenge of a verifier (what this service sends as a client of an issuer). */
export function challengeOf(verifier: string): string {
  return createHash("sha256").update(verifier, "ascii").digest("base64url");
}
