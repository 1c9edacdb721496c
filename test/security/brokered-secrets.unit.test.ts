// Brokered secrets' pure parts (docs/decisions/0015-brokered-secrets.md): the head substitution
// the egress proxy applies (substitute.ts), the call's CA and leaves (x509.ts, checked by
// OpenSSL through node:crypto and a real TLS handshake on loopback), and the engine's rule,
// checked before any sandbox starts (a recording backend counts the sandboxes asked for).
import assert from "node:assert/strict";
import { X509Certificate, createPrivateKey } from "node:crypto";
import tls from "node:tls";
import { describe, it } from "node:test";
import type { Backend, BackendOutcome, SandboxJob } from "../../src/backends/types.js";
import { Engine } from "../../src/engine/engine.js";
import { CA_BUNDLE_ENV, CA_BUNDLE_PATH, PLACEHOLDER_PREFIX } from "../../src/engine/secrets.js";
import { isScratchRunError } from "../../src/errors.js";
import { allowlistOf, parseAllowlist } from "../../src/net/allowlist.js";
import {
  isCredentialField,
  scrubValue,
  substituteHead,
  type HeldSecret,
} from "../../src/net/proxy/substitute.js";
import { LeafIssuer, newCallCa, publicKeyId, serialNumber } from "../../src/net/proxy/x509.js";
import { LIMITS } from "../../src/schema/limits.js";

const P1 = `${PLACEHOLDER_PREFIX}${"a".repeat(64)}`;
const P2 = `${PLACEHOLDER_PREFIX}${"b".repeat(64)}`;
const SECRETS: HeldSecret[] = [
  { placeholder: P1, value: "v@lue one&x", hosts: allowlistOf(["api.test"]) },
  { placeholder: P2, value: "second-value", hosts: allowlistOf(["*.other.test"]) },
];
const basic = (s: string) => `Basic ${Buffer.from(s, "latin1").toString("base64")}`;

describe("substituteHead: placeholders become values only for their hosts", () => {
  it("credential headers, Basic credentials and credential query parameters of a bound host get the value", () => {
    const r = substituteHead(
      "api.test",
      `/p/x?api_key=${P1}&b=1`,
      [
        "Authorization",
        `Bearer ${P1}`,
        "X-Api-Key",
        `${P1},${P1}`,
        "Proxy-Authorization",
        basic(`u:${P1}`),
      ],
      SECRETS,
    );
    assert.ok(r.ok);
    assert.equal(r.target, `/p/x?api_key=${encodeURIComponent("v@lue one&x")}&b=1`);
    assert.deepEqual(r.headers.slice(0, 4), [
      "Authorization",
      "Bearer v@lue one&x",
      "X-Api-Key",
      "v@lue one&x,v@lue one&x",
    ]);
    assert.equal(r.headers[5], basic("u:v@lue one&x"));
  });

  it("only credential fields get the value: a placeholder anywhere a host might echo is refused", () => {
    // Headers and parameters hosts hand back (request ids, CORS, redirects keeping the query).
    const echoed: Array<[string, string[]]> = [
      ["/", ["X-Request-Id", P1]],
      ["/", ["Origin", `https://${P1}`]],
      ["/", ["Referer", `https://x.test/?k=${P1}`]],
      ["/", ["Cookie", `s=${P1}`]],
      ["/", ["X-HTTP-Method-Override", P1]],
      ["/", ["Accept", P1]],
      [`/docs?page=${P1}`, []],
      [`/?next=/x%3Fkey%3D${P1}`, []],
      [`/?${P1}=1`, []],
      [`/?q=${P1}&key=1`, []],
    ];
    for (const [target, headers] of echoed)
      assert.deepEqual(
        substituteHead("api.test", target, headers, SECRETS),
        { ok: false },
        `${target} ${headers.join(": ")}`,
      );
    // Credential names, however a service spells them.
    for (const field of [
      "X-Auth-Token",
      "PRIVATE-TOKEN",
      "Ocp-Apim-Subscription-Key",
      "X-Goog-Api-Key",
      "apikey",
      "X-Amz-Security-Token",
    ])
      assert.ok(isCredentialField(field), field);
    for (const field of ["X-Request-Id", "Origin", "page", "Cookie", "Keyboard", "Tokenizer"])
      assert.ok(!isCredentialField(field), field);
    for (const param of ["key", "api_key", "access_token", "token", "sig", "api%5Fkey"]) {
      const r = substituteHead("api.test", `/?${param}=${P1}`, [], SECRETS);
      assert.ok(r.ok, param);
      assert.equal(r.target, `/?${param}=${encodeURIComponent("v@lue one&x")}`);
    }
  });

  it("a response header reflecting a value, as written or percent-encoded, goes back as its placeholder", () => {
    const v = "v@lue one&x";
    assert.equal(scrubValue(`/docs/?key=${encodeURIComponent(v)}`, SECRETS), `/docs/?key=${P1}`);
    assert.equal(scrubValue(`Bearer ${v}, ${v}`, SECRETS), `Bearer ${P1}, ${P1}`);
    assert.equal(scrubValue("second-value", SECRETS), P2);
    assert.equal(scrubValue("nothing here", SECRETS), "nothing here");
  });

  it("a placeholder going to a host it is not bound to is refused, wherever it sits in the head", () => {
    const cases: Array<[string, string, string[]]> = [
      ["other.api.test", "/", ["Authorization", `Bearer ${P1}`]],
      ["x.other.test", `/?k=${P1}`, []],
      ["api.test", `/?k=${P2}`, []],
      ["api.test", "/", ["X-Key", P2]],
      ["api.test", "/", ["authorization", basic(`u:${P2}`)]],
      // In the path (not substituted there) and in a header name.
      ["api.test", `/${P1}/x`, []],
      ["api.test", "/", [`X-${P1}`, "1"]],
      // The other.test wildcard does not cover other.test itself.
      ["other.test", "/", ["X-Key", P2]],
    ];
    for (const [name, target, headers] of cases)
      assert.deepEqual(
        substituteHead(name, target, headers, SECRETS),
        { ok: false },
        `${name} ${target} ${headers.join(" ")}`,
      );
  });

  it("a head without placeholders passes unchanged; a near miss is no placeholder", () => {
    const near = P1.slice(0, -1);
    const r = substituteHead("api.test", `/?q=${near}`, ["A", near], SECRETS);
    assert.deepEqual(r, { ok: true, target: `/?q=${near}`, headers: ["A", near] });
  });
});

