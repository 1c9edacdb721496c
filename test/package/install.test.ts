import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { openDatabase } from "../../src/store/db.js";
import { KeyStore } from "../../src/store/keys.js";
import { waitFor } from "../api/harness.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { REPO_ROOT, textOf } from "../helpers/mcp-client.js";
import { descendants } from "../helpers/procs.js";
import { compileSchema, errorsOf } from "./json-schema.js";
import { LocalRegistry } from "./npm-registry.js";

// The package as a user gets it: `npm pack`, the tarball published to a local stand-in for the npm
// registry (npm-registry.ts: our package from the tarball, every dependency from the public registry),
// then started exactly as the README says, `npx -y NAME …`, in an empty directory outside the
// repository (nothing resolves to the repository's node_modules), by a real MCP client. NAME is
// what package.json publishes; a request for it never leaves the test, so a package of that name
// on the public registry (someone else's) can never stand in for ours. npm runs with
// ignore-scripts, which is what it does to better-sqlite3 once it holds back unapproved install
// scripts: the module is there, its native part is not.
const NOBODY = 65534;
const NAME = (JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { name: string })
  .name;

/**
 * The README's first five minutes, as printed (its first 40 lines): the MCP configs of paths 1
 * (local) and 2 (remote), and path 1's setup command. The tests run exactly these.
 */
const README_TOP = readFileSync(join(REPO_ROOT, "README.md"), "utf8")
  .split("\n")
  .slice(0, 40)
  .join("\n");
interface McpConfig {
  command: string;
  args: string[];
  env?: Record<string, string>;
}
const [LOCAL, REMOTE] = [...README_TOP.matchAll(/```json\n([\s\S]*?)```/g)].map(
  (m) =>
    (JSON.parse(m[1] ?? "") as { mcpServers: { scratchrun: McpConfig } }).mcpServers.scratchrun,
) as [McpConfig, McpConfig];
const SETUP = (/`(npx -y \S+ setup)`/.exec(README_TOP)?.[1] ?? "").split(" ");

let base: HostSnapshot;
let tmp: string;
/** An empty directory every `npx` runs in, as a user's would. */
let project: string;
let tarball: string;
let registry: LocalRegistry;
/** Where npx installed the package for root (found after the first `npx -y NAME`). */
let installed: string;
let nobodyHome: string;
let serve: { child: ChildProcess; url: string; exited: Promise<unknown> };
let key: string;

/** The environment of a user's MCP client: PATH and HOME, plus what the config sets. */
function rootEnv(extra: Record<string, string> = {}): Record<string, string> {
  const pass = [
    "SCRATCHRUN_IMAGES",
    "SCRATCHRUN_VM_CACHE",
    "SCRATCHRUN_PYTHON312",
    "SCRATCHRUN_TEMPLATE_CACHE",
  ];
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? "/root",
    npm_config_update_notifier: "false",
    npm_config_registry: registry.url,
    npm_config_cache: join(tmp, "npm-root"),
    npm_config_ignore_scripts: "true",
    ...Object.fromEntries(pass.flatMap((n) => (process.env[n] ? [[n, process.env[n]!]] : []))),
    ...extra,
  };
}

function nobodyEnv(extra: Record<string, string>): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: nobodyHome,
    npm_config_cache: join(nobodyHome, ".npm"),
    npm_config_update_notifier: "false",
    npm_config_registry: registry.url,
    npm_config_ignore_scripts: "true",
    ...extra,
  };
}

/** Runs `command args` (as `uid` if given) with the SDK's stdio client; stderr is captured. */
async function connect(
  command: string,
  args: string[],
  env: Record<string, string>,
  options: { uid?: number; cwd?: string } = {},
) {
  const asUser =
    options.uid === undefined
      ? { command, args }
      : {
          command: "setpriv",
          args: [
            `--reuid=${options.uid}`,
            `--regid=${options.uid}`,
            "--clear-groups",
            command,
            ...args,
          ],
        };
  const transport = new StdioClientTransport({
    ...asUser,
    env,
    cwd: options.cwd ?? project,
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const client = new Client({ name: "scratchrun-package-test", version: "1.0.0" });
  const connected = client.connect(transport).then(
    () => null,
    (e: unknown) => e,
  );
  return {
    client,
    transport,
    connected,
    stderr: () => stderr,
    call: async (args: Record<string, unknown>) =>
      (await client.callTool({ name: "scratchrun_exec", arguments: args }, CallToolResultSchema, {
        timeout: 180_000,
      })) as CallToolResult,
  };
}

/** The MCP server process npx started under `pid`: its uid and the native modules it mapped. */
function serverProcess(pid: number): { uid: number; nativeModules: string[] } {
  const server = descendants(pid).find((p) => {
    try {
      return /scratchrun-mcp\.js|\.bin\/scratchrun-mcp/.test(
        readFileSync(`/proc/${p}/cmdline`, "utf8"),
      );
    } catch {
      return false;
    }
  });
  assert.ok(server, "the server process runs under npx");
  const status = readFileSync(`/proc/${server}/status`, "utf8");
  const maps = readFileSync(`/proc/${server}/maps`, "utf8");
  return {
    uid: Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]),
    nativeModules: [...new Set(maps.split("\n").filter((l) => /\.node$/.test(l.trim())))],
  };
}

