/**
 * A local OIDC issuer for tests, on 127.0.0.1: discovery, a JWKS, an authorization endpoint that
 * signs in whoever `subject` says (no login page: the person at the issuer is the test), and a
 * token endpoint that redeems its codes once, checking client, redirect URI, PKCE (S256) and,
 * for a confidential client, its secret. It signs real JWTs (ES256 or RS256) with keys it can
 * rotate, and `sign` makes any token a test wants, forged ones included.
 */
import {
  createHash,
  createHmac,
  generateKeyPairSync,
  randomBytes,
  sign as cryptoSign,
  type KeyObject,
} from "node:crypto";
import { createServer, type Server } from "node:http";

export interface IssuerKey {
  kid: string;
  alg: "ES256" | "RS256";
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export function makeKey(alg: "ES256" | "RS256", kid = randomBytes(6).toString("hex")): IssuerKey {
  const pair =
    alg === "ES256"
      ? generateKeyPairSync("ec", { namedCurve: "P-256" })
      : generateKeyPairSync("rsa", { modulusLength: 2048 });
  return { kid, alg, ...pair };
}

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");

/** A compact JWS over `payload` with `key`, the header as given (forgeries welcome). */
export function signJwt(
  payload: Record<string, unknown>,
  key: IssuerKey,
  header: Record<string, unknown> = { alg: key.alg, kid: key.kid, typ: "JWT" },
): string {
  const data = `${b64(header)}.${b64(payload)}`;
  const sig = cryptoSign(
    "sha256",
    Buffer.from(data),
    key.alg === "ES256" ? { key: key.privateKey, dsaEncoding: "ieee-p1363" } : key.privateKey,
  );
  return `${data}.${sig.toString("base64url")}`;
}

/** An HS256 token keyed with `secret` (the classic attack: the issuer's public key as secret). */
export function signHs256(payload: Record<string, unknown>, secret: Buffer, kid?: string): string {
  const data = `${b64({ alg: "HS256", typ: "JWT", ...(kid ? { kid } : {}) })}.${b64(payload)}`;
  return `${data}.${createHmac("sha256", secret).update(data).digest("base64url")}`;
}

interface Pending {
  clientId: string;
  redirectUri: string;
  challenge: string;
  nonce: string;
  subject: string;
  used: boolean;
}

export class TestIssuer {
  url = "";
  /** Who is signed in at the issuer: the `sub` of the next code's ID token. */
  subject = "person-1";
  /** Published keys; the first one signs. */
  keys: IssuerKey[] = [makeKey("ES256")];
  /** The ID token's nonce, overridden (a replayed or foreign token). */
  nonceOverride: string | undefined;
  /** The ID token's audience, overridden (a token minted for another client). */
  idAudience: string | undefined;
  /** Every path requested, in order. */
  readonly requests: string[] = [];
  private readonly codes = new Map<string, Pending>();
  private server!: Server;

  private constructor(
    readonly clientId: string,
    readonly clientSecret?: string,
  ) {}

  static async start(clientId: string, clientSecret?: string): Promise<TestIssuer> {
    const t = new TestIssuer(clientId, clientSecret);
    t.server = createServer((req, res) => void t.handle(req, res));
    await new Promise<void>((r) => t.server.listen(0, "127.0.0.1", r));
    const addr = t.server.address();
    t.url = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
    return t;
  }

  get signer(): IssuerKey {
    return this.keys[0]!;
  }

  /** A token signed by the current key, with standard claims (overridable, or removed by undefined). */
  token(claims: Record<string, unknown>, key = this.signer): string {
    const now = Math.floor(Date.now() / 1000);
    const payload: Record<string, unknown> = {
      iss: this.url,
      iat: now,
      exp: now + 300,
      ...claims,
    };
    for (const k of Object.keys(payload)) if (payload[k] === undefined) delete payload[k];
    return signJwt(payload, key);
  }

  /** A new signing key replaces the old one in the JWKS. */
  rotate(alg: "ES256" | "RS256" = "ES256"): IssuerKey {
    this.keys = [makeKey(alg)];
    return this.signer;
  }

  private jwks() {
    return {
      keys: this.keys.map((k) => ({
        ...k.publicKey.export({ format: "jwk" }),
        kid: k.kid,
        alg: k.alg,
        use: "sig",
      })),
    };
  }

  private send(res: import("node:http").ServerResponse, status: number, body: unknown) {
    res.writeHead(status, { "Content-Type": "application/json" });
    res.end(JSON.stringify(body));
  }

  private async handle(
    req: import("node:http").IncomingMessage,
    res: import("node:http").ServerResponse,
  ) {
    const u = new URL(req.url ?? "/", this.url);
    this.requests.push(u.pathname);
    if (u.pathname === "/.well-known/openid-configuration")
      return this.send(res, 200, {
        issuer: this.url,
        authorization_endpoint: `${this.url}/authorize`,
        token_endpoint: `${this.url}/token`,
        jwks_uri: `${this.url}/jwks`,
        response_types_supported: ["code"],
        subject_types_supported: ["public"],
        id_token_signing_alg_values_supported: ["ES256", "RS256"],
        code_challenge_methods_supported: ["S256"],
      });
    if (u.pathname === "/jwks") return this.send(res, 200, this.jwks());
    if (u.pathname === "/authorize") {
      const p = u.searchParams;
      if (p.get("client_id") !== this.clientId || p.get("code_challenge_method") !== "S256")
        return this.send(res, 400, { error: "invalid_request" });
      const code = randomBytes(16).toString("base64url");
      this.codes.set(code, {
        clientId: this.clientId,
        redirectUri: p.get("redirect_uri") ?? "",
        challenge: p.get("code_challenge") ?? "",
        nonce: p.get("nonce") ?? "",
        subject: this.subject,
        used: false,
      });
      const back = new URL(p.get("redirect_uri") ?? "");
      back.searchParams.set("code", code);
      back.searchParams.set("state", p.get("state") ?? "");
      res.writeHead(302, { Location: back.toString() });
      return res.end();
    }
    if (u.pathname === "/token" && req.method === "POST") {
      let text = "";
      for await (const c of req) text += String(c);
      const f = new URLSearchParams(text);
      if (this.clientSecret !== undefined) {
        const want = `Basic ${Buffer.from(`${this.clientId}:${this.clientSecret}`).toString("base64")}`;
        if (req.headers.authorization !== want)
          return this.send(res, 401, { error: "invalid_client" });
      }
      const pending = this.codes.get(f.get("code") ?? "");
      const verifier = f.get("code_verifier") ?? "";
      if (
        !pending ||
        pending.used ||
        pending.clientId !== f.get("client_id") ||
        pending.redirectUri !== f.get("redirect_uri") ||
        createHash("sha256").update(verifier).digest("base64url") !== pending.challenge
      ) {
        if (pending) pending.used = true;
        return this.send(res, 400, { error: "invalid_grant" });
      }
      pending.used = true;
      return this.send(res, 200, {
        token_type: "Bearer",
        access_token: randomBytes(16).toString("hex"),
        id_token: this.token({
          sub: pending.subject,
          aud: this.idAudience ?? this.clientId,
          nonce: this.nonceOverride ?? pending.nonce,
        }),
      });
    }
    this.send(res, 404, { error: "not_found" });
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}
