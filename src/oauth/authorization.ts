import type { OAuthClient, OAuthStore, TokenPair } from "../store/oauth.js";
import { fetchClientMetadata, type MetadataFetchOptions } from "./client-metadata.js";
import { checkChallenge, verifierMatches } from "./pkce.js";
import { checkRedirectUri, isMetadataClientId, redirectAllowed, withParams } from "./uris.js";

/**
 * The service as its own OAuth 2.1 authorization server for /mcp (the MCP authorization spec,
 * 2025-11-25 and 2026-07-28): metadata (RFC 9728, RFC 8414), authorization code with PKCE S256,
 * client ID metadata documents and dynamic registration (RFC 7591), refresh rotation, and tokens
 * bound to one resource (RFC 8707). Each step parses its parameters into a typed outcome; the
 * HTTP glue (routes.ts) only renders it.
 */
export interface OAuthConfig {
  /** The issuer: this service's public origin, no trailing slash (`https://sr.example.com`). */
  issuer: string;
  /** The one resource tokens are for: `${issuer}/mcp`. */
  resource: string;
  metadataFetch: MetadataFetchOptions;
  /** A trusted external issuer (SCRATCHRUN_OIDC_ISSUER): named to clients instead of this one. */
  externalIssuer?: string;
}

/** The one scope: run code with the approved key's policy, quota and records. */
export const SCOPE = "scratchrun:exec";

export function oauthConfig(
  publicUrl: string,
  metadataFetch: MetadataFetchOptions,
  externalIssuer?: string,
): OAuthConfig {
  const issuer = publicUrl.replace(/\/+$/, "");
  return {
    issuer,
    resource: `${issuer}/mcp`,
    metadataFetch,
    ...(externalIssuer ? { externalIssuer } : {}),
  };
}

/** Where a client learns who guards /mcp (RFC 9728), also served path-suffixed for /mcp. */
export const PRM_PATH = "/.well-known/oauth-protected-resource";
export const ASM_PATH = "/.well-known/oauth-authorization-server";

export function protectedResourceMetadata(c: OAuthConfig) {
  return {
    resource: c.resource,
    authorization_servers: [c.externalIssuer ?? c.issuer],
    bearer_methods_supported: ["header"],
    scopes_supported: [SCOPE],
    resource_name: "ScratchRun",
  };
}

export function authorizationServerMetadata(c: OAuthConfig) {
  return {
    issuer: c.issuer,
    authorization_endpoint: `${c.issuer}/oauth/authorize`,
    token_endpoint: `${c.issuer}/oauth/token`,
    registration_endpoint: `${c.issuer}/oauth/register`,
    response_types_supported: ["code"],
    response_modes_supported: ["query"],
    grant_types_supported: ["authorization_code", "refresh_token"],
    code_challenge_methods_supported: ["S256"],
    token_endpoint_auth_methods_supported: ["none"],
    scopes_supported: [SCOPE],
    client_id_metadata_document_supported: true,
    authorization_response_iss_parameter_supported: true,
  };
}

/** The `WWW-Authenticate` of a 401 from /mcp: where the protected-resource metadata is. */
export function bearerChallenge(c: OAuthConfig, error?: "invalid_token"): string {
  return `Bearer realm="scratchrun", resource_metadata="${c.issuer}${PRM_PATH}/mcp"${error ? `, error="${error}"` : ""}`;
}

export type AuthorizeOutcome =
  /** The client or its redirect URI is not proven: shown as a page, never redirected to. */
  | { kind: "page"; status: 400; message: string }
  /** A checked redirect URI gets the error (RFC 6749 §4.1.2.1). */
  | { kind: "redirect"; to: string }
  /** The request waits for the person's decision on the consent page. */
  | { kind: "consent"; requestId: string };

const one = (p: URLSearchParams, name: string): string | undefined | null => {
  const all = p.getAll(name);
  return all.length === 0 ? undefined : all.length === 1 ? all[0]! : null;
};

