#!/usr/bin/env node
// Builds the desktop bundle (MCPB, remote mode): the npm package installed with its production
// dependencies (no optional ones: SQLite is for `scratchrun serve`, not for the relay), the
// manifest from mcpb/, packed and validated by the @anthropic-ai/mcpb tool.
//   node scripts/build-mcpb.mjs [--tarball scratchrun-mcp-X.tgz] [--out file.mcpb]
// Without --tarball it runs `npm pack` first (needs `npm run build`). Prints the bundle's path.
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const { values } = parseArgs({ options: { tarball: { type: "string" }, out: { type: "string" } } });
const out = resolve(values.out ?? join(root, "dist", "mcpb", `scratchrun-${pkg.version}.mcpb`));
const mcpbCli = join(root, "node_modules", "@anthropic-ai", "mcpb", "dist", "cli", "cli.js");

function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  if (r.status !== 0) {
    console.error(
      `build-mcpb: ${cmd} ${args.join(" ")} failed (${r.status ?? r.signal})\n${r.stdout}${r.stderr}`,
    );
    process.exit(1);
  }
  return r.stdout;
}

const work = mkdtempSync(join(tmpdir(), "scratchrun-mcpb-"));
try {
  let tarball = values.tarball && resolve(values.tarball);
  if (!tarball) {
    const name = run("npm", ["pack", "--silent", "--pack-destination", work], root)
      .trim()
      .split("\n")
      .at(-1);
    tarball = join(work, name);
  }
  const stage = join(work, "bundle");
  mkdirSync(stage);
  writeFileSync(
    join(stage, "package.json"),
    `${JSON.stringify({ name: "scratchrun-mcpb", version: pkg.version, private: true }, null, 2)}\n`,
  );
  console.error(`build-mcpb: installing ${tarball} (production dependencies only)`);
  run(
    "npm",
    [
      "install",
      tarball,
      "--omit=dev",
      "--omit=optional",
      "--ignore-scripts",
      "--no-package-lock",
      "--no-audit",
      "--no-fund",
      "--prefer-offline",
    ],
    stage,
  );
  const manifest = JSON.parse(readFileSync(join(root, "mcpb", "manifest.json"), "utf8"));
  if (manifest.version !== pkg.version) {
    console.error(
      `build-mcpb: mcpb/manifest.json is version ${manifest.version}, package.json ${pkg.version}`,
    );
    process.exit(1);
  }
  copyFileSync(join(root, "mcpb", "manifest.json"), join(stage, "manifest.json"));
  copyFileSync(join(root, "mcpb", ".mcpbignore"), join(stage, ".mcpbignore"));
  console.error("build-mcpb: validating and packing with @anthropic-ai/mcpb");
  run(process.execPath, [mcpbCli, "validate", join(stage, "manifest.json")], root);
  mkdirSync(dirname(out), { recursive: true });
  run(process.execPath, [mcpbCli, "pack", stage, out], root);
  console.log(out);
} finally {
  rmSync(work, { recursive: true, force: true });
}