describe("the call's CA and its leaves", () => {
  it("a CA:true certificate and a leaf for exactly one name that chains to it", () => {
    const ca = newCallCa();
    const cert = new X509Certificate(ca.certPem);
    assert.equal(cert.ca, true);
    assert.match(cert.subject, /^CN=ScratchRun brokered secrets CA [0-9a-f]{8}$/);
    assert.ok(cert.verify(cert.publicKey), "self-signed");
    const hours = (Date.parse(cert.validTo) - Date.parse(cert.validFrom)) / 3_600_000;
    assert.ok(hours <= 3, `short validity: ${hours} h`);
    const issuer = new LeafIssuer(
      createPrivateKey(ca.keyPem),
      cert.subject.slice(3),
      publicKeyId(cert.publicKey),
    );
    const leaf = new X509Certificate(issuer.leaf("api.test").certPem);
    assert.equal(leaf.ca, false);
    assert.equal(leaf.subjectAltName, "DNS:api.test");
    assert.ok(leaf.checkIssued(cert) && leaf.verify(cert.publicKey));
    assert.equal(leaf.checkHost("api.test"), "api.test");
    assert.equal(leaf.checkHost("other.test"), undefined);
    // Two calls never share a CA.
    assert.notEqual(newCallCa().certPem, ca.certPem);
  });

  it("every certificate is valid DER: serials minimal and positive, whatever bytes are drawn", () => {
    // A serial whose first random byte was 0x00 or 0x80 gave a leading zero byte OpenSSL refuses
    // ("illegal padding"): 1 certificate in 256, and the proxy died making it.
    for (const first of [0x00, 0x01, 0x3f, 0x7f, 0x80, 0xff]) {
      const s = serialNumber(Buffer.from([first, 0x00, 0x12, 0x7f]));
      assert.ok(s[0]! >= 0x40 && s[0]! < 0x80, `first byte ${first}: ${s[0]}`);
      assert.deepEqual([...s.subarray(1)], [0x00, 0x12, 0x7f], "the rest kept");
    }
    const ca = newCallCa();
    const caCert = new X509Certificate(ca.certPem);
    const issuer = new LeafIssuer(
      createPrivateKey(ca.keyPem),
      caCert.subject.slice(3),
      publicKeyId(caCert.publicKey),
    );
    for (let i = 0; i < 600; i++) {
      const cert = new X509Certificate(
        i % 2 ? newCallCa().certPem : issuer.leaf(`h${i}.test`).certPem,
      );
      assert.match(cert.serialNumber, /^[4-7][0-9A-F]{31}$/, cert.serialNumber);
    }
  });

  it("a TLS client trusting the CA accepts the leaf; one trusting another call's CA does not", async () => {
    const ca = newCallCa();
    const cert = new X509Certificate(ca.certPem);
    const issuer = new LeafIssuer(
      createPrivateKey(ca.keyPem),
      cert.subject.slice(3),
      publicKeyId(cert.publicKey),
    );
    const server = tls.createServer(
      { cert: issuer.leaf("api.test").certPem, key: issuer.leafKeyPem },
      (s) => s.end("ok"),
    );
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    const connect = (caPem: string, servername: string) =>
      new Promise<string>((resolve) => {
        const s = tls.connect({ host: "127.0.0.1", port, servername, ca: caPem }, () => {
          s.end();
          resolve("authorized");
        });
        s.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
      });
    try {
      assert.equal(await connect(ca.certPem, "api.test"), "authorized");
      assert.equal(
        await connect(newCallCa().certPem, "api.test"),
        "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
      );
      assert.equal(await connect(ca.certPem, "other.test"), "ERR_TLS_CERT_ALTNAME_INVALID");
    } finally {
      server.close();
    }
  });
});

