import { randomBytes } from "node:crypto";
import { ScratchRunError } from "../errors.js";
import { verifyJwt, type Jwk, type JwtClaims } from "./jwt.js";
import { challengeOf } from "./pkce.js";

/**
 * An external OIDC issuer the operator trusts (SCRATCHRUN_OIDC_ISSUER, decision 0016) instead of
 * the service's own authorization server: its access tokens for /mcp (a JWT whose `aud` is the
 * audience) act as the key bound to their subject, and, with a client ID, people sign in to the
 * console through it (authorization code with PKCE and a nonce). Its metadata and keys are
 * fetched from the issuer itself (OIDC Discovery), bounded, and cached; an unknown `kid` fetches
 * the keys again (rotation), at most once per `refetchGapMs`.
 */
export interface OidcSettings {
  /** The issuer URL, exactly as its tokens' `iss` says it. */
  issuer: string;
  /** The `aud` an access token for /mcp must carry (unset: the resource, `${publicUrl}/mcp`). */
  audience?: string;
  /** The console's client at the issuer: sign-in through it is offered only when set. */
  clientId?: string;
  /** Its secret, for an issuer that wants a confidential client (sent as HTTP Basic). */
  clientSecret?: string;
}

interface Discovered {
  authorizationEndpoint: string;
  tokenEndpoint: string;
  jwksUri: string;
}

const FETCH_TIMEOUT_MS = 5000;
const FETCH_MAX_BYTES = 256 * 1024;
const METADATA_TTL_MS = 60 * 60_000;
const KEYS_TTL_MS = 10 * 60_000;

/**
 * An issuer or endpoint URL the service may fetch: https, or http on a loopback name (an
 * issuer on the same host). No credentials, no fragment.
 */
export function checkIssuerUrl(value: string, what = "the OIDC issuer"): string | null {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return `${what} is not a URL: ${JSON.stringify(value)}`;
  }
  const loopback = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/.test(u.hostname);
  if (u.protocol !== "https:" && !(u.protocol === "http:" && loopback))
    return `${what} must be https (http only on loopback): ${value}`;
  if (u.username || u.password || u.hash) return `${what} must carry no credentials or fragment`;
  return null;
}

/** GETs or POSTs JSON with the bounds: 5 s, 256 KiB, no redirects followed. */
async function fetchJson(url: string, init: RequestInit = {}): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    ...init,
    redirect: "error",
    signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
    headers: { Accept: "application/json", ...(init.headers as Record<string, string>) },
  });
  const reader = res.body?.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const r = await reader?.read();
    if (!r || r.done) break;
    size += r.value.length;
    if (size > FETCH_MAX_BYTES) {
      await reader?.cancel();
      throw new Error(`${url} answered more than ${FETCH_MAX_BYTES} bytes`);
    }
    chunks.push(r.value);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`${url} answered ${res.status} with no JSON`);
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new Error(`${url} answered ${res.status} with no JSON object`);
  const o = body as Record<string, unknown>;
  if (!res.ok)
    throw new Error(
      `${url} answered ${res.status}: ${String(o.error ?? "")} ${String(o.error_description ?? "")}`.trim(),
    );
  return o;
}

export class TrustedIssuer {
  readonly issuer: string;
  private discovered: { value: Discovered; at: number } | undefined;
  private keys: { value: Jwk[]; at: number } | undefined;

  constructor(
    private readonly settings: OidcSettings,
    private readonly refetchGapMs = 30_000,
  ) {
    const bad = checkIssuerUrl(settings.issuer);
    if (bad) throw new TypeError(bad);
    this.issuer = settings.issuer;
  }

  /** Whether the console offers sign-in through this issuer. */
  get signsIn(): boolean {
    return this.settings.clientId !== undefined;
  }

  private unavailable(e: unknown): ScratchRunError {
    return new ScratchRunError(
      "NOT_READY",
      `the trusted OIDC issuer ${this.issuer} could not be reached: ${e instanceof Error ? e.message : String(e)}`,
      { fix: "Retry shortly; the operator checks SCRATCHRUN_OIDC_ISSUER" },
    );
  }

  /** The issuer's metadata (`/.well-known/openid-configuration`), its issuer checked. */
  private async metadata(): Promise<Discovered> {
    const d = this.discovered;
    if (d && Date.now() - d.at < METADATA_TTL_MS) return d.value;
    const url = `${this.issuer.replace(/\/+$/, "")}/.well-known/openid-configuration`;
    let m: Record<string, unknown>;
    try {
      m = await fetchJson(url);
    } catch (e) {
      throw this.unavailable(e);
    }
    // OIDC Discovery §4.3: the document must name the very issuer it was fetched for.
    if (m.issuer !== this.issuer)
      throw this.unavailable(new Error(`its metadata names issuer ${JSON.stringify(m.issuer)}`));
    const value: Discovered = {
      authorizationEndpoint: String(m.authorization_endpoint ?? ""),
      tokenEndpoint: String(m.token_endpoint ?? ""),
      jwksUri: String(m.jwks_uri ?? ""),
    };
    for (const [name, u] of Object.entries(value)) {
      const bad = checkIssuerUrl(u, `the issuer's ${name}`);
      if (bad) throw this.unavailable(new Error(bad));
    }
    this.discovered = { value, at: Date.now() };
    return value;
  }

