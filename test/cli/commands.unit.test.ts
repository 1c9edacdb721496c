// One command list (src/cli/commands.ts, issue 54): `scratchrun` dispatches from it, `npx -y
// scratchrun-mcp <command>` runs every command on it (before, 5 of 11: `templates`, `image`,
// `users`, `mcp` and `service` were taken for the MCP server's own arguments and failed), its
// usage lists every one, and a doc that names a `scratchrun` command names one of these.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { promisify } from "node:util";
import { COMMANDS, COMMAND_NAMES, usageLine } from "../../src/cli/commands.js";
import { GENERATED_DOCS } from "../../src/schema/doc-files.js";

const REPO = join(import.meta.dirname, "..", "..", "..");
const BIN = join(REPO, "dist/src/bin");
const run = promisify(execFile);

/** A bin's stdout, stderr and exit status, with no SCRATCHRUN_* setting and a home of its own. */
async function spawnBin(bin: string, args: string[], home: string) {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("SCRATCHRUN_")) env[k] = v;
  env.HOME = home;
  try {
    const r = await run(process.execPath, [join(BIN, bin), ...args], {
      env,
      encoding: "utf8",
      timeout: 20_000,
    });
    return { status: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const r = e as { code?: number; stdout?: string; stderr?: string };
    return { status: r.code ?? -1, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
  }
}

describe("one command list: scratchrun, scratchrun-mcp and the docs", () => {
  const home = mkdtempSync(join(tmpdir(), "sr-commands-"));
  after(() => rmSync(home, { recursive: true, force: true }));

  test("scratchrun-mcp NAME --help answers exactly as scratchrun NAME --help, for every command", async () => {
    // --help either prints the command's usage or is refused by the command's own parser: either
    // way the command ran, and none of them starts anything given it.
    const pairs = await Promise.all(
      COMMAND_NAMES.map(async (name) => ({
        name,
        cli: await spawnBin("scratchrun.js", [name, "--help"], home),
        npx: await spawnBin("scratchrun-mcp.js", [name, "--help"], home),
      })),
    );
    for (const { name, cli, npx } of pairs) {
      assert.deepEqual(npx, cli, `scratchrun-mcp ${name} --help`);
      assert.doesNotMatch(npx.stderr, /scratchrun-mcp: Unexpected argument/, name);
    }
  });

  test("an unknown command is named as one, with the usage, by both; options alone stay the server's", async () => {
    for (const bin of ["scratchrun.js", "scratchrun-mcp.js"]) {
      const r = await spawnBin(bin, ["frobnicate"], home);
      assert.equal(r.status, 2, bin);
      assert.match(r.stderr, /^scratchrun: unknown command "frobnicate"/, bin);
      for (const c of COMMANDS) assert.ok(r.stderr.includes(usageLine(c)), `${bin}: ${c.name}`);
    }
    const opt = await spawnBin("scratchrun-mcp.js", ["--no-such-option"], home);
    assert.equal(opt.status, 1);
    assert.match(opt.stderr, /^scratchrun-mcp: Unknown option '--no-such-option'/);
  });

  test("scratchrun --help lists every command's usage line", async () => {
    const r = await spawnBin("scratchrun.js", ["--help"], home);
    assert.equal(r.status, 0);
    for (const c of COMMANDS) assert.ok(r.stdout.includes(usageLine(c)), c.name);
  });

  test("every `scratchrun WORD` the docs say names a command of the list", () => {
    const stray: string[] = [];
    // Not a command: kubectl's namespace, claude's server name before its URL.
    const said = /(?<!(?:-n|http) )\bscratchrun ([a-z][a-z-]*)\b/g;
    for (const file of GENERATED_DOCS) {
      readFileSync(join(REPO, file), "utf8")
        .split("\n")
        .forEach((line, i) => {
          for (const m of line.matchAll(said))
            if (!(COMMAND_NAMES as readonly string[]).includes(m[1]!))
              stray.push(`${file}:${i + 1}: scratchrun ${m[1]}`);
        });
    }
    assert.deepEqual(stray, []);
  });
});
