import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { hostCeiling } from "../../src/policy/host.js";
import { MCP_BIN, REPO_ROOT } from "../helpers/mcp-client.js";

/**
 * `scratchrun keys create|update` with policy flags (POL-KEYS-CLI), and the server-wide maxima
 * refused at start when out of range (POL-RAISE): the built commands as an operator runs them,
 * on a SQLite state directory of their own. No sandbox starts.
 */
const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");
const home = mkdtempSync(join(tmpdir(), "sr-keys-cli-"));
after(() => rmSync(home, { recursive: true, force: true }));

function run(args: string[], env: Record<string, string> = {}, bin = CLI) {
  const r = spawnSync(process.execPath, [bin, ...args], {
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      SCRATCHRUN_HOME: home,
      SCRATCHRUN_LOCAL: "1",
      ...env,
    },
    encoding: "utf8",
    timeout: 30_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

interface Listed {
  id: string;
  name: string;
  policy: Record<string, unknown> | null;
}
const list = () => JSON.parse(run(["keys", "list", "--json"]).out) as Listed[];

describe("scratchrun keys: a key's policy from the command line", () => {
  test("create with flags prints the key once and stores the checked policy; update changes it; default clears", () => {
    const created = run([
      "keys",
      "create",
      "--name",
      "narrow",
      "--runtimes",
      "bash",
      "--max-timeout-ms",
      "5000",
      "--network",
      "none",
      "--concurrency",
      "2",
      "--rate",
      "20",
    ]);
    assert.equal(created.code, 0, created.err);
    assert.match(created.out, /^srk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}\n$/);
    assert.match(
      created.err,
      /runtimes=bash network=none max-timeout-ms=5000 concurrency=2 rate=20\/min/,
    );
    const narrow = list().find((k) => k.name === "narrow")!;
    assert.deepEqual(narrow.policy, {
      runtimes: ["bash"],
      network: "none",
      max_timeout_ms: 5000,
      concurrency: 2,
      rate_per_minute: 20,
    });
    const up = run([
      "keys",
      "update",
      "narrow",
      "--max-timeout-ms",
      "900000",
      "--max-memory-mb",
      "2048",
      "--network",
      "default",
      "--runtimes",
      "python3.11,bash",
    ]);
    assert.equal(up.code, 0, up.err);
    assert.deepEqual(list().find((k) => k.id === narrow.id)!.policy, {
      runtimes: ["python3.11", "bash"],
      max_timeout_ms: 900_000,
      max_memory_mb: 2048,
      concurrency: 2,
      rate_per_minute: 20,
    });
    const text = run(["keys", "list"]).out;
    assert.match(
      text,
      /narrow {2}\[runtimes=python3.11,bash max-timeout-ms=900000 max-memory-mb=2048/,
    );
    const plain = run(["keys", "create", "--name", "plain"]);
    assert.equal(plain.code, 0);
    assert.match(run(["keys", "list"]).out, /plain {2}\[server defaults\]/);
  });

  test("bad values exit 2 naming the flag or field and its range; nothing is written", () => {
    const before = list().length;
    const cases: [string[], RegExp][] = [
      [["--max-timeout-ms", "abc"], /--max-timeout-ms: "abc" is not a whole number/],
      [
        ["--max-timeout-ms", "900001"],
        /max_timeout_ms: must be from 100 to 900000 ms \(15 minutes\)/,
      ],
      [["--max-memory-mb", "16"], /max_memory_mb: must be from 32 to 1048576 MB/],
      [["--runtimes", "bash,ruby"], /runtimes\.1: /],
      [["--network", "lan"], /network: /],
      [["--concurrency", "0"], /concurrency: must be from 1 to 1000/],
      [["--rate=-3"], /--rate: "-3" is not a whole number/],
      [["--egress-allow", "10.0.0.1"], /IP addresses cannot be allowed/],
      [["--egress-allow", "*.com"], /whole top-level domain/],
      [["--network", "none", "--egress-allow", "pypi.org"], /egress_allow: needs network "public"/],
      [["--colour", "red"], /Unknown option '--colour'/],
    ];
    for (const [flags, re] of cases) {
      const r = run(["keys", "create", "--name", "bad", ...flags]);
      assert.equal(r.code, 2, `${flags.join(" ")}: ${r.err}`);
      assert.match(r.err, re, flags.join(" "));
      assert.equal(r.out, "", "no key printed");
      const u = run(["keys", "update", "narrow", ...flags]);
      assert.equal(u.code, 2, `update ${flags.join(" ")}: ${u.err}`);
    }
    assert.equal(list().length, before);
    assert.equal(list().find((k) => k.name === "narrow")!.policy?.max_timeout_ms, 900_000);
    const nobody = run(["keys", "update", "nobody", "--rate", "5"]);
    assert.deepEqual(
      [nobody.code, nobody.err],
      [1, 'scratchrun: no active key with id or name "nobody"\n'],
    );
    assert.equal(run(["keys", "update", "narrow"]).code, 2, "an update with nothing to change");
    assert.equal(run(["keys", "list", "--rate", "5"]).code, 2);
  });

  test("memory above what this host gives is stored, with a note that a server here caps it", () => {
    const host = hostCeiling().memoryMb;
    const r = run(["keys", "create", "--name", "big", "--max-memory-mb", String(host + 1)]);
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, new RegExp(`caps memory_mb at ${host} \\(half of its RAM\\)`));
  });
});

describe("server-wide maxima out of range refuse the start (nothing touched)", () => {
  test("serve: above the host's share of RAM or the 15-minute ceiling, one line naming the flag", () => {
    const fresh = join(home, "never-created");
    const host = hostCeiling().memoryMb;
    for (const [flags, re] of [
      [["--max-memory-mb", String(host + 1)], new RegExp(`--max-memory-mb.*from 32 to ${host} MB`)],
      [["--max-timeout-ms", "900001"], /--max-timeout-ms.*from 100 to 900000 ms/],
    ] as const) {
      const r = run(["serve", "--port", "0", ...flags], { SCRATCHRUN_HOME: fresh });
      assert.equal(r.code, 1, r.err);
      assert.match(r.err, re);
      assert.equal(r.err.trim().split("\n").length, 1, r.err);
      assert.equal(existsSync(fresh), false, "the state directory was not created");
    }
    const env = run(["serve", "--port", "0"], {
      SCRATCHRUN_HOME: fresh,
      SCRATCHRUN_MAX_TIMEOUT_MS: "forever",
    });
    assert.match(env.err, /SCRATCHRUN_MAX_TIMEOUT_MS.*not a whole number/);
    const worker = run(["serve", "--role", "worker", "--max-timeout-ms", "60000"]);
    assert.match(worker.err, /are for --role all and api/);
  });

  test("the stdio server exits before initialize with one line", () => {
    const r = run(["--max-timeout-ms", "1000000"], {}, MCP_BIN);
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /^scratchrun-mcp: SCRATCHRUN_MAX_TIMEOUT_MS \(--max-timeout-ms\) = "1000000": must be from 100 to 900000 ms/,
    );
    assert.equal(r.out, "", "nothing on the JSON-RPC channel");
    const remote = run(
      ["--max-memory-mb", "1024"],
      {
        SCRATCHRUN_URL: "http://127.0.0.1:9",
        SCRATCHRUN_API_KEY: "srk_x",
      },
      MCP_BIN,
    );
    assert.match(remote.err, /remote mode runs nothing here/);
  });
});