/** A backend that records the jobs it is given and answers each with an empty exit. */
class RecordingBackend implements Backend {
  readonly name = "namespace" as const;
  readonly isolation = "namespace" as const;
  readonly codeIds = null;
  readonly jobs: SandboxJob[] = [];
  async run(job: SandboxJob): Promise<BackendOutcome> {
    this.jobs.push(job);
    return {
      agent: {
        exit: {
          reason: "exited",
          value: 0,
          stdoutTruncated: false,
          stderrTruncated: false,
          durationMs: 5,
          oomKills: 0,
          message: "",
        },
        // The code printed a value it got back from a bound host: redacted like an env value.
        stdout: new TextEncoder().encode("echoed: s3cret-token-value\n"),
        stderr: new Uint8Array(),
        shown: [],
        files: [],
        failure: null,
        startedAfterMs: 1,
        pid: 2,
      },
      isolation: this.isolation,
      oomKilled: false,
      sandboxReadyMs: 0,
    };
  }
  openSession(): Promise<never> {
    return Promise.reject(new Error("no sessions here"));
  }
  onSandboxReady(): () => void {
    return () => {};
  }
  pooled() {
    return { ready: 0, target: 0 };
  }
  pools() {
    return { kinds: [], fullAfterMs: null };
  }
  async whenPoolsFull() {
    return null;
  }
  async close(): Promise<void> {}
}

const ceiling = { timeoutMs: 900_000, memoryMb: 4096, memorySource: "host" as const };
const GOOD = { value: "s3cret-token-value", hosts: ["api.test"] };

function engineWith(egressAllowlist: string | null, network = true) {
  const backend = new RecordingBackend();
  const engine = new Engine(backend, {
    publicNetworkAvailable: network,
    egressAllowlist: egressAllowlist ? parseAllowlist(egressAllowlist) : null,
    ceiling,
  });
  return { backend, engine };
}

async function refused(
  input: Record<string, unknown>,
  message: RegExp,
  opts: { allow?: string | null; network?: boolean } = {},
): Promise<void> {
  const { backend, engine } = engineWith(opts.allow ?? null, opts.network ?? true);
  await assert.rejects(
    engine.executeInput({ runtime: "bash", code: "true", network: "public", ...input }),
    (e: unknown) => {
      assert.ok(isScratchRunError(e) && e.code === "INVALID_INPUT", String(e));
      assert.match(e.message, message);
      return true;
    },
  );
  assert.equal(backend.jobs.length, 0, "no sandbox was asked for");
}

