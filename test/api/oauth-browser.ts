/**
 * What a person's browser does in the OAuth flow, with fetch: a cookie jar, redirects followed
 * by hand (so each hop can be seen), forms read from the server's HTML and posted back as a
 * browser posts them (application/x-www-form-urlencoded, Origin of the page).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { OAuthClientProvider } from "@modelcontextprotocol/sdk/client/auth.js";
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from "@modelcontextprotocol/sdk/shared/auth.js";
import type { UserStore } from "../../src/store/users.js";

export class Browser {
  readonly jar = new Map<string, string>();
  /** Every URL the browser was sent to, in order (none may carry a token). */
  readonly visited: string[] = [];

  constructor(readonly origin: string) {}

  private remember(res: Response): void {
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(";");
      const i = pair!.indexOf("=");
      const name = pair!.slice(0, i);
      const value = pair!.slice(i + 1);
      if (/Max-Age=0/i.test(line)) this.jar.delete(name);
      else this.jar.set(name, value);
    }
  }

  private cookie(): string {
    return [...this.jar].map(([k, v]) => `${k}=${v}`).join("; ");
  }

  async get(url: string): Promise<Response> {
    this.visited.push(url);
    const res = await fetch(new URL(url, this.origin), {
      redirect: "manual",
      headers: { cookie: this.cookie() },
    });
    this.remember(res);
    return res;
  }

  async post(url: string, fields: Record<string, string>): Promise<Response> {
    const res = await fetch(new URL(url, this.origin), {
      method: "POST",
      redirect: "manual",
      headers: {
        cookie: this.cookie(),
        "content-type": "application/x-www-form-urlencoded",
        origin: this.origin,
      },
      body: new URLSearchParams(fields).toString(),
    });
    this.remember(res);
    return res;
  }

  /** Follows redirects on this server; stops at the first page, or a redirect elsewhere. */
  async follow(url: string): Promise<{ res: Response; url: string }> {
    let res = await this.get(url);
    while (res.status >= 300 && res.status < 400) {
      const to = new URL(
        res.headers.get("location")!,
        url.startsWith("http") ? url : this.origin + url,
      );
      if (to.origin !== this.origin) return { res, url: to.toString() };
      url = to.toString();
      res = await this.get(url);
    }
    return { res, url };
  }
}

/** The hidden inputs and the select's options of the first form in a page. */
export function formOf(html: string): {
  action: string;
  fields: Record<string, string>;
  options: string[];
} {
  const action = /<form[^>]*action="([^"]+)"/.exec(html)?.[1] ?? "";
  const fields: Record<string, string> = {};
  for (const m of html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g))
    fields[m[1]!] = m[2]!
      .replace(/&amp;/g, "&")
      .replace(/&quot;/g, '"')
      .replace(/&#39;/g, "'");
  const options = [...html.matchAll(/<option value="([^"]+)"/g)].map((m) => m[1]!);
  return { action, fields, options };
}

/**
 * Signs in and decides on the consent page an authorization URL leads to. Returns where the
 * browser is sent back to (the client's redirect URI with the code, or an error).
 */
export async function consent(
  b: Browser,
  authorizationUrl: string,
  user: { name: string; password: string },
  decision: "approve" | "deny" = "approve",
  keyId?: string,
): Promise<URL> {
  let at = await b.follow(authorizationUrl);
  if (at.url.includes("/console/signin")) {
    const form = formOf(await at.res.text());
    const signed = await b.post("/console/signin", {
      ...form.fields,
      name: user.name,
      password: user.password,
    });
    if (signed.status !== 303)
      throw new Error(`sign-in answered ${signed.status}: ${await signed.text()}`);
    at = await b.follow(signed.headers.get("location")!);
  }
  if (at.res.status !== 200)
    throw new Error(`consent page ${at.res.status}: ${await at.res.text()}`);
  const form = formOf(await at.res.text());
  const res = await b.post("/oauth/consent", {
    ...form.fields,
    decision,
    ...(decision === "approve" ? { key_id: keyId ?? form.options[0]! } : {}),
  });
  if (res.status !== 303) throw new Error(`consent answered ${res.status}: ${await res.text()}`);
  return new URL(res.headers.get("location")!);
}

export async function makeUser(
  users: UserStore,
  name: string,
  role: "admin" | "member" = "member",
): Promise<{ id: string; name: string; password: string }> {
  const password = `pw-${name}-correct-horse`;
  const u = await users.create(name, role, password);
  return { id: u.id, name, password };
}

/**
 * An https server on 127.0.0.1 with a fresh self-signed certificate, serving the JSON documents
 * given by path: a client's own client ID metadata document host.
 */
export async function startDocumentHost(
  docs: Map<string, () => { status?: number; type?: string; body: string }>,
): Promise<{ origin: string; ca: Buffer; server: Server; close(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), "sr-cimd-"));
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-keyout",
      join(dir, "key.pem"),
      "-out",
      join(dir, "cert.pem"),
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
    ],
    { stdio: "ignore" },
  );
  const cert = readFileSync(join(dir, "cert.pem"));
  const key = readFileSync(join(dir, "key.pem"));
  rmSync(dir, { recursive: true, force: true });
  const server = createServer({ cert, key }, (req, res) => {
    const doc = docs.get(req.url ?? "");
    if (!doc) {
      res.writeHead(404).end();
      return;
    }
    const d = doc();
    res.writeHead(d.status ?? 200, { "content-type": d.type ?? "application/json" }).end(d.body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as { port: number }).port;
  return {
    origin: `https://127.0.0.1:${port}`,
    ca: cert,
    server,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** The SDK's provider interface, kept in memory as a client would keep it on disk. */
export class MemoryProvider implements OAuthClientProvider {
  info: OAuthClientInformationMixed | undefined;
  saved: OAuthTokens | undefined;
  verifier = "";
  authUrl: URL | undefined;
  clientMetadataUrl: string | undefined;
  constructor(
    readonly name: string,
    readonly redirect: string,
  ) {}
  get redirectUrl() {
    return this.redirect;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: this.name,
      redirect_uris: [this.redirect],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() {
    return "state-123";
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(i: OAuthClientInformationMixed) {
    this.info = i;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(t: OAuthTokens) {
    this.saved = t;
  }
  redirectToAuthorization(url: URL) {
    this.authUrl = url;
  }
  saveCodeVerifier(v: string) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
}
