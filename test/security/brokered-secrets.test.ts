import { PY } from "../helpers/pythons.js";
/**
 * Brokered secrets through the real server, on each backend (docs/decisions/0015-brokered-
 * secrets.md): the private test internet of test/net/topology.ts and web.ts is the uplink
 * (nothing leaves the machine), the server's own egress proxy child brokers, and the web hosts'
 * logs show what arrived. The proxy trusts the shared test certificate
 * (SCRATCHRUN_EGRESS_UPSTREAM_CA); refused.test presents another one it does not trust.
 *
 * What must hold: the value reaches the bound host (headers and query, over HTTPS, and over plain
 * HTTP only to a host the operator opted in; from python, requests and node); the code sees only a
 * placeholder; no request smuggled inside another gets a later request's value back, and every
 * request of a connection passes the first one's head rules; no sandbox process (nor, for a
 * microVM, QEMU's guest RAM) holds the value while the call runs; a placeholder going anywhere
 * else is refused and named; HTTPS to an unbound name is not terminated; a second call can use
 * neither the first one's placeholder nor its CA; an upstream the host does not trust is refused.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes, X509Certificate } from "node:crypto";
import { closeSync, openSync, readdirSync, readFileSync, readSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertNoLeaks, SANDBOX_UID_MAX, SANDBOX_UID_MIN, snapshot } from "../helpers/leaks.js";

/** QEMU's host uids follow the jails' (VM_UID_BASE in src/backends/microvm/backend.ts: 1024). */
const VM_UID_MAX = SANDBOX_UID_MAX + 1024;
import { startServer, textOf, type McpHarness } from "../helpers/mcp-client.js";
import { EgressFixture } from "../net/egress-fixture.js";

interface Refused {
  host: string | null;
  port: number;
  reason: string;
  count: number;
}

/** The server's allowlist here; secrets are bound to allowed.test (and refused.test, untrusted). */
const ALLOWLIST = "allowed.test, *.wild.test, refused.test";
/** The one host the operator lets secrets reach over plain HTTP here. */
const PLAIN_HTTP = "a.wild.test";
/** URL-safe, so the logged query shows it as sent. Unique per run: nothing else holds it. */
const VALUE = `sr-brokered-${randomBytes(16).toString("hex")}`;
const PLACEHOLDER = /^scratchrun-secret-[0-9a-f]{64}$/;

/** Python helpers every program here starts with: `get` returns [status, body]. */
const PY_PRELUDE = `
import hashlib, json, os, socket, ssl, sys, time, urllib.error, urllib.request
tok = os.environ.get("TOKEN", "")
def get(url, headers={}, timeout=10):
    try:
        r = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
        return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
    except Exception as e:
        return [None, repr(e)]
def tls(name, ctx):
    try:
        with socket.create_connection((name, 443), timeout=10) as s:
            with ctx.wrap_socket(s, server_hostname=name) as t:
                return [hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest(), t.getpeercert()]
    except Exception as e:
        return [None, repr(e)]
def unverified():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
out = {}
`;

