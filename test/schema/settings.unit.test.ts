import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { setting, settingOn } from "../../src/schema/settings/read.js";
import {
  SETTINGS,
  SETTING_NAMES,
  type Setting,
  type SettingName,
} from "../../src/schema/settings/table.js";
import {
  editDistance,
  nearestSetting,
  unknownSettingWarnings,
  unknownSettings,
} from "../../src/schema/settings/unknown.js";
import { unsetText } from "../../src/schema/settings/doc.js";
import { settingsFrom } from "../../src/schema/settings/values.js";
import { serverPolicy } from "../../src/policy/server-policy.js";
import { uplinkConfig } from "../../src/net/uplink.js";
import { DEFAULT_LEASE_TTL_MS } from "../../src/cluster/api-role.js";
import { DEFAULT_POLL_MS } from "../../src/cluster/workers.js";
import { isolationChoice, poolSizes } from "../../src/compose/engine-factory.js";
import { RUNTIMES } from "../../src/runtimes/names.js";
import { PYTHON_RUNTIMES } from "../helpers/pythons.js";

const REPO = join(import.meta.dirname, "..", "..", "..");
const read = (f: string) => readFileSync(join(REPO, f), "utf8");
const entry = (name: SettingName): Setting => SETTINGS[name];
const NAME = /SCRATCHRUN_[A-Z0-9_]*[A-Z0-9]/g;

