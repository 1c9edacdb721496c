// The OAuth and console checks that are pure functions, against hostile input: PKCE, redirect
// URIs, local paths, metadata-document client ids and documents, addresses, HTML escaping,
// cookies and page headers.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, test } from "node:test";
import fc from "fast-check";
import { addressAllowed, parseClientMetadata } from "../../src/oauth/client-metadata.js";
import { checkChallenge, verifierMatches } from "../../src/oauth/pkce.js";
import {
  checkRedirectUri,
  isLocalPath,
  isMetadataClientId,
  redirectAllowed,
  withParams,
} from "../../src/oauth/uris.js";
import { escapeHtml, formTargetOf, pageHeaders } from "../../src/console/pages.js";
import { parseCookies, setCookie } from "../../src/console/cookies.js";
import {
  authorizationServerMetadata,
  bearerChallenge,
  oauthConfig,
} from "../../src/oauth/authorization.js";
import { METADATA_FETCH } from "../../src/oauth/client-metadata.js";

const s256 = (v: string) => createHash("sha256").update(v).digest("base64url");
const verifierArb = fc
  .stringMatching(/^[A-Za-z0-9._~-]{43,128}$/)
  .filter((v) => v.length >= 43 && v.length <= 128);

describe("PKCE (S256 only)", () => {
  test("a verifier matches its own challenge and no other (property)", () => {
    fc.assert(
      fc.property(verifierArb, verifierArb, (a, b) => {
        assert.equal(verifierMatches(a, s256(a)), true);
        if (a !== b) assert.equal(verifierMatches(b, s256(a)), false);
      }),
    );
  });
  test("plain, missing, odd methods and malformed challenges are refused", () => {
    const c = s256("x".repeat(43));
    assert.equal(checkChallenge(c, "S256").ok, true);
    for (const m of [undefined, "plain", "s256", "S256 ", "S512", ""])
      assert.equal(checkChallenge(c, m).ok, false, String(m));
    for (const bad of [undefined, "", "short", `${c}=`, c.slice(1), `${c}A`, c.replace(/.$/, "+")])
      assert.equal(checkChallenge(bad, "S256").ok, false, String(bad));
  });
  test("the verifier itself as challenge (a plain downgrade) does not verify", () => {
    const v = "v".repeat(43);
    assert.equal(verifierMatches(v, v), false);
    assert.equal(verifierMatches(undefined, s256(v)), false);
    assert.equal(verifierMatches("short", s256("short")), false, "under 43 characters");
    assert.equal(verifierMatches("v".repeat(129), s256("v".repeat(129))), false, "over 128");
  });
});

describe("redirect URIs", () => {
  test("accepted: https anywhere, http on loopback, private-use schemes", () => {
    for (const ok of [
      "https://client.example/cb",
      "https://client.example:8443/a/b?x=1",
      "http://127.0.0.1:33418/callback",
      "http://localhost:9/cb",
      "http://[::1]:80/cb",
      "com.example.app:/oauth",
    ])
      assert.equal(checkRedirectUri(ok).ok, true, ok);
  });
  test("refused: script and data schemes, remote http, fragments, user info, relative, huge", () => {
    for (const bad of [
      "javascript:alert(1)",
      "JaVaScRiPt:alert(1)",
      "data:text/html,<script>",
      "vbscript:x",
      "file:///etc/passwd",
      "http://evil.example/cb",
      "http://127.0.0.1.evil.example/cb",
      "http://localhost.evil.example/cb",
      "https://a.example/cb#x",
      "https://a.example/cb#",
      "https://user:pw@a.example/cb",
      "https://user@a.example/cb",
      "/relative",
      "//evil.example/cb",
      "",
      `https://a.example/${"x".repeat(2000)}`,
      42,
      null,
    ])
      assert.equal(checkRedirectUri(bad).ok, false, String(bad));
  });
  test("matching is exact: case, trailing slash, port, query, percent-encoding all differ", () => {
    const reg = ["https://a.example/cb", "http://127.0.0.1:9/callback"];
    assert.equal(redirectAllowed("https://a.example/cb", reg), true);
    for (const v of [
      "https://A.example/cb",
      "https://a.example/cb/",
      "https://a.example/CB",
      "https://a.example:443/cb",
      "https://a.example/cb?x",
      "https://a.example/c%62",
      "http://127.0.0.1:10/callback",
      "http://localhost:9/callback",
      " https://a.example/cb",
    ])
      assert.equal(redirectAllowed(v, reg), false, v);
  });
  test("withParams keeps the client's own query and adds ours, encoded", () => {
    const to = new URL(
      withParams("https://a.example/cb?keep=1", { code: "a&b=c", state: null, iss: "https://sr" }),
    );
    assert.equal(to.searchParams.get("keep"), "1");
    assert.equal(to.searchParams.get("code"), "a&b=c");
    assert.equal(to.searchParams.has("state"), false);
    assert.equal(to.origin + to.pathname, "https://a.example/cb");
  });
});

describe("sign-in's next= stays on this origin", () => {
  test("local paths pass; every way to name another host fails (property: what passes resolves here)", () => {
    for (const ok of ["/console", "/oauth/consent?request=abc", "/%2F%2Fx"])
      assert.equal(isLocalPath(ok), true, ok);
    for (const bad of [
      "//evil.example",
      "/\\evil.example",
      "\\\\evil",
      "https://evil.example",
      "javascript:x",
      "",
      "console",
      "/a b",
      "/\t/evil",
      "/\\/evil",
    ])
      assert.equal(isLocalPath(bad), false, JSON.stringify(bad));
    fc.assert(
      fc.property(fc.string(), (s) => {
        if (isLocalPath(s))
          assert.equal(new URL(s, "https://sr.example").origin, "https://sr.example", s);
      }),
      { numRuns: 5000 },
    );
  });
});