/** Every process of a sandbox on this host: a jail's uid, or QEMU's (the microVM's guest RAM). */
function sandboxPids(): number[] {
  const pids: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${d}/status`, "utf8"))?.[1]);
      if (uid >= SANDBOX_UID_MIN && uid < VM_UID_MAX) pids.push(Number(d));
    } catch {
      // gone
    }
  }
  return pids;
}

/**
 * Which of `needles` process `pid` holds: in its environment, command line, or any readable
 * mapping of its memory (for QEMU: the guest's RAM), read through /proc/PID/mem.
 */
function scanProcess(pid: number, needles: readonly Buffer[]): { found: boolean[]; bytes: number } {
  const found = needles.map(() => false);
  let bytes = 0;
  const look = (buf: Buffer) => {
    needles.forEach((n, i) => {
      if (!found[i] && buf.includes(n)) found[i] = true;
    });
  };
  for (const f of ["environ", "cmdline"]) {
    try {
      look(readFileSync(`/proc/${pid}/${f}`));
    } catch {
      // gone
    }
  }
  let maps = "";
  let fd: number;
  try {
    maps = readFileSync(`/proc/${pid}/maps`, "utf8");
    fd = openSync(`/proc/${pid}/mem`, "r");
  } catch {
    return { found, bytes };
  }
  const overlap = Math.max(...needles.map((n) => n.length));
  const chunk = Buffer.alloc(8 << 20);
  try {
    for (const line of maps.split("\n")) {
      const m = /^([0-9a-f]+)-([0-9a-f]+) (\S+)\s+\S+\s+\S+\s+\S+\s*(.*)$/.exec(line);
      if (!m || m[3]?.[0] !== "r" || /\[(vvar|vsyscall|vvar_vclock)\]/.test(m[4] ?? "")) continue;
      const end = parseInt(m[2] ?? "0", 16);
      for (let at = parseInt(m[1] ?? "0", 16); at < end; at += chunk.length - overlap) {
        const n = Math.min(chunk.length, end - at);
        let got = 0;
        try {
          got = readSync(fd, chunk, 0, n, at);
        } catch {
          break;
        }
        bytes += got;
        look(chunk.subarray(0, got));
        if (at + n >= end) break;
      }
    }
  } finally {
    closeSync(fd);
  }
  return { found, bytes };
}

/**
 * One test internet for the file's four servers (started one after another, each on its own
 * uplink network): the host is checked once every server has stopped and the fixture is gone.
 */
const fx = new EgressFixture({ idPrefix: "k", web: { untrusted: ["refused"] } });
let base: ReturnType<typeof snapshot>;
let webCertSha = "";
before(async () => {
  base = snapshot();
  await fx.start();
  webCertSha = createHash("sha256")
    .update(new X509Certificate(readFileSync(fx.web.certPath)).raw)
    .digest("hex");
});
after(async () => {
  await fx.stop();
  await assertNoLeaks(base);
});

for (const backend of TEST_BACKENDS) {
  describe(`brokered secrets through the MCP server [${backend}]`, { timeout: 600_000 }, () => {
    let h: McpHarness;

    before(async () => {
      h = await startServer({
        SCRATCHRUN_ISOLATION: backend,
        SCRATCHRUN_POOL_SIZE: backend === "microvm" ? `${PY}=1` : "1",
        SCRATCHRUN_NETWORK: "public",
        SCRATCHRUN_EGRESS_ALLOW: ALLOWLIST,
        SCRATCHRUN_EGRESS_UPSTREAM_CA: fx.web.certPath,
        SCRATCHRUN_SECRETS_PLAIN_HTTP: PLAIN_HTTP,
        ...fx.topo.serverEnv(),
      });
    });

    after(async () => {
      // The proxy never died under these calls (it would be restarted, and say so).
      const stderr = h?.stderr() ?? "";
      await h?.close();
      assert.doesNotMatch(stderr, /the egress proxy exited/);
    });

    const secret = (hosts = ["allowed.test"], value = VALUE) => ({ TOKEN: { value, hosts } });

    async function run(code: string, secrets: object, runtime: string = PY) {
      const { result, s } = await h.exec({
        runtime,
        code,
        network: "public",
        timeout_ms: 30_000,
        secrets,
      });
      assert.equal(s.exit_reason, "ok", `${s.stdout}\n${s.stderr}`);
      assert.ok(!JSON.stringify(result).includes(VALUE), "the result never shows the value");
      return s as typeof s & { network_refused?: Refused[] };
    }

    test("SEC-SECRET-DELIVER: the bound host gets the value in headers and the query over HTTPS, and over plain HTTP only where the operator opted it in; the code's environment holds a placeholder", async () => {
      const mark = fx.web.mark();
      const s = await run(
        `${PY_PRELUDE}
out["env_hex"] = json.dumps(dict(os.environ)).encode().hex()
out["https"] = get(f"https://allowed.test/h?key={tok}", {"Authorization": f"Bearer {tok}"})
out["http"] = get(f"http://${PLAIN_HTTP}/p?key={tok}", {"X-Api-Key": tok})
out["cleartext"] = get(f"http://allowed.test/c?key={tok}", {"X-Api-Key": tok})
print(json.dumps(out))`,
        secret(["allowed.test", PLAIN_HTTP]),
      );
      const out = JSON.parse(s.stdout) as Record<string, [number | null, string]> & {
        env_hex: string;
      };
      assert.equal(out.https?.[0], 200, out.https?.[1]);
      assert.equal(out.http?.[0], 200, out.http?.[1]);
      // Plain HTTP to a bound host the operator did not name: the value would go in cleartext.
      assert.equal(out.cleartext?.[0], 403, out.cleartext?.[1]);
      assert.match(out.cleartext?.[1] ?? "", /secret_plain_http/);
      const env = JSON.parse(Buffer.from(out.env_hex, "hex").toString()) as Record<string, string>;
      assert.match(env.TOKEN ?? "", PLACEHOLDER);
      assert.ok(!out.env_hex.includes(Buffer.from(VALUE).toString("hex")), "no value in env");
      for (const v of [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
      ])
        assert.equal(env[v], "/run/scratchrun/ca-bundle.pem", v);
      const seen = fx.web.since(mark, "allowed");
      assert.match(
        seen,
        new RegExp(`https sni=allowed\\.test host=allowed\\.test path=/h\\?key=${VALUE}\n`),
      );
      assert.match(seen, new RegExp(`header authorization=Bearer ${VALUE}\n`));
      assert.match(seen, new RegExp(`http host=a\\.wild\\.test path=/p\\?key=${VALUE}\n`));
      assert.match(seen, new RegExp(`header x-api-key=${VALUE}\n`));
      assert.doesNotMatch(seen, /path=\/c\b/);
      assert.ok(!seen.includes(env.TOKEN ?? "-"), "the placeholder never reaches the host");
      assert.deepEqual(s.network_refused ?? [], [
        { host: "allowed.test", port: 80, reason: "secret_plain_http", count: 1 },
      ]);
    });

    test("SEC-SECRET-CLIENTS: requests (certifi) and node trust the call's CA and are brokered", async () => {
      const mark = fx.web.mark();
      const py = await run(
        `import os, requests
tok = os.environ["TOKEN"]
r = requests.get(f"https://allowed.test/requests?key={tok}", headers={"Authorization": f"Bearer {tok}"}, timeout=10)
print(r.status_code)`,
        secret(),
        "python3.12",
      );
      assert.equal(py.stdout.trim(), "200", py.stderr);
      const node = await run(
        `import("node:https").then((https) => {
  const tok = process.env.TOKEN;
  https
    .get(\`https://allowed.test/node?key=\${tok}\`, { headers: { Authorization: \`Bearer \${tok}\` } }, (r) => {
      r.resume();
      r.on("end", () => console.log(r.statusCode));
    })
    .on("error", (e) => console.log(String(e)));
});`,
        secret(),
        "node20",
      );
      assert.equal(node.stdout.trim(), "200", node.stderr);
      const seen = fx.web.since(mark, "allowed");
      assert.match(seen, new RegExp(`path=/requests\\?key=${VALUE}\n`));
      assert.match(seen, new RegExp(`path=/node\\?key=${VALUE}\n`));
      assert.equal(seen.split(`header authorization=Bearer ${VALUE}\n`).length, 3);
    });

    test("SEC-SECRET-MEMORY: while the call runs, no sandbox process (nor the guest's RAM) holds the value", async () => {
      const tag = randomBytes(8).toString("hex");
      const mark = `sr-mark-${tag}`;
      const call = h.exec({
        runtime: PY,
        network: "public",
        timeout_ms: 30_000,
        env: { SR_MARK: mark },
        secrets: secret(),
        code: `${PY_PRELUDE}
out["https"] = get("https://allowed.test/m", {"Authorization": f"Bearer {tok}"})
out["ready"] = get("http://allowed.test/ready-${tag}")
# Still running, the value in hand, until the test has scanned every sandbox process.
out["gate"] = get("http://allowed.test/gate/${tag}", timeout=60)
print(json.dumps(out))`,
      });
      for (let i = 0; !fx.web.log("allowed").includes(`path=/ready-${tag}`); i++) {
        assert.ok(i < 600, "the code never became ready");
        await new Promise((r) => setTimeout(r, 100));
      }
      const needles = [Buffer.from(VALUE), Buffer.from(mark)];
      const pids = sandboxPids();
      let bytes = 0;
      let markSeen = false;
      const holders: number[] = [];
      for (const pid of pids) {
        const r = scanProcess(pid, needles);
        bytes += r.bytes;
        if (r.found[0]) holders.push(pid);
        markSeen ||= r.found[1] === true;
      }
      fx.web.open(tag);
      const { s } = await call;
      assert.equal(s.exit_reason, "ok", s.stderr);
      // The code waited at the gate until the scan was over: it ran (and held the value) throughout.
      const out = JSON.parse(s.stdout) as Record<string, [number | null, string]>;
      assert.equal(out.gate?.[0], 200, JSON.stringify(out.gate));
      assert.match(fx.web.log("allowed"), new RegExp(`header authorization=Bearer ${VALUE}\n`));
      // The scan saw the call: its env's mark is in a sandbox process (the guest's RAM in QEMU).
      assert.ok(markSeen, `the mark was found in ${pids.length} processes (${bytes} bytes read)`);
      if (backend === "microvm")
        assert.ok(bytes > 64 << 20, `QEMU's guest RAM was read (${bytes} bytes)`);
      assert.deepEqual(holders, [], "no sandbox process holds the value");
    });

    test("SEC-SECRET-REFUSE: a placeholder sent anywhere but its hosts is refused and named; HTTPS to an unbound name stays end to end", async () => {
      const mark = fx.web.mark();
      const s = await run(
        `${PY_PRELUDE}
out["unbound_query"] = get(f"http://a.wild.test/u?key={tok}")
out["unbound_header"] = get("http://a.wild.test/v", {"Authorization": f"Bearer {tok}"})
out["in_path"] = get(f"https://allowed.test/{tok}")
out["host_mismatch"] = get("https://allowed.test/x", {"Host": "a.wild.test", "Authorization": f"Bearer {tok}"})
out["echoed_header"] = get("https://allowed.test/w", {"X-Request-Id": tok})
out["echoed_query"] = get(f"https://allowed.test/w?page={tok}")
out["unbound_tls"] = tls("a.wild.test", unverified())
out["bound_tls"] = tls("allowed.test", ssl.create_default_context())
print(json.dumps(out))`,
        secret(),
      );
      const out = JSON.parse(s.stdout) as Record<string, [unknown, unknown]>;
      const why = () =>
        `${JSON.stringify(out)}\n${JSON.stringify(s.network_refused)}\n${fx.web.since(mark, "allowed")}`;
      // A bound host gets a value only in a credential field: where it might echo one (a request
      // id, a page number), the placeholder is refused.
      for (const k of [
        "unbound_query",
        "unbound_header",
        "in_path",
        "host_mismatch",
        "echoed_header",
        "echoed_query",
      ])
        assert.equal(out[k]?.[0], 403, `${k}: ${why()}`);
      // Not terminated: the client sees the web host's own certificate.
      assert.equal(out.unbound_tls?.[0], webCertSha, JSON.stringify(out.unbound_tls));
      // Terminated: a leaf of the call's CA, trusted through SSL_CERT_FILE.
      assert.notEqual(out.bound_tls?.[0], webCertSha);
      assert.match(JSON.stringify(out.bound_tls?.[1]), /ScratchRun brokered secrets CA/);
      const refused = s.network_refused ?? [];
      const has = (host: string, port: number, reason: string) =>
        refused.some((r) => r.host === host && r.port === port && r.reason === reason);
      assert.ok(has("a.wild.test", 80, "secret_placeholder"), JSON.stringify(refused));
      assert.ok(has("allowed.test", 443, "secret_placeholder"), JSON.stringify(refused));
      assert.ok(has("a.wild.test", 443, "host_mismatch"), JSON.stringify(refused));
      const seen = fx.web.since(mark, "allowed");
      assert.doesNotMatch(seen, /path=\/(u|v|x|w)\b|scratchrun-secret-/, seen);
      assert.ok(!seen.includes(VALUE));
    });

    /**
     * Raw HTTP/1.1 over the bound host's TLS, as smuggling code writes it: `conn()` a TLS socket
     * to allowed.test (trusting the call's CA through SSL_CERT_FILE), `talk(t, bytes, secs)` what
     * came back within secs. The code prints what it received base64-encoded, past redaction:
     * the test decodes it and looks for the value, as sent, reversed or in hex.
     */
    const RAW_PRELUDE = `${PY_PRELUDE}
import base64
ctx = ssl.create_default_context()
def conn():
    return ctx.wrap_socket(socket.create_connection(("allowed.test", 443), timeout=10), server_hostname="allowed.test")
def talk(t, data, secs=1.5):
    t.sendall(data.encode("latin1"))
    t.settimeout(secs)
    got = b""
    end = time.time() + secs
    try:
        while time.time() < end:
            d = t.recv(65536)
            if not d:
                break
            got += d
    except Exception:
        pass
    return got
def chunked_get(path, body):
    return f"GET {path} HTTP/1.1\\r\\nHost: allowed.test\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n{len(body):x}\\r\\n{body}\\r\\n0\\r\\n\\r\\n"
got = []
`;

    /** What the code received, decoded: one string per exchange. */
    const exchanges = (stdout: string) =>
      (JSON.parse(stdout) as string[]).map((p) => Buffer.from(p, "base64").toString("latin1"));
    const holdsValue = (text: string) =>
      text.includes(VALUE) ||
      text.includes([...VALUE].reverse().join("")) ||
      text.includes(Buffer.from(VALUE).toString("hex"));

    test("SEC-SECRET-SMUGGLE: a request smuggled in a body, on the same connection or before a new one, never gets a later request's value back", async () => {
      const mark = fx.web.mark();
      // The smuggled POST's Content-Length is the length of the next request's whole head as a
      // kept-alive upstream connection would carry it (issue 43's broker wrote exactly this).
      const reach =
        `GET /keep-next HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer ${VALUE}\r\nConnection: keep-alive\r\n\r\n`
          .length;
      const s = await run(
        `${RAW_PRELUDE}
smug = "POST /echo HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: ${reach}\\r\\n\\r\\n"
nxt = f"GET /keep-next HTTP/1.1\\r\\nHost: allowed.test\\r\\nAuthorization: Bearer {tok}\\r\\n\\r\\n"
# The same connection: the smuggle, then the request the broker writes the value into.
a = conn()
got.append(talk(a, chunked_get("/keep-smug", smug)))
got.append(talk(a, nxt, 3))
a.close()
# A new connection after a smuggle on another one (a pooled upstream socket would carry it over).
b = conn()
got.append(talk(b, chunked_get("/keep-smug2", smug)))
c = conn()
got.append(talk(c, nxt.replace("/keep-next", "/keep-next2"), 3))
b.close(); c.close()
print(json.dumps([base64.b64encode(g).decode() for g in got]))`,
        secret(),
      );
      const text = exchanges(s.stdout).join("\n----\n");
      assert.ok(!holdsValue(text), `the value came back to the code:\n${text}`);
      const seen = fx.web.since(mark, "allowed");
      // Each request the code sent arrived once, as sent; the smuggled one never did.
      for (const path of ["/keep-smug", "/keep-next", "/keep-smug2", "/keep-next2"])
        assert.equal(seen.split(`path=${path}\n`).length, 2, `${path}: ${seen}`);
      assert.doesNotMatch(seen, /path=\/echo/, seen);
      assert.equal(seen.split(`header authorization=Bearer ${VALUE}\n`).length, 3, seen);
      assert.equal((text.match(/HTTP\/1\.1 200 /g) ?? []).length, 4, text);
    });

    test("SEC-SECRET-STRICT-HEAD: every request of a bound connection passes the first one's rules: absolute-form, a second Host, TRACE and CONNECT are refused with nothing sent", async () => {
      const mark = fx.web.mark();
      const s = await run(
        `${RAW_PRELUDE}
ok = "GET /keep-ok HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"
auth = f"Authorization: Bearer {tok}\\r\\n"
for second in [
    f"GET http://a.wild.test/collect HTTP/1.1\\r\\nHost: allowed.test\\r\\n{auth}\\r\\n",
    f"GET /two-hosts HTTP/1.1\\r\\nHost: allowed.test\\r\\nHost: a.wild.test\\r\\n{auth}\\r\\n",
    f"TRACE /trace HTTP/1.1\\r\\nHost: allowed.test\\r\\n{auth}\\r\\n",
]:
    t = conn()
    got.append(talk(t, ok))
    got.append(talk(t, second))
    t.close()
t = conn()
got.append(talk(t, f"CONNECT a.wild.test:443 HTTP/1.1\\r\\nHost: a.wild.test:443\\r\\n{auth}\\r\\n"))
t.close()
print(json.dumps([base64.b64encode(g).decode() for g in got]))`,
        secret(),
      );
      const parts = exchanges(s.stdout);
      const text = parts.join("\n----\n");
      assert.ok(!holdsValue(text), text);
      assert.equal(parts.length, 7, text);
      for (const i of [0, 2, 4]) assert.match(parts[i] ?? "", /^HTTP\/1\.1 200 /, text);
      for (const i of [1, 3, 5, 6]) assert.match(parts[i] ?? "", /^HTTP\/1\.1 403 /, text);
      const seen = fx.web.since(mark, "allowed");
      assert.equal(seen.split("path=/keep-ok\n").length, 4, seen);
      assert.doesNotMatch(seen, /collect|two-hosts|trace|header authorization/, seen);
      const refused = s.network_refused ?? [];
      const count = (reason: string) =>
        refused
          .filter((r) => r.host === "allowed.test" && r.port === 443 && r.reason === reason)
          .reduce((n, r) => n + r.count, 0);
      assert.equal(count("host_mismatch"), 2, JSON.stringify(refused));
      assert.equal(count("protocol"), 2, JSON.stringify(refused));
    });

    test("SEC-SECRET-REUSE: a second call trusts neither the first call's CA nor substitutes its placeholder", async () => {
      const first = await run(
        `${PY_PRELUDE}
bundle = open(os.environ["SSL_CERT_FILE"]).read()
print(json.dumps({"ph": tok, "ca": "-----BEGIN CERTIFICATE-----" + bundle.split("-----BEGIN CERTIFICATE-----")[-1]}))`,
        secret(),
      );
      const old = JSON.parse(first.stdout) as { ph: string; ca: string };
      assert.match(old.ph, PLACEHOLDER);
      assert.match(old.ca, /^-----BEGIN CERTIFICATE-----/);
      const mark = fx.web.mark();
      const value2 = `sr-second-${randomBytes(8).toString("hex")}`;
      const s = await run(
        `${PY_PRELUDE}
old_ca = ${JSON.stringify(old.ca)}
out["new_placeholder_differs"] = tok != ${JSON.stringify(old.ph)}
out["old_ca"] = tls("allowed.test", ssl.create_default_context(cadata=old_ca))
out["old_placeholder"] = get("https://allowed.test/old", {"Authorization": "Bearer ${old.ph}"})
print(json.dumps(out))`,
        secret(["allowed.test"], value2),
      );
      const out = JSON.parse(s.stdout) as Record<string, [unknown, unknown]> & {
        new_placeholder_differs: boolean;
      };
      assert.equal(out.new_placeholder_differs, true);
      assert.equal(out.old_ca?.[0], null);
      assert.match(String(out.old_ca?.[1]), /CERTIFICATE_VERIFY_FAILED/);
      assert.equal(out.old_placeholder?.[0], 200, JSON.stringify(out.old_placeholder));
      const seen = fx.web.since(mark, "allowed");
      // The old placeholder is just text to this call's broker: passed on as sent, no value.
      assert.match(seen, new RegExp(`header authorization=Bearer ${old.ph}\n`));
      assert.ok(!seen.includes(VALUE) && !seen.includes(value2), seen);
    });

    test("SEC-SECRET-UPSTREAM-TRUST: a bound host whose certificate the host does not trust gets nothing", async () => {
      const mark = fx.web.mark();
      const s = await run(
        `${PY_PRELUDE}
out["https"] = get("https://refused.test/t", {"Authorization": f"Bearer {tok}"})
print(json.dumps(out))`,
        secret(["refused.test"]),
      );
      const out = JSON.parse(s.stdout) as Record<string, [unknown, string]>;
      assert.equal(out.https?.[0], 502, JSON.stringify(out.https));
      assert.match(out.https?.[1] ?? "", /untrusted_upstream/);
      assert.ok(
        (s.network_refused ?? []).some(
          (r) => r.host === "refused.test" && r.port === 443 && r.reason === "untrusted_upstream",
        ),
        JSON.stringify(s.network_refused),
      );
      const seen = fx.web.since(mark, "refused");
      assert.doesNotMatch(seen, /https sni=|header /, seen);
      assert.ok(!seen.includes(VALUE));
    });

    test("SEC-SECRET-INPUT-MCP: bad secrets are refused with the rule, before a sandbox starts", async () => {
      const cases: Array<[object, RegExp]> = [
        [{ secrets: secret(), network: "none" }, /secrets need network "public"/],
        [
          { secrets: secret(["evil.test"]) },
          /host evil\.test is not on this call's egress allowlist/,
        ],
        [{ secrets: { TOKEN: { value: VALUE, hosts: [] } } }, /hosts has 0 entries/],
        [{ secrets: { "BAD NAME": { value: VALUE, hosts: ["allowed.test"] } } }, /secret name/],
      ];
      for (const [args, message] of cases) {
        const r = await h.call({ runtime: PY, code: "print(1)", network: "public", ...args });
        assert.equal(r.isError, true, JSON.stringify(r));
        assert.match(textOf(r), message);
        assert.ok(!textOf(r).includes(VALUE), "the error never shows the value");
      }
    });
  });
}

