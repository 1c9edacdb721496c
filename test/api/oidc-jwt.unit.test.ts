// The JWT check of a trusted OIDC issuer's tokens (SEC-OIDC-JWT): every forgery and misuse a
// resource server meets is refused, each for its own reason, and a good token passes.
import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { describe, test } from "node:test";
import { trustedIssuerFromEnv } from "../../src/cli/serve.js";
import { looksLikeJwt, verifyJwt, type Jwk } from "../../src/oauth/jwt.js";
import { makeKey, signHs256, signJwt, type IssuerKey } from "../helpers/oidc-issuer.js";

const ISS = "https://idp.example.com";
const AUD = "https://sr.example.com/mcp";
const NOW = 1_800_000_000;
const es = makeKey("ES256", "es-1");
const rs = makeKey("RS256", "rs-1");
const jwk = (k: IssuerKey): Jwk => ({
  ...k.publicKey.export({ format: "jwk" }),
  kid: k.kid,
  alg: k.alg,
  use: "sig",
});
const KEYS = [jwk(es), jwk(rs)];
const claims = (over: Record<string, unknown> = {}) => {
  const c: Record<string, unknown> = {
    iss: ISS,
    aud: AUD,
    sub: "agent-1",
    iat: NOW - 10,
    exp: NOW + 300,
    ...over,
  };
  for (const k of Object.keys(c)) if (c[k] === undefined) delete c[k];
  return c;
};
const check = (token: string, keys: Jwk[] = KEYS) =>
  verifyJwt(token, { issuer: ISS, audience: AUD, keys, nowS: NOW });
const refused = (token: string, why: RegExp, keys?: Jwk[]) => {
  const r = check(token, keys);
  assert.equal(r.ok, false, "refused");
  if (!r.ok) assert.match(r.reason, why);
};

describe("trusted issuer's JWTs", () => {
  test("an ES256 and an RS256 token for this audience pass, with their subject", () => {
    for (const k of [es, rs]) {
      const r = check(signJwt(claims(), k));
      assert.ok(r.ok, JSON.stringify(r));
      assert.equal(r.ok && r.claims.sub, "agent-1");
    }
    // aud may be a list that includes ours.
    assert.ok(check(signJwt(claims({ aud: ["other", AUD] }), es)).ok);
  });

  test("alg none, and an unsigned token, are refused", () => {
    const body = Buffer.from(JSON.stringify(claims())).toString("base64url");
    const none = Buffer.from(JSON.stringify({ alg: "none" })).toString("base64url");
    refused(`${none}.${body}.AAAA`, /alg "none" is not accepted/);
    assert.equal(looksLikeJwt(`${none}.${body}.`), false);
    refused(`${none}.${body}.`, /not a signed JWT/);
  });

  test("HS256 keyed with the issuer's public key (the algorithm-confusion attack) is refused", () => {
    const pem = rs.publicKey.export({ format: "pem", type: "spki" });
    refused(signHs256(claims(), Buffer.from(pem), rs.kid), /alg "HS256" is not accepted/);
  });

  test("an RS256 header on an EC key, and ES256 on an RSA key, find no key", () => {
    const r = check(signJwt(claims(), es, { alg: "RS256", kid: es.kid }));
    assert.equal(r.ok, false);
    assert.equal(!r.ok && r.unknownKey, true);
    refused(signJwt(claims(), rs, { alg: "ES256", kid: rs.kid }), /no published key/);
  });

  test("a key the issuer never published, even under a published kid, is refused", () => {
    const attacker = makeKey("ES256", es.kid);
    refused(signJwt(claims(), attacker), /signature does not verify/);
    const unknown = check(signJwt(claims(), makeKey("ES256", "not-published")));
    assert.equal(!unknown.ok && unknown.unknownKey, true, "an unknown kid may be a rotation");
  });

  test("a header carrying its own key (jwk, jku, x5u) gains nothing", () => {
    const attacker = makeKey("ES256", "mine");
    const own = { ...attacker.publicKey.export({ format: "jwk" }), kid: "mine" };
    refused(
      signJwt(claims(), attacker, { alg: "ES256", kid: "mine", jwk: own }),
      /no published key/,
    );
    refused(
      // No kid: the issuer's sole EC key is the one, and the attacker's signature fails it.
      signJwt(claims(), attacker, { alg: "ES256", jku: "https://evil.example/jwks" }),
      /signature does not verify/,
    );
  });

  test("without a kid only a sole key for the algorithm is used", () => {
    assert.ok(check(signJwt(claims(), es, { alg: "ES256" })).ok, "one EC key published");
    const two = [...KEYS, jwk(makeKey("ES256", "es-2"))];
    refused(signJwt(claims(), es, { alg: "ES256" }), /no published key/, two);
  });

  test("a payload changed after signing is refused", () => {
    const [h, , s] = signJwt(claims(), es).split(".");
    const forged = Buffer.from(JSON.stringify(claims({ sub: "admin" }))).toString("base64url");
    refused(`${h}.${forged}.${s}`, /signature does not verify/);
  });

  test("another issuer, another audience, no audience are refused", () => {
    refused(signJwt(claims({ iss: "https://evil.example.com" }), es), /iss is not/);
    refused(signJwt(claims({ iss: `${ISS}/` }), es), /iss is not/);
    refused(signJwt(claims({ aud: "https://sr.example.com/other" }), es), /not for this audience/);
    refused(signJwt(claims({ aud: undefined }), es), /not for this audience/);
  });

  test("expired, not yet valid, issued in the future, no exp, no sub are refused", () => {
    refused(signJwt(claims({ exp: NOW - 61 }), es), /expired/);
    assert.ok(check(signJwt(claims({ exp: NOW - 30 }), es)).ok, "within the 60 s skew");
    refused(signJwt(claims({ nbf: NOW + 120 }), es), /not valid yet/);
    refused(signJwt(claims({ iat: NOW + 120 }), es), /in the future/);
    refused(signJwt(claims({ exp: undefined }), es), /exp is missing/);
    refused(signJwt(claims({ exp: "9999999999" }), es), /exp is missing/);
    refused(signJwt(claims({ sub: undefined }), es), /sub is missing/);
    refused(signJwt(claims({ sub: "" }), es), /sub is missing/);
  });

  test("a critical extension, a short RSA key, a malformed or oversized token are refused", () => {
    refused(signJwt(claims(), es, { alg: "ES256", kid: es.kid, crit: ["exp"] }), /critical/);
    const weak = makeKeyOfBits(1024);
    refused(signJwt(claims(), weak), /no published key/, [jwk(weak)]);
    refused("a.b", /not a signed JWT/);
    refused("a.b.c.d", /not a signed JWT/);
    refused(`${"a".repeat(20_000)}.b.c`, /longer than/);
    refused("e30.e30.AAAA", /alg undefined/);
    refused(`${Buffer.from("[1]").toString("base64url")}.e30.AAAA`, /header is not a JSON object/);
  });

  test("an ES256 signature that is not 64 raw bytes (DER) is refused", () => {
    const [h, p] = signJwt(claims(), es).split(".");
    refused(`${h}.${p}.${Buffer.alloc(70, 1).toString("base64url")}`, /not 64 bytes/);
  });
});