/** Resolves a client: a registered one, or a metadata document fetched now (bounded). */
async function findClient(
  store: OAuthStore,
  c: OAuthConfig,
  clientId: string,
): Promise<{ ok: true; client: OAuthClient } | { ok: false; message: string }> {
  if (isMetadataClientId(clientId)) {
    const fetched = await fetchClientMetadata(clientId, c.metadataFetch);
    if (!fetched.ok) return fetched;
    await store.saveClient(fetched.client);
    return fetched;
  }
  const client = await store.client(clientId);
  if (!client || client.kind !== "registered")
    return { ok: false, message: "client_id names no client of this server" };
  return { ok: true, client };
}

/** GET /oauth/authorize: checks the request; a good one waits for consent. */
export async function authorize(
  store: OAuthStore,
  c: OAuthConfig,
  params: URLSearchParams,
): Promise<AuthorizeOutcome> {
  const page = (message: string): AuthorizeOutcome => ({ kind: "page", status: 400, message });
  const clientId = one(params, "client_id");
  if (!clientId) return page("client_id is required, once");
  const found = await findClient(store, c, clientId);
  if (!found.ok) return page(found.message);
  const { client } = found;
  const asked = one(params, "redirect_uri");
  if (asked === null) return page("redirect_uri is given more than once");
  const redirectUri = asked ?? (client.redirectUris.length === 1 ? client.redirectUris[0] : null);
  if (!redirectUri) return page("redirect_uri is required (the client has several)");
  if (!redirectAllowed(redirectUri, client.redirectUris) || !checkRedirectUri(redirectUri).ok)
    return page("redirect_uri is not one of the client's registered redirect URIs, exactly");
  const state = one(params, "state");
  // From here the redirect URI is the client's own: errors go back to it.
  const back = (error: string, description: string): AuthorizeOutcome => ({
    kind: "redirect",
    to: withParams(redirectUri, {
      error,
      error_description: description,
      state: state ?? null,
      iss: c.issuer,
    }),
  });
  if (state === null) return back("invalid_request", "state is given more than once");
  if (one(params, "response_type") !== "code")
    return back("unsupported_response_type", "response_type must be code");
  const pkce = checkChallenge(
    one(params, "code_challenge") ?? undefined,
    one(params, "code_challenge_method") ?? undefined,
  );
  if (!pkce.ok) return back("invalid_request", pkce.message);
  const resource = one(params, "resource");
  if (resource !== c.resource)
    return back("invalid_target", `resource must be this server's MCP endpoint, ${c.resource}`);
  const scope = one(params, "scope");
  if (scope !== undefined && scope !== null && scope.split(" ").some((s) => s !== SCOPE))
    return back("invalid_scope", `the only scope is ${SCOPE}`);
  const request = await store.createRequest({
    clientId: client.clientId,
    clientName: client.name,
    redirectUri,
    state: state ?? null,
    codeChallenge: pkce.challenge,
    resource,
    scope: SCOPE,
  });
  return { kind: "consent", requestId: request.id };
}

export type TokenOutcome =
  | { ok: true; tokens: TokenPair }
  | { ok: false; status: 400 | 401; error: string; description: string };

const fail = (error: string, description: string, status: 400 | 401 = 400): TokenOutcome => ({
  ok: false,
  status,
  error,
  description,
});

