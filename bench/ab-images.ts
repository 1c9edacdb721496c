// `node dist/bench/ab-images.js [rounds] [--backend namespace|microvm] [--builds]`: what an
// operator's image config costs. Two stdio servers of this build run at once, one on the default
// image, one on the shared test image with every kind of extra (test/helpers/custom-image.ts),
// their calls alternating one by one (the order flipping each round) so both see the same machine:
// p25/p50/p75 of `print(1)`-sized code per runtime through the MCP SDK's client. With --builds it
// first times a full build of each image (forced, into scratch images directories it removes
// afterwards: nothing a server uses is touched). Network "none". Run it under sr-locked.
import { rmSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { buildRootfs } from "../src/images/build.js";
import { settingsFrom } from "../src/schema/settings/values.js";
import {
  CUSTOM_CONFIG,
  CUSTOM_IMAGES_DIR,
  customImage,
  writeCustomFixture,
} from "../test/helpers/custom-image.js";
import { MCP_BIN } from "../test/helpers/mcp-client.js";
import { alternate } from "./stats.js";

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? (args.splice(i, 2)[1] ?? "") : undefined;
};
const backend = flag("--backend") ?? "namespace";
const timeBuilds = args.includes("--builds");
const rounds = Number(args.find((a) => /^\d+$/.test(a)) ?? 60);

/** Seconds of a forced build of the image into a scratch directory, then removed. */
async function timeBuild(name: string, config: string | null): Promise<number> {
  const dir = `${settingsFrom(process.env).images.dir}-bench-${name}`;
  rmSync(dir, { recursive: true, force: true });
  const env = { ...process.env, SCRATCHRUN_IMAGES: dir, SCRATCHRUN_IMAGE_CONFIG: config ?? "" };
  const t = performance.now();
  await buildRootfs({ images: settingsFrom(env).images, env, force: true, onProgress: () => {} });
  const s = (performance.now() - t) / 1000;
  rmSync(dir, { recursive: true, force: true });
  return Math.round(s);
}

const builds: Record<string, number> = {};
if (timeBuilds) {
  // Alternated too, custom first then default, so a warm apt cache does not favour one.
  const config = writeCustomFixture();
  builds.custom = await timeBuild("custom", config);
  builds.default = await timeBuild("default", null);
}

await customImage();
const servers = {
  default: {},
  custom: { SCRATCHRUN_IMAGES: CUSTOM_IMAGES_DIR, SCRATCHRUN_IMAGE_CONFIG: CUSTOM_CONFIG },
};
type Image = keyof typeof servers;

async function start(env: Record<string, string>): Promise<Client> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MCP_BIN],
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
      SCRATCHRUN_ISOLATION: backend,
      SCRATCHRUN_NETWORK: "none",
      SCRATCHRUN_LOCAL: "1",
      ...(process.env.SCRATCHRUN_IMAGES
        ? { SCRATCHRUN_IMAGES: process.env.SCRATCHRUN_IMAGES }
        : {}),
      ...env,
    },
    stderr: "ignore",
  });
  const client = new Client({ name: "ab-images", version: "1" });
  await client.connect(transport);
  return client;
}

const clients: Record<Image, Client> = {
  default: await start(servers.default),
  custom: await start(servers.custom),
};
const work = {
  "python3.12": "print(1)",
  "python3.11": "print(1)",
  node20: "console.log(1)",
  bash: "echo 1",
} as const;

async function call(image: Image, runtime: keyof typeof work): Promise<number> {
  const t = performance.now();
  const r = await clients[image].callTool(
    { name: "scratchrun_exec", arguments: { runtime, code: work[runtime] } },
    CallToolResultSchema,
    { timeout: 120_000 },
  );
  const ms = performance.now() - t;
  if (r.isError || (r.structuredContent as { stdout?: string }).stdout !== "1\n")
    throw new Error(`${image} ${runtime}: ${JSON.stringify(r).slice(0, 300)}`);
  return ms;
}

// The pool refills between calls: a microVM clone is restored and warmed up off the call path,
// which under TCG with two servers on two cores takes more than a second.
const pause = backend === "microvm" ? 2000 : 30;
const report = await alternate(
  ["default", "custom"] as const,
  Object.keys(work) as (keyof typeof work)[],
  call,
  rounds,
  pause,
);
process.stdout.write(
  `${JSON.stringify({ backend, rounds, buildSeconds: builds, ms: report }, null, 2)}\n`,
);
await clients.default.close();
await clients.custom.close();
