#!/usr/bin/env node
// Makes images/rootfs/python-requirements.lock from images/rootfs/python-requirements.in: the
// host's pip (its own config: index, certificates, proxy) resolves the list for every target
// interpreter (CPython 3.12 and 3.13, manylinux x86_64 wheels for the image's glibc), and the
// lock pins each package at one version with the sha256 of every target's wheel.
//   node scripts/lock-python.mjs [--python3.12 /path/to/python3.12] [--python3.13 /path/…]
// (default: each version's pyenv prefix; pip >= 22.2)
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
// pip evaluates its dependencies' markers for the interpreter that runs it, whatever
// --python-version says (a 3.11 pip resolving for 3.12 picked numpy 2.4 where 3.12's picks 2.5):
// each target is resolved by that very CPython, found like the image build finds it.
const overrides = new Map();
for (let i = 0; i < args.length; i += 2) {
  const m = /^--python(3\.\d+)$/.exec(args[i] ?? "");
  if (!m || !args[i + 1]) {
    console.error(
      "usage: node scripts/lock-python.mjs [--python3.12 /path/to/python3.12] [--python3.13 …]",
    );
    process.exit(2);
  }
  overrides.set(m[1], args[i + 1]);
}
const PYENV_VERSION = { 3.12: "3.12.1", 3.13: "3.13.0" };
function interpreterFor(version) {
  if (overrides.has(version)) return overrides.get(version);
  const r = spawnSync("pyenv", ["prefix", PYENV_VERSION[version] ?? version], { encoding: "utf8" });
  if (r.status === 0 && r.stdout.trim()) return join(r.stdout.trim(), "bin", `python${version}`);
  console.error(
    `[lock] no CPython ${version} (pyenv prefix ${PYENV_VERSION[version]} failed); pass --python${version} /path/to/python${version}`,
  );
  process.exit(1);
}
const compiled = (name) => pathToFileURL(join(root, "dist", "src", "images", `${name}.js`)).href;
const lockLib = await import(compiled("python-lock")).catch(() => {
  console.error("dist/ is missing: run npm run build first");
  process.exit(1);
});
const { resolveArgs } = await import(compiled("host-pip"));
const { LOCK_TARGETS, mergeResolutions, parseReport, renderLock, listNames } = lockLib;

const listFile = join(root, "images", "rootfs", "python-requirements.in");
const lockFile = join(root, "images", "rootfs", "python-requirements.lock");
const listText = readFileSync(listFile, "utf8");
listNames(listText); // a line that is not a requirement stops here, before pip runs

const tmp = mkdtempSync(join(tmpdir(), "scratchrun-lock-"));
try {
  const resolved = new Map();
  for (const target of LOCK_TARGETS) {
    const report = join(tmp, `report-${target.abi}.json`);
    const python = interpreterFor(target.python);
    console.error(`[lock] resolving for python ${target.python} with ${python} -m pip`);
    const r = spawnSync(
      python,
      ["-m", "pip", ...resolveArgs(target, listFile, report, join(tmp, "target"))],
      {
        stdio: ["ignore", "inherit", "inherit"],
        env: { ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: "1" },
      },
    );
    if (r.status !== 0) {
      console.error(`[lock] pip could not resolve the list for python ${target.python}`);
      process.exit(1);
    }
    resolved.set(target, parseReport(readFileSync(report, "utf8")));
  }
  const lock = mergeResolutions(listText, resolved);
  writeFileSync(lockFile, renderLock(lock));
  const split = lock.packages.filter((p) => p.marker).map((p) => `${p.name} ${p.version}`);
  console.error(
    `[lock] wrote ${lockFile}: ${lock.packages.length} pins${split.length ? ` (per-version: ${split.join(", ")})` : ""}`,
  );
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