  private async fetchKeys(): Promise<Jwk[]> {
    const { jwksUri } = await this.metadata();
    let set: Record<string, unknown>;
    try {
      set = await fetchJson(jwksUri);
    } catch (e) {
      throw this.unavailable(e);
    }
    if (!Array.isArray(set.keys)) throw this.unavailable(new Error("its JWKS has no keys array"));
    const value = set.keys.filter((k): k is Jwk => typeof k === "object" && k !== null);
    this.keys = { value, at: Date.now() };
    return value;
  }

  /** Verifies a JWT from this issuer for `audience`; one refetch of the keys on an unknown kid. */
  private async verify(
    token: string,
    audience: string,
  ): Promise<{ ok: true; claims: JwtClaims } | { ok: false; reason: string }> {
    const cached = this.keys;
    const fresh = cached && Date.now() - cached.at < KEYS_TTL_MS;
    const keys = fresh ? cached.value : await this.fetchKeys();
    const first = verifyJwt(token, { issuer: this.issuer, audience, keys });
    if (first.ok || !first.unknownKey) return first;
    if (!fresh || Date.now() - cached.at < this.refetchGapMs) return first;
    return verifyJwt(token, { issuer: this.issuer, audience, keys: await this.fetchKeys() });
  }

  /**
   * An access token for /mcp: its subject, when it is this issuer's, live and for the configured
   * audience (unset: `resource`, this server's /mcp, as RFC 8707 binds a token to it).
   */
  async verifyAccess(
    token: string,
    resource: string,
  ): Promise<{ ok: true; subject: string } | { ok: false; reason: string }> {
    const r = await this.verify(token, this.settings.audience ?? resource);
    return r.ok ? { ok: true, subject: r.claims.sub } : r;
  }

  /** The console's sign-in, step 1: where the browser goes, and what the callback must hold. */
  async startSignIn(redirectUri: string): Promise<{
    to: string;
    state: string;
    nonce: string;
    verifier: string;
  }> {
    const { authorizationEndpoint } = await this.metadata();
    const state = randomBytes(24).toString("base64url");
    const nonce = randomBytes(24).toString("base64url");
    const verifier = randomBytes(32).toString("base64url");
    const to = new URL(authorizationEndpoint);
    for (const [k, v] of Object.entries({
      response_type: "code",
      client_id: this.settings.clientId ?? "",
      redirect_uri: redirectUri,
      scope: "openid",
      state,
      nonce,
      code_challenge: challengeOf(verifier),
      code_challenge_method: "S256",
    }))
      to.searchParams.set(k, v);
    return { to: to.toString(), state, nonce, verifier };
  }

  /**
   * The console's sign-in, step 2: redeems the code at the issuer and checks the ID token it
   * returns (signature, iss, aud = our client ID, exp, and the nonce this browser was given).
   */
  async finishSignIn(
    code: string,
    redirectUri: string,
    verifier: string,
    nonce: string,
  ): Promise<{ ok: true; subject: string } | { ok: false; reason: string }> {
    const clientId = this.settings.clientId ?? "";
    const { tokenEndpoint } = await this.metadata();
    const headers: Record<string, string> = {
      "Content-Type": "application/x-www-form-urlencoded",
    };
    if (this.settings.clientSecret !== undefined)
      headers.Authorization = `Basic ${Buffer.from(
        `${encodeURIComponent(clientId)}:${encodeURIComponent(this.settings.clientSecret)}`,
      ).toString("base64")}`;
    let answer: Record<string, unknown>;
    try {
      answer = await fetchJson(tokenEndpoint, {
        method: "POST",
        headers,
        body: new URLSearchParams({
          grant_type: "authorization_code",
          code,
          redirect_uri: redirectUri,
          client_id: clientId,
          code_verifier: verifier,
        }).toString(),
      });
    } catch (e) {
      return {
        ok: false,
        reason: `the issuer did not redeem the code: ${e instanceof Error ? e.message : String(e)}`,
      };
    }
    if (typeof answer.id_token !== "string")
      return { ok: false, reason: "the issuer sent no ID token" };
    const r = await this.verify(answer.id_token, clientId);
    if (!r.ok) return { ok: false, reason: `the ID token is refused: ${r.reason}` };
    if (r.claims.nonce !== nonce)
      return { ok: false, reason: "the ID token's nonce is not this sign-in's" };
    return { ok: true, subject: r.claims.sub };
  }
}