function makeKeyOfBits(bits: number): IssuerKey {
  return { kid: "weak", alg: "RS256", ...generateKeyPairSync("rsa", { modulusLength: bits }) };
}

describe("SCRATCHRUN_OIDC_* at start", () => {
  test("a bad issuer URL, or a client setting without an issuer, is refused naming the setting", () => {
    const bad: [Record<string, string>, RegExp][] = [
      [
        { SCRATCHRUN_OIDC_ISSUER: "http://idp.example.com" },
        /must be https \(http only on loopback\)/,
      ],
      [{ SCRATCHRUN_OIDC_ISSUER: "not a url" }, /SCRATCHRUN_OIDC_ISSUER is not a URL/],
      [{ SCRATCHRUN_OIDC_ISSUER: "https://u:p@idp.example.com" }, /no credentials/],
      [{ SCRATCHRUN_OIDC_CLIENT_ID: "c" }, /need SCRATCHRUN_OIDC_ISSUER/],
      [
        { SCRATCHRUN_OIDC_ISSUER: "https://idp.example.com", SCRATCHRUN_OIDC_CLIENT_SECRET: "s" },
        /CLIENT_SECRET needs SCRATCHRUN_OIDC_CLIENT_ID/,
      ],
    ];
    for (const [env, why] of bad) assert.throws(() => trustedIssuerFromEnv(env), why);
    assert.equal(trustedIssuerFromEnv({}), undefined);
    const ok = trustedIssuerFromEnv({
      SCRATCHRUN_OIDC_ISSUER: "https://idp.example.com",
      SCRATCHRUN_OIDC_CLIENT_ID: "c",
    });
    assert.equal(ok?.issuer, "https://idp.example.com");
    assert.equal(ok?.signsIn, true);
    assert.equal(
      trustedIssuerFromEnv({ SCRATCHRUN_OIDC_ISSUER: "http://127.0.0.1:8080/realms/x" })?.signsIn,
      false,
    );
  });
});
