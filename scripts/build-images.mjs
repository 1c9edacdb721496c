#!/usr/bin/env node
// Builds the runtime root filesystem image (as root; needs mmdebstrap and bubblewrap).
//   node scripts/build-images.mjs           build unless the image of the current recipe exists
//   node scripts/build-images.mjs --force   rebuild it anyway
//   node scripts/build-images.mjs --check   exit 0 and print its directory if it exists, else exit 1
// The last line on stdout is the image directory. Env: SCRATCHRUN_IMAGES, SCRATCHRUN_PYTHON312,
// SCRATCHRUN_NODE20, SCRATCHRUN_WHEELHOUSE (see src/images/).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = new Set(process.argv.slice(2));
const unknown = [...args].filter((a) => !["--force", "--check"].includes(a));
if (unknown.length > 0) {
  console.error(`unknown option ${unknown.join(" ")}; use --force or --check`);
  process.exit(2);
}

const compiled = (name) => join(root, "dist", "src", "images", `${name}.js`);
if (!existsSync(compiled("build"))) {
  console.error("[images] compiling TypeScript (dist/ is missing)");
  // Emits even if unrelated files have type errors; only the emitted files matter here.
  spawnSync("npx", ["tsc", "-p", "tsconfig.json"], { cwd: root, stdio: "inherit" });
  if (!existsSync(compiled("build"))) {
    console.error("[images] dist/src/images/build.js is still missing; run `npm run build`");
    process.exit(1);
  }
}

if (args.has("--check")) {
  const { findRootfs } = await import(pathToFileURL(compiled("locate")).href);
  const found = findRootfs();
  if (!found.ok) {
    console.error(found.error);
    process.exit(1);
  }
  console.log(found.dir);
  process.exit(0);
}

const { buildRootfs } = await import(pathToFileURL(compiled("build")).href);
try {
  const result = await buildRootfs({ force: args.has("--force") });
  for (const note of result.manifest.notes) console.error(`[images] note: ${note}`);
  console.log(result.dir);
} catch (e) {
  console.error(`[images] build failed: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
}