/** POST /oauth/token: a code (with its PKCE verifier) or a refresh token for new tokens. */
export async function token(
  store: OAuthStore,
  c: OAuthConfig,
  form: Record<string, string>,
  keyActive: (keyId: string) => Promise<boolean>,
): Promise<TokenOutcome> {
  const clientId = form.client_id;
  if (!clientId) return fail("invalid_request", "client_id is required (public clients)");
  if (form.resource !== undefined && form.resource !== c.resource)
    return fail("invalid_target", `resource must be ${c.resource}`);
  if (form.grant_type === "authorization_code") {
    if (!form.code) return fail("invalid_request", "code is required");
    const redeemed = await store.redeemCode(form.code);
    if (!redeemed.ok)
      return fail(
        "invalid_grant",
        redeemed.reason === "reused"
          ? "the code was used already; its grant is revoked"
          : `the code is ${redeemed.reason}`,
      );
    const r = redeemed.request;
    if (r.clientId !== clientId) return fail("invalid_grant", "the code is another client's");
    if (form.redirect_uri !== r.redirectUri)
      return fail("invalid_grant", "redirect_uri is not the one the code was issued for");
    if (!verifierMatches(form.code_verifier, r.codeChallenge))
      return fail("invalid_grant", "code_verifier does not match the code_challenge (S256)");
    if (r.resource !== c.resource)
      return fail("invalid_target", "the code is for another resource");
    const grant = await store.grant(r.grantId!);
    if (!grant || grant.revokedAt !== null || !(await keyActive(grant.keyId)))
      return fail("invalid_grant", "the grant or its API key is revoked");
    return { ok: true, tokens: await store.issue(grant.id) };
  }
  if (form.grant_type === "refresh_token") {
    if (!form.refresh_token) return fail("invalid_request", "refresh_token is required");
    const spent = await store.refresh(form.refresh_token);
    if (!spent.ok)
      return fail(
        "invalid_grant",
        spent.reason === "reused"
          ? "the refresh token was used already; its grant is revoked"
          : `the refresh token is ${spent.reason}`,
      );
    const { grant } = spent;
    if (grant.clientId !== clientId) {
      await store.revokeGrant(grant.id, "refresh token presented by another client");
      return fail("invalid_grant", "the refresh token is another client's");
    }
    if (grant.resource !== c.resource)
      return fail("invalid_target", "the refresh token is for another resource");
    if (!(await keyActive(grant.keyId))) return fail("invalid_grant", "the API key is revoked");
    return { ok: true, tokens: await store.issue(grant.id) };
  }
  return fail("unsupported_grant_type", "grant_type must be authorization_code or refresh_token");
}

export type RegisterOutcome =
  { ok: true; body: Record<string, unknown> } | { ok: false; error: string; description: string };

/** POST /oauth/register (RFC 7591): a public client with checked redirect URIs. */
export async function register(store: OAuthStore, body: unknown): Promise<RegisterOutcome> {
  const bad = (description: string, error = "invalid_client_metadata"): RegisterOutcome => ({
    ok: false,
    error,
    description,
  });
  if (typeof body !== "object" || body === null || Array.isArray(body))
    return bad("the body is a JSON object of client metadata");
  const m = body as Record<string, unknown>;
  const uris = m.redirect_uris;
  if (!Array.isArray(uris) || uris.length === 0 || uris.length > 20)
    return bad("redirect_uris must list 1-20 URIs", "invalid_redirect_uri");
  const checked: string[] = [];
  for (const u of uris) {
    const r = checkRedirectUri(u);
    if (!r.ok) return bad(r.message, "invalid_redirect_uri");
    checked.push(r.uri);
  }
  const method = m.token_endpoint_auth_method ?? "none";
  if (method !== "none")
    return bad(
      `token_endpoint_auth_method must be none (public clients with PKCE), not ${String(method)}`,
    );
  const grants = m.grant_types ?? ["authorization_code", "refresh_token"];
  if (
    !Array.isArray(grants) ||
    grants.some((g) => g !== "authorization_code" && g !== "refresh_token")
  )
    return bad("grant_types may be authorization_code and refresh_token");
  const responses = m.response_types ?? ["code"];
  if (!Array.isArray(responses) || responses.some((r) => r !== "code"))
    return bad("response_types may only be code");
  const name = m.client_name ?? "unnamed client";
  if (typeof name !== "string" || name.length === 0 || name.length > 100)
    return bad("client_name must be 1-100 characters");
  const client = await store.register(name, checked);
  return {
    ok: true,
    body: {
      client_id: client.clientId,
      client_id_issued_at: Math.floor(Date.now() / 1000),
      client_name: client.name,
      redirect_uris: client.redirectUris,
      grant_types: grants,
      response_types: responses,
      token_endpoint_auth_method: "none",
    },
  };
}
