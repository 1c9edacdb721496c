/**
 * The OpenAPI paths and schemas of OAuth for /mcp and the console's sign-in and consent
 * (docs/decisions/0016-oauth.md), merged into the service's document by openapi.ts. The console
 * routes authenticate with the session cookie; their writes also carry X-CSRF-Token.
 */
import { err, int, json, jsonBody, nullable, str } from "../http/openapi-parts.js";

const oauthErr = (description: string) => ({
  description,
  content: json("#/components/schemas/OAuthError"),
});
const console_ = [{ consoleSession: [] }];
const consoleWrite = [{ consoleSession: [], csrfToken: [] }];
const idParam = (name: string) => ({
  name,
  in: "path",
  required: true,
  schema: { type: "string" },
});

export const AUTH_PATHS = {
  "/.well-known/oauth-protected-resource": {
    get: {
      operationId: "protectedResourceMetadata",
      security: [],
      summary: "RFC 9728 metadata of /mcp (also at /.well-known/oauth-protected-resource/mcp)",
      responses: {
        "200": {
          description: "The metadata",
          content: json("#/components/schemas/ProtectedResourceMetadata"),
        },
      },
    },
  },
  "/.well-known/oauth-protected-resource/mcp": {
    get: {
      operationId: "protectedResourceMetadataMcp",
      security: [],
      summary: "RFC 9728 metadata of /mcp, path-suffixed (what /mcp's 401 names)",
      responses: {
        "200": {
          description: "The metadata",
          content: json("#/components/schemas/ProtectedResourceMetadata"),
        },
      },
    },
  },
  "/.well-known/oauth-authorization-server": {
    get: {
      operationId: "authorizationServerMetadata",
      security: [],
      summary: "RFC 8414 metadata of this service as its own authorization server",
      responses: {
        "200": {
          description: "The metadata",
          content: json("#/components/schemas/AuthorizationServerMetadata"),
        },
      },
    },
  },
  "/oauth/authorize": {
    get: {
      operationId: "authorize",
      security: [],
      summary:
        "Authorization request (code, PKCE S256, resource = this /mcp); continues on the consent page",
      parameters: [
        "response_type",
        "client_id",
        "redirect_uri",
        "code_challenge",
        "code_challenge_method",
        "resource",
        "state",
        "scope",
      ].map((name) => ({
        name,
        in: "query",
        required: !["state", "scope", "redirect_uri"].includes(name),
        schema: str,
      })),
      responses: {
        "302": {
          description:
            "To the consent page, or back to the client's checked redirect URI with an error",
        },
        "400": {
          description:
            "Unknown client or a redirect URI not registered exactly: a page, never a redirect",
          content: { "text/html": {} },
        },
      },
    },
  },
  "/oauth/token": {
    post: {
      operationId: "token",
      security: [],
      summary:
        "A code (with its code_verifier) or a refresh token for an access and a new refresh token",
      requestBody: {
        required: true,
        content: {
          "application/x-www-form-urlencoded": {
            schema: { $ref: "#/components/schemas/TokenRequest" },
          },
        },
      },
      responses: {
        "200": {
          description: "Tokens (the refresh token given is spent)",
          content: json("#/components/schemas/TokenResponse"),
        },
        "400": oauthErr(
          "invalid_grant (a spent, wrong or expired code or refresh token; a reused one revokes its grant), invalid_target, invalid_request",
        ),
        "429": oauthErr("Too many failed requests from this address"),
      },
    },
  },
  "/oauth/register": {
    post: {
      operationId: "registerClient",
      security: [],
      summary:
        "RFC 7591 dynamic registration of a public client (for clients without a metadata document)",
      requestBody: jsonBody({ $ref: "#/components/schemas/ClientMetadata" }),
      responses: {
        "201": { description: "The client", content: json("#/components/schemas/ClientMetadata") },
        "400": oauthErr("invalid_redirect_uri or invalid_client_metadata"),
        "429": oauthErr("Too many registrations from this address"),
      },
    },
  },
  "/v1/console/session": {
    post: {
      operationId: "signIn",
      security: [],
      summary: "Sign in as a console user: sets the session cookie, returns its CSRF token",
      requestBody: jsonBody({
        type: "object",
        required: ["name", "password"],
        properties: { name: str, password: str },
      }),
      responses: {
        "200": { description: "Signed in", content: json("#/components/schemas/ConsoleSession") },
        "401": err("Wrong user or password"),
        "429": err("The account is locked, or this address tried too many wrong passwords"),
      },
    },
    get: {
      operationId: "session",
      security: console_,
      summary: "Who is signed in, and the session's CSRF token",
      responses: {
        "200": { description: "The session", content: json("#/components/schemas/ConsoleSession") },
        "401": err("Not signed in"),
      },
    },
    delete: {
      operationId: "signOut",
      security: consoleWrite,
      summary: "Sign out",
      responses: {
        "200": { description: "Signed out" },
        "401": err("Not signed in"),
        "403": err("X-CSRF-Token missing or wrong"),
      },
    },
  },
  "/v1/console/keys": {
    get: {
      operationId: "consoleKeys",
      security: console_,
      summary:
        "The active API keys this user may act as (an admin: all; a member: their own); with state=all, their revoked and expired keys too",
      parameters: [
        {
          name: "state",
          in: "query",
          required: false,
          schema: { enum: ["active", "all"] },
          description: "all: revoked and expired keys too (default: active only)",
        },
      ],
      responses: {
        "200": {
          description: "Keys (never the secret)",
          content: json("#/components/schemas/ConsoleKeys"),
        },
        "401": err("Not signed in"),
      },
    },
  },
  "/v1/console/grants": {
    get: {
      operationId: "consoleGrants",
      security: console_,
      summary: "The OAuth grants of the keys this user may see",
      responses: {
        "200": { description: "Grants", content: json("#/components/schemas/Grants") },
        "401": err("Not signed in"),
      },
    },
  },
  "/v1/console/grants/{grant_id}": {
    delete: {
      operationId: "revokeGrant",
      security: consoleWrite,
      summary: "Revoke a grant: its tokens stop at their next use",
      parameters: [idParam("grant_id")],
      responses: {
        "200": { description: "Revoked" },
        "401": err("Not signed in"),
        "403": err("X-CSRF-Token missing or wrong"),
        "404": err("No grant of this user's keys has this id"),
      },
    },
  },
  "/v1/oauth/requests/{request_id}": {
    get: {
      operationId: "authorizationRequest",
      security: console_,
      summary: "A pending authorization request: what the consent page shows",
      parameters: [idParam("request_id")],
      responses: {
        "200": {
          description: "The request",
          content: json("#/components/schemas/AuthorizationRequest"),
        },
        "401": err("Not signed in"),
        "404": err("Expired, decided or unknown"),
      },
    },
    post: {
      operationId: "decideAuthorizationRequest",
      security: consoleWrite,
      summary: "Approve (for one of this user's keys) or deny; returns where to send the browser",
      parameters: [idParam("request_id")],
      requestBody: jsonBody({
        type: "object",
        required: ["decision"],
        properties: { decision: { enum: ["approve", "deny"] }, key_id: str },
      }),
      responses: {
        "200": {
          description: "The client's redirect URI with the code (or access_denied), state and iss",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["redirect_to"],
                properties: { redirect_to: str },
              },
            },
          },
        },
        "400": err("Expired or decided already, or no decision"),
        "401": err("Not signed in"),
        "403": err("X-CSRF-Token missing or wrong, or key_id is not this user's"),
      },
    },
  },
} as const;

