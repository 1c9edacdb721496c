import { existsSync } from "node:fs";
import { parseArgs } from "node:util";
import { withImageConfig } from "../images/config-load.js";
import { settingsFrom } from "../schema/settings/values.js";

export const IMAGE_USAGE = `scratchrun image build [--force] [--image-config PATH]

  Builds the runtime image of the current recipe (as root), the image config included, with its
  progress on stderr; then the microVM root disk of it. Cached by the recipe's hash: with nothing
  changed it takes a second. Every package the config asks for is checked inside the image. On
  success the image becomes the one servers start with and images no live server uses are
  removed; on failure nothing changes and running servers keep their image. Prints the image's
  directory on stdout.

  --image-config PATH   the image config (default: SCRATCHRUN_IMAGE_CONFIG)
  --force               rebuild even if the image exists (refused while a server uses it)
`;

/** The microVM root disk of `dir`, when this host has what the microVM backend needs. */
async function buildVmDisk(
  dir: string,
  cacheRoot: string,
  log: (line: string) => void,
): Promise<void> {
  if (!existsSync("/usr/bin/mkfs.erofs") || !existsSync("/usr/bin/qemu-system-x86_64")) {
    log(
      "microVM root disk: skipped (no erofs-utils or QEMU here; the namespace backend needs none)",
    );
    return;
  }
  const { buildVmArtifacts, ensureRootDisk, pruneVmCache } = await import("../images/vm/build.js");
  log("microVM root disk: building it from the image (cached by the image's name)");
  const disk = ensureRootDisk(dir, cacheRoot);
  log(`microVM root disk: ${disk}`);
  try {
    const kernel = buildVmArtifacts({ cacheRoot }).kernel;
    for (const removed of pruneVmCache([kernel, disk], cacheRoot))
      log(`microVM cache: removed ${removed}`);
  } catch (e) {
    log(`microVM cache: not pruned (${(e as Error).message})`);
  }
}

/** `scratchrun image build`: see IMAGE_USAGE. */
export async function runImage(argv: string[]): Promise<number> {
  const [verb, ...rest] = argv;
  if (verb !== "build") {
    process.stderr.write(
      verb === "--help" || verb === "-h"
        ? IMAGE_USAGE
        : `scratchrun image: unknown command ${JSON.stringify(verb ?? "")}\n\n${IMAGE_USAGE}`,
    );
    return verb === "--help" || verb === "-h" ? 0 : 2;
  }
  let values;
  try {
    ({ values } = parseArgs({
      args: rest,
      options: {
        force: { type: "boolean", default: false },
        "image-config": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (e) {
    process.stderr.write(`scratchrun image build: ${(e as Error).message}\n\n${IMAGE_USAGE}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(IMAGE_USAGE);
    return 0;
  }
  const env = withImageConfig(process.env, values["image-config"]);
  const log = (line: string) => process.stderr.write(`[image] ${line}\n`);
  const { buildRootfs } = await import("../images/build.js");
  try {
    const images = settingsFrom(env).images;
    const result = await buildRootfs({
      images,
      env,
      force: values.force ?? false,
      onProgress: log,
    });
    for (const note of result.manifest.notes) log(`note: ${note}`);
    await buildVmDisk(result.dir, images.vmCache, log);
    process.stdout.write(`${result.dir}\n`);
    return 0;
  } catch (e) {
    process.stderr.write(
      `scratchrun image build: failed: ${e instanceof Error ? e.message : String(e)}\n`,
    );
    return 1;
  }
}