describe("the secrets rule, before any sandbox starts", () => {
  it("SEC-SECRET-INPUT: bad names, counts, values and hosts are refused, each named", async () => {
    const many = Object.fromEntries(
      Array.from({ length: LIMITS.secrets.maxEntries + 1 }, (_, i) => [`S${i}`, GOOD]),
    );
    await refused({ secrets: { "1BAD": GOOD } }, /secret name "1BAD"/);
    await refused({ secrets: { "A=B": GOOD } }, /secret name "A=B"/);
    await refused({ secrets: many }, /secrets has 9 entries; at most 8/);
    await refused(
      {
        secrets: { T: { value: "x".repeat(LIMITS.secrets.maxValueBytes + 1), hosts: ["a.test"] } },
      },
      /secret T: value is 8193 bytes; 6 to 8192/,
    );
    await refused({ secrets: { T: { value: "short", hosts: ["a.test"] } } }, /value is 5 bytes/);
    await refused(
      { secrets: { T: { value: "line\r\nX-Injected: 1", hosts: ["a.test"] } } },
      /printable ASCII/,
    );
    await refused(
      { secrets: { T: { value: "tok-ünïcode", hosts: ["a.test"] } } },
      /printable ASCII/,
    );
    await refused({ secrets: { T: { value: GOOD.value, hosts: [] } } }, /hosts has 0 entries/);
    await refused(
      { secrets: { T: { value: GOOD.value, hosts: Array(9).fill("a.test") } } },
      /hosts has 9 entries; 1 to 8/,
    );
    for (const bad of ["https://a.test/", "10.0.0.1", "*", "a.test:443", "", "*.test", "localhost"])
      await refused(
        { secrets: { T: { value: GOOD.value, hosts: [bad] } } },
        /secret T: hosts: egress allowlist entry/,
      );
    await refused({ secrets: { T: { value: GOOD.value } } }, /secrets\.T\.hosts/);
    await refused({ secrets: { T: { ...GOOD, extra: 1 } } }, /secrets\.T/);
  });

  it("SEC-SECRET-RULE: secrets need network public, no session, names of their own, hosts on the allowlist", async () => {
    await refused({ secrets: { T: GOOD }, network: "none" }, /secrets need network "public"/);
    await refused({ secrets: { T: GOOD } }, /this server gives calls no network/, {
      network: false,
    });
    await refused({ secrets: { T: GOOD }, session_id: "A".repeat(22) }, /not in a session's call/);
    await refused({ secrets: { T: GOOD }, env: { T: "x" } }, /T is also in env/);
    await refused(
      { secrets: { T: GOOD }, env: { SSL_CERT_FILE: "/x" } },
      /env SSL_CERT_FILE: a call with secrets sets it/,
    );
    await refused(
      { secrets: { T: { value: GOOD.value, hosts: ["evil.test"] } } },
      /host evil\.test is not on this call's egress allowlist/,
      { allow: "api.test, *.ok.test" },
    );
    // A wildcard secret host must be allowed whole, not only in part.
    await refused(
      { secrets: { T: { value: GOOD.value, hosts: ["*.x.test2"] } } },
      /host \*\.x\.test2 is not on/,
      { allow: "a.x.test2" },
    );
  });

  it("a server without an allowlist: the call reaches only its secrets' hosts, through the proxy", async () => {
    const { backend, engine } = engineWith(null);
    const out = await engine.executeInput({
      runtime: "bash",
      code: "env",
      network: "public",
      secrets: { T: GOOD, U: { value: "another-value", hosts: ["*.b.test", "api.test"] } },
      redact_env: false,
    });
    const job = backend.jobs[0];
    assert.ok(job && job.egress.kind === "allowlist");
    assert.deepEqual(job.egress.names.entries, ["api.test", "*.b.test"]);
    const broker = job.egress.broker;
    assert.ok(broker);
    assert.deepEqual(
      broker.secrets.map((s) => [s.name, s.value, s.hosts]),
      [
        ["T", GOOD.value, ["api.test"]],
        ["U", "another-value", ["*.b.test", "api.test"]],
      ],
    );
    // The code gets placeholders and the CA bundle variables, never a value.
    const env = job.request.env;
    for (const s of broker.secrets) {
      assert.equal(env[s.name], s.placeholder);
      assert.match(s.placeholder, /^scratchrun-secret-[0-9a-f]{64}$/);
    }
    for (const v of CA_BUNDLE_ENV) assert.equal(env[v], CA_BUNDLE_PATH);
    const request = JSON.stringify(job.request, (_k, v: unknown) =>
      v instanceof Uint8Array ? Buffer.from(v).toString("latin1") : v,
    );
    for (const s of broker.secrets)
      assert.ok(!request.includes(s.value), "no value in the request");
    assert.ok(!request.includes("PRIVATE KEY"), "no CA key in the request");
    const bundle = job.request.files.find((f) => f.path === CA_BUNDLE_PATH);
    assert.ok(bundle && Buffer.from(bundle.content).toString().endsWith(broker.caCertPem));
    // The value is redacted from the output even with redact_env false.
    assert.equal(out.result.stdout, "echoed: [redacted:T]\n");
  });

  it("a server with an allowlist keeps it (the key's narrowing included); each call gets fresh placeholders and CA", async () => {
    const { backend, engine } = engineWith("api.test, *.b.test, other.test");
    const input = { runtime: "bash", code: "true", network: "public", secrets: { T: GOOD } };
    await engine.executeInput(input);
    await engine.executeInput(input, { egressAllow: ["api.test"] });
    const [one, two] = backend.jobs;
    assert.ok(one?.egress.kind === "allowlist" && two?.egress.kind === "allowlist");
    assert.deepEqual(one.egress.names.entries, ["api.test", "*.b.test", "other.test"]);
    assert.deepEqual(two.egress.names.entries, ["api.test"]);
    assert.notEqual(one.egress.broker?.caCertPem, two.egress.broker?.caCertPem);
    assert.notEqual(one.egress.broker?.caKeyPem, two.egress.broker?.caKeyPem);
    assert.notEqual(one.request.env.T, two.request.env.T);
    // The key's list takes other.test away: a secret bound to it is refused for that key.
    await assert.rejects(
      engine.executeInput(
        { ...input, secrets: { T: { ...GOOD, hosts: ["other.test"] } } },
        { egressAllow: ["api.test"] },
      ),
      /host other\.test is not on this call's egress allowlist \(api\.test\)/,
    );
    assert.equal(backend.jobs.length, 2);
  });
});
