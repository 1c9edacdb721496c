// What setup writes for the local service, pure (decision 0018): the systemd unit (a parse test;
// test/setup/service-install.test.ts also runs `systemd-analyze verify` on it where that exists),
// the two commands on PATH, where the daemon logs, and where each dependency goes in the copy.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { DEFAULT_LOG_FILE, logTarget } from "../../src/cli/daemon.js";
import { placeDependencies } from "../../src/cli/install-tree.js";
import { parseUnit, renderServiceUnit, renderWrapper } from "../../src/cli/service-unit.js";

describe("the systemd unit", () => {
  const unit = parseUnit(renderServiceUnit("/usr/local/bin/scratchrun"));

  test("runs scratchrun daemon from the install, restarts it on failure, and is wanted at boot", () => {
    assert.deepEqual([...unit.keys()], ["Unit", "Service", "Install"]);
    const service = unit.get("Service")!;
    assert.deepEqual(service.get("ExecStart"), ["/usr/local/bin/scratchrun daemon"]);
    assert.deepEqual(service.get("Type"), ["simple"]);
    assert.deepEqual(service.get("Restart"), ["on-failure"]);
    // The daemon drains and destroys its sandboxes on SIGTERM: a bound, then SIGKILL.
    assert.deepEqual(service.get("KillMode"), ["mixed"]);
    assert.deepEqual(service.get("TimeoutStopSec"), ["120"]);
    assert.deepEqual(service.get("EnvironmentFile"), ["-/etc/default/scratchrun"]);
    assert.deepEqual(unit.get("Install")!.get("WantedBy"), ["multi-user.target"]);
  });

  test("refuses a relative path or one with spaces (systemd would split or refuse it)", () => {
    assert.throws(() => renderServiceUnit("bin/scratchrun"), /absolute/);
    assert.throws(() => renderServiceUnit("/opt/my tools/scratchrun"), /without spaces/);
  });

  test("the parser refuses what systemd would not read as we mean it", () => {
    assert.throws(() => parseUnit("ExecStart=/x\n"), /not a key=value in a section/);
    assert.throws(() => parseUnit("[Service]\nExecStart /x\n"), /not a key=value/);
    assert.throws(() => parseUnit("[Unit]\n[Unit]\n"), /twice/);
  });
});

describe("the commands on PATH", () => {
  test("run the installed copy on the Node that ran setup, passing every argument through", () => {
    const dir = mkdtempSync(join(tmpdir(), "sr-wrapper-"));
    try {
      const script = join(dir, "it's here.js");
      writeFileSync(script, "console.log(JSON.stringify(process.argv.slice(2)))\n");
      const wrapper = join(dir, "scratchrun");
      writeFileSync(wrapper, renderWrapper(process.execPath, script), { mode: 0o755 });
      const args = ["a b", "'q'", "$HOME", "--x=1", ""];
      const r = spawnSync(wrapper, args, { encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr);
      assert.deepEqual(JSON.parse(r.stdout), args);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("where the daemon logs (what doctor reports)", () => {
  test("the journal under systemd, else the log file; --log-file picks, - is stderr", () => {
    assert.equal(logTarget(undefined, undefined), DEFAULT_LOG_FILE);
    assert.equal(logTarget(undefined, "8:12345"), "journal");
    assert.equal(logTarget("/var/log/x.log", "8:12345"), "/var/log/x.log");
    assert.equal(logTarget("-", undefined), "stderr");
  });
});

describe("placeDependencies: the copy resolves as the original did", () => {
  test("a checkout's top-level packages and nested ones", () => {
    const places = placeDependencies("/src", [
      "/src/node_modules/zod",
      "/src/node_modules/@modelcontextprotocol/server",
      "/src/node_modules/rc",
      "/src/node_modules/rc/node_modules/strip-json-comments",
      "/src/node_modules/@a/b/node_modules/@c/d",
      "/src/node_modules/@a/b",
    ]);
    assert.deepEqual(Object.fromEntries(places), {
      "/src/node_modules/zod": "node_modules/zod",
      "/src/node_modules/@modelcontextprotocol/server": "node_modules/@modelcontextprotocol/server",
      "/src/node_modules/rc": "node_modules/rc",
      "/src/node_modules/rc/node_modules/strip-json-comments":
        "node_modules/rc/node_modules/strip-json-comments",
      "/src/node_modules/@a/b/node_modules/@c/d": "node_modules/@a/b/node_modules/@c/d",
      "/src/node_modules/@a/b": "node_modules/@a/b",
    });
  });

  test("npx's install: the package sits in node_modules beside its dependencies", () => {
    const root = "/root/.npm/_npx/abc/node_modules/scratchrun-mcp";
    const places = placeDependencies(root, [
      "/root/.npm/_npx/abc/node_modules/pino",
      "/root/.npm/_npx/abc/node_modules/scratchrun-mcp/node_modules/zod",
    ]);
    assert.deepEqual(Object.fromEntries(places), {
      "/root/.npm/_npx/abc/node_modules/pino": "node_modules/pino",
      "/root/.npm/_npx/abc/node_modules/scratchrun-mcp/node_modules/zod": "node_modules/zod",
    });
  });

  test("a path outside any node_modules is refused", () => {
    assert.throws(() => placeDependencies("/src", ["/elsewhere/zod"]), /not in a node_modules/);
  });
});