/** Every SCRATCHRUN_ name in these files and the files under these folders, with where. */
function namesIn(paths: readonly string[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const visit = (p: string) => {
    if (statSync(join(REPO, p)).isDirectory()) {
      for (const name of readdirSync(join(REPO, p))) visit(join(p, name));
      return;
    }
    const text = read(p);
    for (const m of text.matchAll(NAME)) {
      // The warning's own example in a doc names a slip on purpose.
      if (text.slice(0, m.index).endsWith("unknown setting ")) continue;
      const where = out.get(m[0]) ?? [];
      if (!where.includes(p)) out.set(m[0], [...where, p]);
    }
  };
  for (const p of paths) if (existsSync(join(REPO, p))) visit(p);
  return out;
}

describe("the settings schema", () => {
  it("names are SCRATCHRUN_ words; a number's unit is in its name, and only a number's", () => {
    for (const name of SETTING_NAMES) {
      const s = entry(name);
      assert.match(name, /^SCRATCHRUN_[A-Z0-9]+(_[A-Z0-9]+)*$/);
      const unit = name.endsWith("_MS") ? "ms" : name.endsWith("_MB") ? "MB" : null;
      if (s.kind === "number") assert.equal(s.unit, unit, name);
      else assert.equal(unit, null, `${name} is a ${s.kind} with a unit in its name`);
    }
  });

  it("every setting has readers and a one-line doc; an enum's default is one of its values", () => {
    for (const name of SETTING_NAMES) {
      const s = entry(name);
      assert.ok(s.readers.length > 0, name);
      assert.ok(s.doc.length > 10 && !/[\n|]/.test(s.doc), `${name}: ${s.doc}`);
      if (s.kind === "enum" && "default" in s) assert.ok(s.values.includes(s.default), name);
      if (s.kind === "number" && !("unset" in s))
        assert.match("default" in s ? s.default : s.fallback, /^\d+$/, name);
    }
  });

  it("a shared row is an earlier setting's, of the same readers", () => {
    for (const name of SETTING_NAMES) {
      const row = entry(name).rowOf;
      if (row === undefined) continue;
      assert.ok(Object.hasOwn(SETTINGS, row), `${name}: rowOf ${row}`);
      const first = entry(row as SettingName);
      assert.equal(first.rowOf, undefined, `${name}: ${row} shares a row itself`);
      assert.ok(SETTING_NAMES.indexOf(row as SettingName) < SETTING_NAMES.indexOf(name), name);
      assert.deepEqual([...first.readers].sort(), [...entry(name).readers].sort(), name);
    }
  });

  it("setting(): the raw value, the schema's default when unset, an empty value kept", () => {
    assert.equal(setting("SCRATCHRUN_POOL_SIZE", {}), "1");
    assert.equal(
      setting("SCRATCHRUN_POOL_SIZE", { SCRATCHRUN_POOL_SIZE: "python3.11=2" }),
      "python3.11=2",
    );
    assert.equal(setting("SCRATCHRUN_NETWORK", { SCRATCHRUN_NETWORK: "" }), "");
    assert.equal(setting("SCRATCHRUN_ISOLATION", {}), "microvm");
    // A reader's own fallback is the reader's: the accessor says "unset".
    assert.equal(setting("SCRATCHRUN_MAX_TIMEOUT_MS", {}), undefined);
    assert.equal(setting("SCRATCHRUN_DNS", {}), undefined);
    assert.equal(setting("SCRATCHRUN_URL", { SCRATCHRUN_URL: "http://x" }), "http://x");
  });

  it("settingOn(): an on-flag only by its value, an off-flag unless its value", () => {
    assert.equal(settingOn("SCRATCHRUN_PREIMPORT", {}), true);
    assert.equal(settingOn("SCRATCHRUN_PREIMPORT", { SCRATCHRUN_PREIMPORT: "0" }), false);
    assert.equal(settingOn("SCRATCHRUN_PREIMPORT", { SCRATCHRUN_PREIMPORT: "no" }), true);
    assert.equal(settingOn("SCRATCHRUN_ENABLE_FORWARDING", {}), true);
    assert.equal(
      settingOn("SCRATCHRUN_ENABLE_FORWARDING", { SCRATCHRUN_ENABLE_FORWARDING: "0" }),
      false,
    );
    assert.equal(settingOn("SCRATCHRUN_DEBUG_JAIL", {}), false);
    assert.equal(settingOn("SCRATCHRUN_DEBUG_JAIL", { SCRATCHRUN_DEBUG_JAIL: "true" }), false);
    assert.equal(settingOn("SCRATCHRUN_DEBUG_JAIL", { SCRATCHRUN_DEBUG_JAIL: "1" }), true);
  });
});

describe("the defaults the README quotes are the code's", () => {
  const shown = (name: SettingName) => unsetText(entry(name)).replaceAll("`", "");

  it("the server-wide maxima fall back to the product's", () => {
    const policy = serverPolicy({});
    assert.equal(shown("SCRATCHRUN_MAX_TIMEOUT_MS"), String(policy.timeoutMs.max));
    assert.equal(shown("SCRATCHRUN_MAX_MEMORY_MB"), String(policy.memoryMb.max));
  });

  it("the uplink's resolvers and prefix, the replicas' lease and poll", () => {
    const uplink = uplinkConfig();
    assert.equal(shown("SCRATCHRUN_DNS"), uplink.dnsResolvers.join(","));
    assert.equal(shown("SCRATCHRUN_NET_PREFIX"), uplink.prefix);
    assert.equal(shown("SCRATCHRUN_LEASE_TTL_MS"), String(DEFAULT_LEASE_TTL_MS));
    assert.equal(shown("SCRATCHRUN_WORKER_POLL_MS"), String(DEFAULT_POLL_MS));
  });

  it("root's state, images and VM cache directories", () => {
    const getuid = process.getuid;
    process.getuid = () => 0;
    try {
      const root = settingsFrom({});
      assert.equal(shown("SCRATCHRUN_HOME"), root.home);
      assert.equal(shown("SCRATCHRUN_IMAGES"), root.images.dir);
      assert.equal(shown("SCRATCHRUN_VM_CACHE"), root.images.vmCache);
    } finally {
      process.getuid = getuid;
    }
  });

  it("the container's address and port (container/entrypoint.sh)", () => {
    const entrypoint = read("container/entrypoint.sh");
    for (const name of ["SCRATCHRUN_HOST", "SCRATCHRUN_PORT"] as const)
      assert.ok(entrypoint.includes(`"\${${name}:-${shown(name)}}"`), name);
  });

  it("the backend, the pool size and the tests' Python", () => {
    assert.equal(isolationChoice({}), SETTINGS.SCRATCHRUN_ISOLATION.default);
    for (const v of SETTINGS.SCRATCHRUN_ISOLATION.values)
      assert.equal(isolationChoice({ SCRATCHRUN_ISOLATION: v }), v);
    assert.deepEqual(
      Object.values(poolSizes({})),
      RUNTIMES.map(() => Number(SETTINGS.SCRATCHRUN_POOL_SIZE.default)),
    );
    assert.deepEqual(SETTINGS.SCRATCHRUN_TEST_PYTHON.values, PYTHON_RUNTIMES);
  });
});

describe("settings in their final types (values.ts)", () => {
  it("remote mode: off, a server and its key, or a clear refusal naming what is missing", () => {
    const remote = (env: Record<string, string>) => settingsFrom(env).remote;
    assert.equal(remote({}), null);
    assert.deepEqual(remote({ SCRATCHRUN_URL: "http://h:8787", SCRATCHRUN_API_KEY: "k" }), {
      url: "http://h:8787",
      apiKey: "k",
    });
    assert.throws(() => remote({ SCRATCHRUN_API_KEY: "k" }), /SCRATCHRUN_URL is not/);
    assert.throws(() => remote({ SCRATCHRUN_URL: "http://h" }), /SCRATCHRUN_API_KEY is not/);
    assert.throws(
      () => remote({ SCRATCHRUN_URL: "ftp://h", SCRATCHRUN_API_KEY: "k" }),
      /is not an http\(s\) URL/,
    );
  });

  it("each value is parsed once, on its first read, and a bad one fails only its own read", () => {
    const settings = settingsFrom({ SCRATCHRUN_TASK_AFTER_MS: "soon" });
    assert.equal(settings.logLevel, "info");
    assert.throws(() => settings.taskAfterMs, /SCRATCHRUN_TASK_AFTER_MS must be a whole number/);
    const env: Record<string, string> = { SCRATCHRUN_TASK_AFTER_MS: "5" };
    const kept = settingsFrom(env);
    assert.equal(kept.taskAfterMs, 5);
    env.SCRATCHRUN_TASK_AFTER_MS = "7";
    assert.equal(kept.taskAfterMs, 5);
  });
});

describe("the schema knows every SCRATCHRUN_ name, and each is used", () => {
  it("every name the code, scripts, test helpers, container, deploy files and docs say is a setting", () => {
    const said = namesIn([
      "src",
      "scripts",
      "test/helpers",
      "container",
      "deploy",
      "docs",
      "README.md",
      "bench",
    ]);
    // The schema's own examples of a slip are unknown on purpose.
    const unknown = [...said]
      .map(
        ([name, where]) =>
          [name, where.filter((w) => !w.startsWith("src/schema/settings/"))] as const,
      )
      .filter(([name, where]) => where.length > 0 && !Object.hasOwn(SETTINGS, name));
    assert.ok(said.size > 30, "names found");
    assert.deepEqual(
      unknown.map(([name, where]) => `${name} (${where.join(", ")})`),
      [],
      "declare these in src/schema/settings/table.ts",
    );
  });

  it("every setting is read or set somewhere outside the schema", () => {
    const used = namesIn(["src", "scripts", "test", "container"]);
    // values.ts parses settings into their typed object: a reader, not the table.
    const schema = (where: string) =>
      where.startsWith("src/schema/settings/") &&
      !where.startsWith("src/schema/settings/values.ts");
    const unused = SETTING_NAMES.filter(
      (name) => !(used.get(name) ?? []).some((where) => !schema(where)),
    );
    assert.deepEqual(unused, [], "remove these from the schema, or read them");
  });
});

describe("unknown settings are warned about at start", () => {
  it("editDistance counts insertions, deletions, substitutions and neighbour swaps", () => {
    assert.equal(editDistance("", "abc"), 3);
    assert.equal(editDistance("abc", ""), 3);
    assert.equal(editDistance("abc", "abc"), 0);
    assert.equal(editDistance("ab", "ba"), 1);
    assert.equal(editDistance("kitten", "sitting"), 3);
    assert.equal(editDistance("POOLSIZE", "POOL_SIZE"), 1);
    assert.equal(editDistance("POOL_SZIE", "POOL_SIZE"), 1);
  });

  it("nearestSetting suggests a slip's name, and nothing for a stranger or an ambiguity", () => {
    const cases: [string, SettingName | null][] = [
      ["SCRATCHRUN_POOLSIZE", "SCRATCHRUN_POOL_SIZE"],
      ["SCRATCHRUN_POOL_SZIE", "SCRATCHRUN_POOL_SIZE"],
      ["SCRATCHRUN_ISOLATON", "SCRATCHRUN_ISOLATION"],
      ["SCRATCHRUN_isolation", "SCRATCHRUN_ISOLATION"],
      ["scratchrun_pool_size", "SCRATCHRUN_POOL_SIZE"],
      ["SCRATCHRUN_IMAGE", "SCRATCHRUN_IMAGES"],
      ["SCRATCHRUN_TIMEOUT_MS", "SCRATCHRUN_MAX_TIMEOUT_MS"],
      ["SCRATCHRUN_MAX_TIMEOUT", "SCRATCHRUN_MAX_TIMEOUT_MS"],
      ["SCRATCHRUN_EGRESS_ALLOWLIST", "SCRATCHRUN_EGRESS_ALLOW"],
      ["SCRATCHRUN_POOL", null],
      ["SCRATCHRUN_TOKEN", null],
      ["SCRATCHRUN_DSN", "SCRATCHRUN_DNS"],
      ["SCRATCHRUN_", null],
      ["SCRATCHRUN_XYZZY_FROBNICATE", null],
    ];
    for (const [name, want] of cases) assert.equal(nearestSetting(name), want, name);
  });

  it("unknownSettings: names only (never values), sorted, any case of the prefix", () => {
    const env = {
      SCRATCHRUN_POOL_SIZE: "2",
      SCRATCHRUN_POOLSIZE: "secret-value-1",
      scratchrun_network: "none",
      SCRATCHRUN_ZZZ: undefined,
      MY_SCRATCHRUN_THING: "x",
      PATH: "/bin",
      SCRATCHRUN_AAA_UNHEARD_OF_THING: "secret-value-2",
    };
    const found = unknownSettings(env);
    assert.deepEqual(found, [
      { name: "SCRATCHRUN_AAA_UNHEARD_OF_THING", suggestion: null },
      { name: "SCRATCHRUN_POOLSIZE", suggestion: "SCRATCHRUN_POOL_SIZE" },
      { name: "scratchrun_network", suggestion: "SCRATCHRUN_NETWORK" },
    ]);
    assert.doesNotMatch(unknownSettingWarnings(env, "scratchrun").join("\n"), /secret-value/);
    assert.deepEqual(unknownSettings({}), []);
    const known = Object.fromEntries(SETTING_NAMES.map((n) => [n, "x"]));
    assert.deepEqual(unknownSettings(known), []);
  });

  it("one line each, naming the program and the suggestion", () => {
    assert.deepEqual(
      unknownSettingWarnings(
        { SCRATCHRUN_POOLSIZE: "2", SCRATCHRUN_FOO_BAR_BAZ: "1" },
        "scratchrun",
      ),
      [
        "scratchrun: unknown setting SCRATCHRUN_FOO_BAR_BAZ",
        "scratchrun: unknown setting SCRATCHRUN_POOLSIZE (did you mean SCRATCHRUN_POOL_SIZE?)",
      ],
    );
  });

  it("the executables warn once on stderr and keep stdout as it was", () => {
    const clean = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.toUpperCase().startsWith("SCRATCHRUN_")),
    );
    const bin = (name: string) => join(REPO, "dist", "src", "bin", name);
    const usage = spawnSync(process.execPath, [bin("scratchrun.js"), "help"], {
      encoding: "utf8",
      env: clean,
    });
    const warned = spawnSync(process.execPath, [bin("scratchrun.js"), "help"], {
      encoding: "utf8",
      env: { ...clean, SCRATCHRUN_POOLSIZE: "2" },
    });
    assert.equal(warned.status, 0, warned.stderr);
    assert.equal(warned.stdout, usage.stdout);
    assert.equal(
      warned.stderr,
      "scratchrun: unknown setting SCRATCHRUN_POOLSIZE (did you mean SCRATCHRUN_POOL_SIZE?)\n",
    );
    // The stdio MCP server (remote mode, a server that is not there: it stops at once).
    const mcp = spawnSync(process.execPath, [bin("scratchrun-mcp.js")], {
      encoding: "utf8",
      input: "",
      timeout: 20_000,
      env: {
        ...clean,
        SCRATCHRUN_URL: "http://127.0.0.1:1",
        SCRATCHRUN_API_KEY: "k",
        SCRATCHRUN_ISOLATON: "namespace",
      },
    });
    assert.equal(mcp.status, 1, mcp.stderr);
    assert.equal(mcp.stdout, "");
    const lines = mcp.stderr.trimEnd().split("\n");
    assert.equal(
      lines[0],
      "scratchrun-mcp: unknown setting SCRATCHRUN_ISOLATON (did you mean SCRATCHRUN_ISOLATION?)",
    );
    assert.match(lines[1] ?? "", /^scratchrun-mcp: cannot reach the ScratchRun server/);
    assert.equal(lines.length, 2, mcp.stderr);
  });
});