/** A command that must fail at start: its exit status and stderr. */
function startFailure(args: string[], env: Record<string, string>) {
  const r = spawnSync("npx", args, {
    cwd: project,
    env,
    input: "",
    encoding: "utf8",
    timeout: 120_000,
  });
  return { status: r.status, stderr: r.stderr.trim() };
}

before(async () => {
  base = snapshot();
  tmp = mkdtempSync(join(tmpdir(), "sr-package-"));
  chmodSync(tmp, 0o755);
  const packed = execFileSync("npm", ["pack", "--silent", "--pack-destination", tmp], {
    cwd: REPO_ROOT,
    encoding: "utf8",
  });
  tarball = join(tmp, packed.trim().split("\n").at(-1)!);
  registry = await new LocalRegistry(tarball, join(tmp, "registry.log")).start();
  project = join(tmp, "project");
  mkdirSync(project);
  // npx installs it (from the stand-in) on first use; `help` runs and exits.
  const help = spawnSync("npx", ["-y", NAME, "help"], {
    cwd: project,
    env: rootEnv(),
    encoding: "utf8",
    timeout: 300_000,
  });
  assert.equal(help.status, 0, help.stderr);
  assert.ok(registry.served(NAME), `npx fetched ${NAME} from the stand-in`);
  const npx = join(tmp, "npm-root", "_npx");
  const hash = readdirSync(npx).find((d) => existsSync(join(npx, d, "node_modules", NAME)));
  assert.ok(hash, `npx installed ${NAME} under ${npx}`);
  installed = join(npx, hash, "node_modules");
  nobodyHome = join(tmp, "nobody");
  mkdirSync(nobodyHome);
  chownSync(nobodyHome, NOBODY, NOBODY);

  // The ScratchRun server remote mode talks to: `scratchrun serve` from this repository.
  const home = join(tmp, "state");
  const db = openDatabase(home);
  key = (await new KeyStore(db).create("package-test")).key;
  db.close();
  const child = spawn(
    process.execPath,
    [join(REPO_ROOT, "dist/src/bin/scratchrun.js"), "serve", "--host", "127.0.0.1", "--port", "0"],
    {
      env: {
        ...process.env,
        SCRATCHRUN_HOME: home,
        SCRATCHRUN_ISOLATION: "namespace",
        SCRATCHRUN_NETWORK: "none",
      },
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  const exited = new Promise((r) => child.once("exit", r));
  const url = await waitFor(
    "serve to listen",
    () => /serving on (http:\/\/\S+)/.exec(err)?.[1],
    120_000,
  );
  serve = { child, url, exited };
});

after(async () => {
  serve?.child.kill("SIGTERM");
  await serve?.exited;
  await registry?.stop();
  rmSync(tmp, { recursive: true, force: true });
  await assertNoLeaks(base);
});

describe("the packed package", () => {
  test("the README's first five minutes name this package: a local and a remote config, and setup", () => {
    assert.deepEqual(LOCAL, { command: "npx", args: ["-y", NAME] });
    assert.deepEqual(
      { ...REMOTE, env: Object.keys(REMOTE.env ?? {}) },
      {
        command: "npx",
        args: ["-y", NAME],
        env: ["SCRATCHRUN_URL", "SCRATCHRUN_API_KEY"],
      },
    );
    assert.deepEqual(SETUP, ["npx", "-y", NAME, "setup"]);
  });

  test("holds what the installed server reads, no build output, and bins for npx", () => {
    const files = execFileSync("tar", ["tzf", tarball], { encoding: "utf8" }).split("\n");
    for (const f of [
      "package/dist/src/bin/scratchrun-mcp.js",
      "package/dist/src/cli/mcp.js",
      "package/guest/agent.c",
      "package/guest/init",
      "package/images/rootfs/packages.txt",
      "package/images/vm/modules.txt",
      "package/scripts/setup.sh",
      "package/scripts/build-guest.mjs",
      "package/src/backends/microvm/sealed-ram.c",
      "package/src/mcp/view/result.html",
      "package/src/mcp/view/result.js",
      "package/src/mcp/view/result.css",
      "package/server.json",
    ])
      assert.ok(files.includes(f), `${f} is in the tarball`);
    assert.deepEqual(
      files.filter((f) => /^package\/(build|test|bench|node_modules)\/|\.map$/.test(f)),
      [],
    );
    const pkg = JSON.parse(readFileSync(join(installed, NAME, "package.json"), "utf8")) as {
      bin: Record<string, string>;
    };
    // npx runs the bin named like the package when there are several.
    assert.equal(pkg.bin[NAME], "dist/src/bin/scratchrun-mcp.js");
    assert.ok(existsSync(join(installed, "better-sqlite3/package.json")));
    assert.equal(
      existsSync(join(installed, "better-sqlite3/build")),
      false,
      "better-sqlite3 is installed unbuilt (else the remote cases prove nothing about it)",
    );
  });

  test("remote mode, the README's path 2 config with a real URL and key: no root, no build, nothing native", async () => {
    const c = await connect(
      REMOTE.command,
      REMOTE.args,
      nobodyEnv({ ...REMOTE.env, SCRATCHRUN_URL: serve.url, SCRATCHRUN_API_KEY: key }),
      { uid: NOBODY },
    );
    try {
      assert.equal(await c.connected, null, c.stderr());
      const tools = await c.client.listTools();
      assert.deepEqual(tools.tools.map((t) => t.name).sort(), [
        "scratchrun_exec",
        "scratchrun_runtimes",
        "scratchrun_session_end",
        "scratchrun_session_start",
      ]);
      const r = await c.call({
        runtime: "python3.12",
        code: "import sys; print(sys.version_info[:2]); open('/tmp/d.svg','w').write('<svg xmlns=\"http://www.w3.org/2000/svg\"/>')",
        return_files: ["/tmp/d.svg"],
      });
      assert.equal(r.isError, false, textOf(r));
      assert.equal((r.structuredContent as { stdout: string }).stdout, "(3, 12)\n");
      assert.ok(r.content.some((b) => b.type === "image" && b.mimeType === "image/svg+xml"));
      const proc = serverProcess(c.transport.pid!);
      assert.equal(proc.uid, NOBODY);
      assert.deepEqual(proc.nativeModules, [], "remote mode maps no native module");
      assert.match(c.stderr(), /scratchrun-mcp: ready \(remote http:\/\/127\.0\.0\.1:\d+/);
      assert.equal(existsSync(join(installed, NAME, "build")), false, "nothing was built");
    } finally {
      await c.client.close();
    }
  });

  test("the product page's config as printed (key, no URL): one line naming SCRATCHRUN_URL, at once", async () => {
    const c = await connect(
      "npx",
      ["-y", NAME],
      nobodyEnv({ SCRATCHRUN_API_KEY: "sr_live_your_key_here" }),
      { uid: NOBODY },
    );
    const failed = await c.connected;
    assert.ok(failed instanceof Error, "initialize is refused, not left hanging");
    const lines = c.stderr().trim().split("\n");
    assert.equal(lines.length, 1, c.stderr());
    assert.match(lines[0]!, /^scratchrun-mcp: SCRATCHRUN_API_KEY is set but SCRATCHRUN_URL is not/);
    assert.match(lines[0]!, /Set SCRATCHRUN_URL to your ScratchRun server/);
  });

  test("remote mode with a wrong key: one line saying the key was refused", () => {
    const r = startFailure(
      ["-y", NAME],
      rootEnv({ SCRATCHRUN_URL: serve.url, SCRATCHRUN_API_KEY: "srk_000000000000_wrong" }),
    );
    assert.equal(r.status, 1);
    assert.equal(r.stderr.split("\n").length, 1, r.stderr);
    assert.match(r.stderr, /^scratchrun-mcp: .*SCRATCHRUN_API_KEY/);
  });

  test("serve and keys say in one line how to get SQLite when npm held back its build", () => {
    const r = startFailure(["-y", NAME, "keys", "list"], rootEnv());
    assert.equal(r.status, 1);
    assert.equal(r.stderr.split("\n").length, 1, r.stderr);
    assert.match(r.stderr, /better-sqlite3/);
    assert.match(r.stderr, /npm install-scripts approve better-sqlite3/);
  });

  test("local mode before setup: one line naming the setup command, and nothing is built", async () => {
    const c = await connect(LOCAL.command, LOCAL.args, rootEnv());
    assert.ok((await c.connected) instanceof Error, "initialize is refused, not left hanging");
    const lines = c.stderr().trim().split("\n");
    assert.equal(lines.length, 1, c.stderr());
    assert.match(lines[0]!, /^scratchrun-mcp: the sandbox agent is not built/);
    assert.ok(lines[0]!.includes(`Run npx -y ${NAME} setup (as root)`), lines[0]);
    assert.equal(existsSync(join(installed, NAME, "build")), false);
  });

  test("self-host as the README says: setup (idempotent), then local mode on both backends", async () => {
    // npx's own cache lives under /root (0700): the sandbox uids cannot reach an agent built there.
    chmodSync(tmp, 0o700);
    try {
      const [setupCommand = "npx", ...setupArgs] = SETUP;
      // Its local service's install goes to a prefix of the test's, not this host's /usr/local.
      const prefix = join(tmp, "prefix");
      const first = spawnSync(setupCommand, setupArgs, {
        cwd: project,
        env: rootEnv({ SCRATCHRUN_PREFIX: prefix }),
        encoding: "utf8",
        timeout: 1_500_000,
      });
      assert.equal(first.status, 0, first.stderr);
      assert.match(first.stderr, /==> Debian packages/);
      assert.match(first.stderr, /build-guest: built .*\/build\/guest\/agent/);
      assert.match(first.stderr, /==> runtime image/);
      assert.match(first.stderr, /==> microVM guest/);
      assert.match(first.stderr, /==> local service/);
      assert.ok(existsSync(join(prefix, "bin", "scratchrun-mcp")), "scratchrun-mcp is installed");
      assert.match(first.stderr, /==> ready/);
      const again = spawnSync(setupCommand, setupArgs, {
        cwd: project,
        env: rootEnv({ SCRATCHRUN_PREFIX: prefix }),
        encoding: "utf8",
        timeout: 600_000,
      });
      assert.equal(again.status, 0, again.stderr);
      assert.match(again.stderr, /build-guest: .* up to date/);
      assert.match(again.stderr, /image for recipe \w+ is up to date/);

      // A microVM guest that setup did not build (another cache): one line, and nothing built
      // while the client waits for initialize.
      const emptyCache = join(tmp, "vm-cache");
      mkdirSync(emptyCache);
      const unbuilt = await connect(
        "npx",
        ["-y", NAME],
        rootEnv({ SCRATCHRUN_VM_CACHE: emptyCache, SCRATCHRUN_NETWORK: "none" }),
      );
      assert.ok((await unbuilt.connected) instanceof Error, "initialize is refused, not delayed");
      const lines = unbuilt.stderr().trim().split("\n");
      assert.equal(lines.length, 1, unbuilt.stderr());
      assert.match(lines[0]!, /^scratchrun-mcp: the microVM kernel and initramfs are not built/);
      assert.ok(lines[0]!.includes(`Run npx -y ${NAME} setup`), lines[0]);
      assert.deepEqual(readdirSync(emptyCache), [], "nothing was built");

      for (const isolation of ["namespace", "microvm"]) {
        const c = await connect(
          LOCAL.command,
          LOCAL.args,
          rootEnv({
            SCRATCHRUN_ISOLATION: isolation,
            SCRATCHRUN_NETWORK: "none",
            SCRATCHRUN_POOL_SIZE: "0",
          }),
        );
        try {
          assert.equal(await c.connected, null, c.stderr());
          const r = await c.call({ runtime: "bash", code: "echo local-$((6*7))" });
          assert.equal(r.isError, false, textOf(r));
          const s = r.structuredContent as { stdout: string; isolation: string };
          assert.equal(s.stdout, "local-42\n");
          assert.match(
            s.isolation,
            isolation === "namespace" ? /^namespace$/ : /^microvm-(kvm|tcg)$/,
          );
        } finally {
          await c.client.close();
        }
      }
    } finally {
      chmodSync(tmp, 0o755);
    }
  });
});

describe("the desktop bundle (MCPB, remote mode)", () => {
  let bundle: string;
  let unpacked: string;
  let manifest: {
    server: { mcp_config: { command: string; args: string[]; env: Record<string, string> } };
    tools: { name: string }[];
    user_config: Record<string, { sensitive?: boolean; required?: boolean }>;
    version: string;
  };
  const mcpbCli = join(REPO_ROOT, "node_modules/@anthropic-ai/mcpb/dist/cli/cli.js");

  before(() => {
    bundle = join(tmp, "scratchrun.mcpb");
    execFileSync(
      process.execPath,
      [join(REPO_ROOT, "scripts/build-mcpb.mjs"), "--tarball", tarball, "--out", bundle],
      { stdio: ["ignore", "ignore", "inherit"], env: rootEnv() },
    );
    unpacked = join(tmp, "unpacked");
    execFileSync(process.execPath, [mcpbCli, "unpack", bundle, unpacked], { stdio: "ignore" });
    execFileSync("chmod", ["-R", "a+rX", unpacked]);
    manifest = JSON.parse(readFileSync(join(unpacked, "manifest.json"), "utf8")) as typeof manifest;
  });

  test("its manifest is valid against the MCPB manifest schema; the key is sensitive", () => {
    const schema = JSON.parse(
      readFileSync(
        join(REPO_ROOT, "node_modules/@anthropic-ai/mcpb/schemas/mcpb-manifest-v0.3.schema.json"),
        "utf8",
      ),
    ) as object;
    const validate = compileSchema(schema);
    assert.ok(validate(manifest), errorsOf(validate));
    const broken = structuredClone(manifest) as unknown as { server: { type: string } };
    broken.server.type = "docker";
    assert.equal(validate(broken), false, "the schema is not vacuous");
    const pkg = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as {
      version: string;
    };
    assert.equal(manifest.version, pkg.version);
    assert.equal(manifest.user_config.api_key?.sensitive, true);
    assert.equal(manifest.user_config.api_key?.required, true);
    assert.equal(manifest.user_config.server_url?.required, true);
    assert.equal(manifest.server.mcp_config.env.SCRATCHRUN_API_KEY, "${user_config.api_key}");
    assert.equal(manifest.server.mcp_config.env.SCRATCHRUN_URL, "${user_config.server_url}");
    const v = spawnSync(process.execPath, [mcpbCli, "validate", join(unpacked, "manifest.json")], {
      encoding: "utf8",
    });
    assert.equal(v.status, 0, `${v.stdout}${v.stderr}`);
  });

  test("it holds no native module and none of the local-mode machinery", () => {
    const names = execFileSync("python3", [
      "-c",
      "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))",
      bundle,
    ])
      .toString()
      .split("\n");
    assert.ok(names.includes("manifest.json"));
    assert.deepEqual(
      names.filter(
        (n) =>
          /\.node$|better-sqlite3/.test(n) || new RegExp(`${NAME}/(guest|images|scripts)/`).test(n),
      ),
      [],
    );
  });

  test("unpacked and started as a desktop host would, a real client lists and calls the tools", async () => {
    const vars: Record<string, string> = {
      __dirname: unpacked,
      "user_config.server_url": serve.url,
      "user_config.api_key": key,
    };
    const fill = (s: string) => s.replace(/\$\{([^}]+)\}/g, (_, name: string) => vars[name] ?? "");
    const { command, args, env } = manifest.server.mcp_config;
    assert.equal(command, "node");
    const c = await connect(
      process.execPath,
      args.map(fill),
      nobodyEnv(Object.fromEntries(Object.entries(env).map(([k, v]) => [k, fill(v)]))),
      { uid: NOBODY, cwd: unpacked },
    );
    try {
      assert.equal(await c.connected, null, c.stderr());
      const tools = await c.client.listTools();
      assert.deepEqual(
        tools.tools.map((t) => t.name).sort(),
        manifest.tools.map((t) => t.name).sort(),
        "the manifest lists the tools the server has",
      );
      const r = await c.call({ runtime: "node20", code: "console.log(process.version)" });
      assert.equal(r.isError, false, textOf(r));
      assert.match((r.structuredContent as { stdout: string }).stdout, /^v20\./);
    } finally {
      await c.client.close();
    }
  });
});