describe("client ID metadata documents", () => {
  test("the client_id is an https URL with a path, no fragment, user info or dot segments", () => {
    assert.equal(isMetadataClientId("https://client.example/oauth/client.json"), true);
    for (const bad of [
      "http://client.example/c.json",
      "https://client.example",
      "https://client.example/",
      "https://client.example/c.json#x",
      "https://u@client.example/c.json",
      "https://client.example/a/../c.json",
      "https://client.example/./c.json",
      "HTTPS://client.example/c.json",
      "src_abcdef",
    ])
      assert.equal(isMetadataClientId(bad), false, bad);
  });
  test("a document must name itself, be a public client and list good redirect URIs", () => {
    const id = "https://c.example/c.json";
    const ok = parseClientMetadata(id, {
      client_id: id,
      client_name: "C",
      redirect_uris: ["https://c.example/cb"],
    });
    assert.equal(ok.ok, true);
    for (const [doc, why] of [
      [null, "null"],
      [[], "array"],
      [
        { client_id: "https://other.example/c.json", redirect_uris: ["https://c.example/cb"] },
        "another id",
      ],
      [{ client_id: id, redirect_uris: [] }, "no URIs"],
      [{ client_id: id, redirect_uris: ["javascript:x"] }, "bad URI"],
      [
        {
          client_id: id,
          redirect_uris: ["https://c.example/cb"],
          token_endpoint_auth_method: "private_key_jwt",
        },
        "confidential",
      ],
      [{ client_id: id, redirect_uris: ["https://c.example/cb"], client_secret: "s" }, "a secret"],
      [
        { client_id: id, redirect_uris: ["https://c.example/cb"], client_name: "x".repeat(101) },
        "long name",
      ],
      [{ client_id: id, redirect_uris: Array(21).fill("https://c.example/cb") }, "too many URIs"],
    ] as const)
      assert.equal(parseClientMetadata(id, doc).ok, false, why);
  });
  test("addresses: public only; loopback only with the test option; never private, link-local or metadata", () => {
    assert.equal(addressAllowed("93.184.216.34", false), true);
    assert.equal(addressAllowed("2606:2800:220:1::1", false), true);
    for (const a of [
      "127.0.0.1",
      "::1",
      "10.1.2.3",
      "192.168.0.1",
      "172.16.0.1",
      "169.254.169.254",
      "::ffff:169.254.169.254",
      "fe80::1",
      "fc00::1",
      "0.0.0.0",
      "100.64.0.1",
      "not-an-ip",
    ])
      assert.equal(addressAllowed(a, false), false, a);
    assert.equal(addressAllowed("127.0.0.1", true), true);
    assert.equal(addressAllowed("::1", true), true);
    for (const a of ["10.1.2.3", "169.254.169.254", "::ffff:10.0.0.1"])
      assert.equal(addressAllowed(a, true), false, `${a} even in tests`);
    assert.equal(METADATA_FETCH.allowLoopback, false, "off by default");
  });
});

describe("pages, cookies and metadata", () => {
  test("escapeHtml leaves no markup (property)", () => {
    fc.assert(
      fc.property(fc.string(), (s) => {
        const e = escapeHtml(s);
        assert.doesNotMatch(e, /[<>"']/);
        assert.equal(
          e
            .replace(/&lt;/g, "<")
            .replace(/&gt;/g, ">")
            .replace(/&quot;/g, '"')
            .replace(/&#39;/g, "'")
            .replace(/&amp;/g, "&"),
          s,
        );
      }),
    );
  });
  test("page headers: no script, no framing; form-action adds only the given target", () => {
    const h = pageHeaders([formTargetOf("https://c.example/cb?x=1")]);
    assert.match(
      h["Content-Security-Policy"]!,
      /^default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self' https:\/\/c\.example; frame-ancestors 'none'; base-uri 'none'$/,
    );
    assert.equal(formTargetOf("com.example.app:/cb"), "com.example.app:");
    assert.equal(h["X-Frame-Options"], "DENY");
  });
  test("cookies: the first of a name wins; Secure and __Host- only behind TLS", () => {
    assert.equal(parseCookies("a=1; a=2; b = 3").get("a"), "1");
    assert.equal(parseCookies("a=1; b = 3").get("b"), "3");
    assert.equal(parseCookies(undefined).size, 0);
    assert.match(
      setCookie("__Host-x", "v", { secure: true, maxAgeS: 5, sameSite: "Lax" }),
      /^__Host-x=v; Path=\/; HttpOnly; SameSite=Lax; Max-Age=5; Secure$/,
    );
    assert.doesNotMatch(
      setCookie("x", "v", { secure: false, maxAgeS: 5, sameSite: "Lax" }),
      /Secure/,
    );
  });
  test("the issuer has no trailing slash; the challenge names the path-suffixed metadata", () => {
    const c = oauthConfig("https://sr.example/", METADATA_FETCH);
    assert.equal(c.issuer, "https://sr.example");
    assert.equal(c.resource, "https://sr.example/mcp");
    assert.equal(authorizationServerMetadata(c).issuer, "https://sr.example");
    assert.equal(
      bearerChallenge(c, "invalid_token"),
      'Bearer realm="scratchrun", resource_metadata="https://sr.example/.well-known/oauth-protected-resource/mcp", error="invalid_token"',
    );
  });
});