export const AUTH_SCHEMES = {
  consoleSession: {
    type: "apiKey",
    in: "cookie",
    name: "scratchrun_session",
    description:
      "The console session (named __Host-scratchrun_session when the service is behind TLS)",
  },
  csrfToken: {
    type: "apiKey",
    in: "header",
    name: "X-CSRF-Token",
    description: "The session's csrf_token",
  },
  oauth: {
    type: "oauth2",
    description: "/mcp also takes an OAuth access token for its resource (the key the grant names)",
    flows: {
      authorizationCode: {
        authorizationUrl: "/oauth/authorize",
        tokenUrl: "/oauth/token",
        refreshUrl: "/oauth/token",
        scopes: { "scratchrun:exec": "Run code as the approved API key" },
      },
    },
  },
} as const;

const strings = { type: "array", items: str };

export const AUTH_SCHEMAS = {
  ProtectedResourceMetadata: {
    type: "object",
    required: ["resource", "authorization_servers"],
    properties: {
      resource: str,
      authorization_servers: strings,
      bearer_methods_supported: strings,
      scopes_supported: strings,
      resource_name: str,
    },
  },
  AuthorizationServerMetadata: {
    type: "object",
    required: [
      "issuer",
      "authorization_endpoint",
      "token_endpoint",
      "response_types_supported",
      "code_challenge_methods_supported",
    ],
    properties: {
      issuer: str,
      authorization_endpoint: str,
      token_endpoint: str,
      registration_endpoint: str,
      response_types_supported: strings,
      response_modes_supported: strings,
      grant_types_supported: strings,
      code_challenge_methods_supported: strings,
      token_endpoint_auth_methods_supported: strings,
      scopes_supported: strings,
      client_id_metadata_document_supported: { type: "boolean" },
      authorization_response_iss_parameter_supported: { type: "boolean" },
    },
  },
  TokenRequest: {
    type: "object",
    required: ["grant_type", "client_id"],
    properties: {
      grant_type: { enum: ["authorization_code", "refresh_token"] },
      client_id: str,
      code: str,
      code_verifier: str,
      redirect_uri: str,
      refresh_token: str,
      resource: str,
    },
  },
  TokenResponse: {
    type: "object",
    required: ["access_token", "token_type", "expires_in", "refresh_token"],
    properties: {
      access_token: str,
      token_type: { const: "Bearer" },
      expires_in: int,
      refresh_token: str,
      scope: str,
    },
  },
  OAuthError: {
    type: "object",
    required: ["error"],
    properties: { error: str, error_description: str },
  },
  ClientMetadata: {
    type: "object",
    required: ["redirect_uris"],
    properties: {
      client_id: str,
      client_id_issued_at: int,
      client_name: str,
      redirect_uris: strings,
      grant_types: strings,
      response_types: strings,
      token_endpoint_auth_method: { const: "none" },
    },
  },
  ConsoleSession: {
    type: "object",
    required: ["user", "csrf_token", "expires_at"],
    properties: {
      user: {
        type: "object",
        required: ["id", "name", "role"],
        properties: { id: str, name: str, role: { enum: ["admin", "member"] } },
      },
      csrf_token: str,
      expires_at: int,
      server_url: {
        ...str,
        description: "GET only: this server's URL as its clients reach it (SCRATCHRUN_PUBLIC_URL)",
      },
      key_ceiling: {
        type: ["object", "null"],
        description:
          "GET only: the most this user's keys may be given while they are a member (a key policy's fields; null: the server's settings)",
      },
      limits: {
        type: "object",
        required: ["server", "yours"],
        description:
          "GET only: what a key with no policy gets on this server (`server`), and the most this user may give a key (`yours`: their key ceiling over the server's; null for an admin, who is held to none), each as a key policy's fields: runtimes, networks, egress_allow (null: every public domain), max_timeout_ms, max_memory_mb, concurrency, rate_per_minute",
        properties: {
          server: { type: "object" },
          yours: { type: ["object", "null"] },
        },
      },
    },
  },
  ConsoleKeys: {
    type: "object",
    required: ["keys"],
    properties: {
      keys: {
        type: "array",
        items: {
          type: "object",
          required: ["id", "name"],
          properties: {
            id: str,
            name: str,
            owner_id: nullable("string"),
            created_at: int,
            last_used_at: nullable("integer"),
            policy: nullable("object"),
            revoked_at: nullable("integer"),
            expires_at: {
              ...nullable("integer"),
              description: "When it stops working; null: never",
            },
          },
        },
      },
    },
  },
  Grants: {
    type: "object",
    required: ["grants"],
    properties: {
      grants: {
        type: "array",
        items: {
          type: "object",
          required: ["id", "key_id", "client_id"],
          properties: {
            id: str,
            key_id: str,
            client_id: str,
            client_name: str,
            resource: str,
            scope: str,
            created_at: int,
            revoked_at: nullable("integer"),
            revoked_reason: nullable("string"),
          },
        },
      },
    },
  },
  AuthorizationRequest: {
    type: "object",
    required: ["id", "client_id", "client_name", "redirect_uri"],
    properties: {
      id: str,
      client_id: str,
      client_name: str,
      redirect_uri: str,
      scope: str,
      resource: str,
      expires_at: int,
    },
  },
} as const;