for (const backend of TEST_BACKENDS) {
  describe(
    `brokered secrets on a server without an allowlist [${backend}]`,
    { timeout: 300_000 },
    () => {
      let h: McpHarness;

      before(async () => {
        h = await startServer({
          SCRATCHRUN_ISOLATION: backend,
          SCRATCHRUN_POOL_SIZE: "0",
          SCRATCHRUN_NETWORK: "public",
          SCRATCHRUN_EGRESS_UPSTREAM_CA: fx.web.certPath,
          ...fx.topo.serverEnv(),
        });
      });

      after(async () => {
        const stderr = h?.stderr() ?? "";
        await h?.close();
        assert.doesNotMatch(stderr, /the egress proxy exited/);
      });

      test("SEC-SECRET-NO-ALLOWLIST: the call reaches its secrets' hosts only, brokered, on a proxied network of its own", async () => {
        const mark = fx.web.mark();
        const { s } = await h.exec({
          runtime: PY,
          network: "public",
          timeout_ms: 30_000,
          secrets: { TOKEN: { value: VALUE, hosts: ["allowed.test"] } },
          code: `${PY_PRELUDE}
out["bound"] = get("https://allowed.test/n", {"Authorization": f"Bearer {tok}"})
out["other"] = get("http://a.wild.test/o")
print(json.dumps(out))`,
        });
        assert.equal(s.exit_reason, "ok", s.stderr);
        const out = JSON.parse(s.stdout) as Record<string, [unknown, unknown]>;
        assert.equal(out.bound?.[0], 200, JSON.stringify(out));
        // Not one of the call's names: the proxy's resolver does not even answer for it.
        assert.equal(out.other?.[0], null, JSON.stringify(out));
        assert.match(String(out.other?.[1]), /Name or service not known/);
        const refused = (s as { network_refused?: Refused[] }).network_refused ?? [];
        assert.ok(
          refused.some((r) => r.host === "a.wild.test" && r.reason === "not_allowed"),
          JSON.stringify(refused),
        );
        const seen = fx.web.since(mark, "allowed");
        assert.match(seen, new RegExp(`header authorization=Bearer ${VALUE}\n`));
        assert.doesNotMatch(seen, /path=\/o/);
      });
    },
  );
}
