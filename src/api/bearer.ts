import type { IncomingMessage, ServerResponse } from "node:http";
import { isScratchRunError } from "../errors.js";
import { type FailureLimiter, parseBearer } from "../http/auth.js";
import { refuse, refusalOf, sendError } from "../http/respond.js";
import { bearerChallenge, type OAuthConfig } from "../oauth/authorization.js";
import { looksLikeJwt } from "../oauth/jwt.js";
import type { TrustedIssuer } from "../oauth/oidc.js";
import type { KeyStore, VerifiedKey } from "../store/keys.js";
import type { OAuthStore } from "../store/oauth.js";

export interface BearerDeps {
  keys: KeyStore;
  oauth: OAuthStore;
  config: OAuthConfig;
  oidc?: TrustedIssuer;
  /** Failed authentications count here, per client address. */
  failures: FailureLimiter;
  /** The client's address (the peer's, or a trusted proxy's client's: http/client-address.ts). */
  clientOf(req: IncomingMessage): string;
  /** Admission records the key's last use itself (an API replica's): no touch here. */
  admissionTouchesKey?: boolean;
}

/**
 * Who is calling, as one key: the bearer is an API key, or, on /mcp only, an OAuth access token
 * (`sra_…`) or a trusted issuer's JWT bound to a key. Resolves with the key, or with null once the
 * request is answered: 401 without a credential (on /mcp naming the protected-resource metadata,
 * which is how an MCP client finds OAuth; never a failure: every MCP client's first request has
 * none), 503 while the shared database is away; a credential that is not valid here is a failure
 * of its client's address, answered 401, or 429 while that address has failed too often. The
 * credential is checked before the address's bucket, so a valid one is never refused for what
 * others on its address (behind one NAT or front door) got wrong; the bucket only slows down how
 * fast an address hears "wrong" (a 256-bit key is not guessed by any rate).
 */
export function bearerAuth(d: BearerDeps) {
  /**
   * An OAuth access token is the key its grant names, when the token is live and was issued for
   * this server's /mcp (RFC 8707: a token for another resource is no token here), and is
   * presented at /mcp: REST (`/v1/*`) is not the resource it was issued for, so there it is no
   * credential. A trusted issuer's token is the one active key bound to its subject (keys create
   * --oidc-subject), at /mcp too; a subject no key is bound to is no caller.
   */
  const verify = async (token: string, mcp: boolean): Promise<VerifiedKey | null> => {
    if (!token.startsWith("srk_") && !mcp) return null;
    if (d.oidc && looksLikeJwt(token)) {
      const r = await d.oidc.verifyAccess(token, d.config.resource);
      return r.ok ? d.keys.bySubject(r.subject) : null;
    }
    if (!token.startsWith("sra_")) return d.keys.verify(token);
    const granted = await d.oauth.verifyAccess(token);
    if (!granted || granted.resource !== d.config.resource) return null;
    return d.keys.active(granted.keyId);
  };

  return async (
    req: IncomingMessage,
    res: ServerResponse,
    mcp: boolean,
  ): Promise<VerifiedKey | null> => {
    const token = parseBearer(req.headers.authorization);
    let key: VerifiedKey | null;
    try {
      key = token === null ? null : await verify(token, mcp);
    } catch (e) {
      // The shared database is away (failover): not the caller's fault, retry shortly.
      if (!isScratchRunError(e) || e.code !== "NOT_READY") throw e;
      refuse(res, refusalOf(e));
      return null;
    }
    if (!key) {
      if (token !== null) {
        const addr = d.clientOf(req);
        const wait = d.failures.retryAfterS(addr);
        if (wait > 0) {
          sendError(res, 429, "UNAUTHORIZED", "Too many failed authentications; wait and retry", {
            "Retry-After": String(wait),
          });
          return null;
        }
        d.failures.recordFailure(addr);
      }
      const challenge = mcp
        ? bearerChallenge(d.config, token === null ? undefined : "invalid_token")
        : 'Bearer realm="scratchrun"';
      sendError(
        res,
        401,
        "UNAUTHORIZED",
        mcp
          ? "A valid API key or OAuth access token is required (Authorization: Bearer)"
          : "A valid API key is required (Authorization: Bearer srk_…; OAuth access tokens are for /mcp)",
        { "WWW-Authenticate": challenge },
      );
      return null;
    }
    if (!d.admissionTouchesKey) d.keys.touch(key.id).catch(() => {});
    return key;
  };
}