describe("scratchrun users: console users from the command line (CLI-USERS)", () => {
  const withStdin = (args: string[], input: string) => {
    const r = spawnSync(process.execPath, [CLI, ...args], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", SCRATCHRUN_HOME: home },
      encoding: "utf8",
      input,
      timeout: 30_000,
    });
    return { code: r.status, out: r.stdout, err: r.stderr };
  };

  test("create reads the password from stdin, never argv; bad names, roles and short passwords exit 2; keys take an owner", () => {
    const made = withStdin(
      ["users", "create", "--name", "ada", "--role", "admin"],
      "a-long-password-9\n",
    );
    assert.equal(made.code, 0, made.err);
    assert.match(made.err, /created admin ada \(u_[0-9a-f]{12}\)/);
    assert.equal(
      withStdin(["users", "create", "--name", "ada"], "a-long-password-9\n").code,
      2,
      "exists",
    );
    assert.equal(
      withStdin(["users", "create", "--name", "Bad Name"], "a-long-password-9\n").code,
      2,
    );
    assert.equal(
      withStdin(["users", "create", "--name", "eve", "--role", "root"], "a-long-password-9\n").code,
      2,
    );
    const short = withStdin(["users", "create", "--name", "eve"], "short\n");
    assert.equal(short.code, 2);
    assert.match(short.err, /12 to 1024 characters/);
    assert.match(run(["users", "list"]).out, /admin\s+ada/);
    const owned = run(["keys", "create", "--name", "ada-key", "--owner", "ada"]);
    assert.equal(owned.code, 0, owned.err);
    const ownerId = /u_[0-9a-f]{12}/.exec(made.err)![0];
    const listed = JSON.parse(run(["keys", "list", "--json"]).out) as {
      name: string;
      ownerId: string | null;
    }[];
    assert.equal(listed.find((k) => k.name === "ada-key")?.ownerId, ownerId);
    const nobody = run(["keys", "create", "--name", "x", "--owner", "nobody"]);
    assert.equal(nobody.code, 2);
    assert.match(nobody.err, /no console user named "nobody"/);
  });
});
