/**
 * The image config's extras, in the image being built: every requested thing checked from inside
 * the image, by the runtime that will use it, as a sandbox
 * would (bash finds the Debian package's program, python3.11 imports the Debian package's modules,
 * python3.12 sees each wheel's distribution at its version, node20 loads each npm package with
 * require() and import from an ordinary directory). A failed check fails the build naming the
 * config entry.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { ImageConfig } from "./config.js";
import { parseDpkgStatus } from "./dpkg-status.js";
import { verifyExtraFiles } from "./extra-files.js";
import type { ImageExtras } from "./manifest.js";
import { lockedPackages, type NpmPackageLock } from "./npm.js";
import { IN_IMAGE } from "../runtimes/in-image.js";
import type { PipIndex } from "./pip-index.js";
import { runInRootfs } from "./rootfs-exec.js";
import { listWheels } from "./wheels.js";

function debianVersions(
  rootfs: string,
  wanted: ImageConfig["debian"],
  at: "debian" | "python3.11",
): Record<string, string> {
  const installed = parseDpkgStatus(readFileSync(join(rootfs, "var/lib/dpkg/status"), "utf8"));
  const out: Record<string, string> = {};
  wanted.forEach((p, i) => {
    const got = installed.get(p.name);
    if (!got) throw new Error(`${at}[${i}] ${p.name}: not installed in the image`);
    if (p.version && got.version !== p.version)
      throw new Error(`${at}[${i}] ${p.name}: the image has ${got.version}, not ${p.version}`);
    out[p.name] = got.version;
  });
  return out;
}

/** The Python distributions (dist-info/egg-info directories) a Debian package installs. */
function debianDistDirs(rootfs: string, pkg: string): string[] {
  for (const name of [`${pkg}.list`, `${pkg}:amd64.list`, `${pkg}:all.list`]) {
    const list = join(rootfs, "var/lib/dpkg/info", name);
    if (!existsSync(list)) continue;
    return readFileSync(list, "utf8")
      .split("\n")
      .filter((l) => /^\/usr\/lib\/python3\/dist-packages\/[^/]+\.(dist|egg)-info$/.test(l));
  }
  return [];
}

/** Imports every top-level module of each distribution: proves python3.11 can use the package. */
const CHECK_DISTS_PY = `
import importlib, importlib.metadata as md, json, pathlib, sys
out = {}
for pkg, dirs in json.loads(sys.argv[1]).items():
    for d in dirs:
        dist = md.Distribution.at(pathlib.Path(d))
        tops = (dist.read_text("top_level.txt") or "").split()
        for mod in tops:
            if mod and not mod.startswith("_"):
                try:
                    importlib.import_module(mod)
                except Exception as e:
                    print(f"scratchrun-import {pkg} {mod}: {type(e).__name__}: {e}", file=sys.stderr)
                    sys.exit(3)
        out.setdefault(pkg, {})[dist.metadata["Name"]] = dist.version
print(json.dumps(out))
`;

const CHECK_VERSIONS_PY = `
import importlib.metadata as md, json, sys
bad = []
for name, want in json.loads(sys.argv[1]).items():
    try:
        got = md.version(name)
    except md.PackageNotFoundError:
        got = None
    if got != want:
        bad.append(f"{name}: wanted {want}, the image has {got or 'nothing'}")
if bad:
    print("scratchrun-versions " + "; ".join(bad), file=sys.stderr)
    sys.exit(3)
`;

/** Requires and imports each package as code in /home/user would. */
const CHECK_NPM_JS = `
const fs = require("node:fs");
const { createRequire } = require("node:module");
const req = createRequire("/home/user/main.js");
(async () => {
  for (const [name, want] of Object.entries(JSON.parse(process.argv[1]))) {
    const fail = (what) => { console.error("scratchrun-npm " + JSON.stringify(name) + " " + what); process.exit(3); };
    let version;
    try { version = JSON.parse(fs.readFileSync("/node_modules/" + name + "/package.json", "utf8")).version; }
    catch (e) { fail("is not in /node_modules: " + e.message); }
    if (version !== want) fail("is " + version + " in the image, not " + want);
    try { req(name); } catch (e) { if (e.code !== "ERR_REQUIRE_ASYNC_MODULE") fail("cannot be loaded with require(): " + e.message); }
    try { await import(name); } catch (e) { fail("cannot be loaded with import: " + e.message); }
  }
})();
`;

/** name -> version of the distributions a python3.12 source installs, as the config pinned them. */
export function python312Pins(
  source: { wheelhouse: string } | { index: PipIndex },
): Record<string, string> {
  const out: Record<string, string> = {};
  if ("wheelhouse" in source) {
    for (const w of listWheels(source.wheelhouse)) {
      const [name, version] = w.split("-");
      if (name && version) out[name] = version;
    }
  } else {
    for (const line of readFileSync(source.index.requirements, "utf8")
      .replace(/\\\r?\n/g, " ")
      .split(/\r?\n/)) {
      const m = /^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*===?\s*([^\s;]+)/.exec(line);
      if (m) out[m[1]!] = m[3]!;
    }
  }
  return out;
}

function failure(stderr: string, tag: string): string | null {
  const m = new RegExp(`${tag} (.*)`).exec(stderr);
  return m ? m[1]! : null;
}

export interface VerifiedExtras {
  extras: ImageExtras;
  /** npm packages the image holds (the config's and their dependencies), name -> version. */
  node20Packages: Record<string, string>;
}

/** Checks every extra the config asked for inside the image; throws naming the first that fails. */
export async function verifyExtras(
  rootfs: string,
  config: ImageConfig,
  npmLock: NpmPackageLock | null,
  python312: { wheelhouse: string } | { index: PipIndex } | null,
  log: (line: string) => void,
): Promise<VerifiedExtras> {
  log("verifying the image config's packages and files inside the image");
  const debian = debianVersions(rootfs, config.debian, "debian");
  const python311 = debianVersions(rootfs, config.python311, "python3.11");

  if (config.debian.length > 0) {
    // Each Debian package's programs are found by bash the way a sandbox's PATH finds them.
    const r = await runInRootfs({
      rootfs,
      argv: [
        "/bin/bash",
        "-c",
        'for p; do for f in $(dpkg -L "$p" | grep -E "^/usr/(local/)?s?bin/[^/]+$"); do command -v "${f##*/}" >/dev/null || { echo "scratchrun-path $p ${f##*/}" >&2; exit 3; }; done; done',
        "check",
        ...config.debian.map((p) => p.name),
      ],
    });
    if (r.code !== 0) {
      const why = failure(r.stderr, "scratchrun-path");
      throw new Error(
        why
          ? `debian: ${why.split(" ")[0]}'s program ${why.split(" ")[1]} is not on the sandbox's PATH`
          : `debian: checking the packages in the image failed: ${r.stderr.trim()}`,
      );
    }
  }

  if (config.python311.length > 0) {
    const dirs = Object.fromEntries(
      config.python311.map((p) => [p.name, debianDistDirs(rootfs, p.name)]),
    );
    const r = await runInRootfs({
      rootfs,
      argv: [IN_IMAGE.python311, "-c", CHECK_DISTS_PY, JSON.stringify(dirs)],
    });
    if (r.code !== 0) {
      const why = failure(r.stderr, "scratchrun-import");
      const name = why?.split(" ")[0] ?? "";
      const i = config.python311.findIndex((p) => p.name === name);
      throw new Error(
        why
          ? `python3.11[${i}] ${name}: python3.11 cannot import ${why.slice(name.length + 1)}`
          : `python3.11: checking the packages in the image failed: ${r.stderr.trim()}`,
      );
    }
  }

  let py312: Record<string, string> = {};
  if (python312) {
    py312 = python312Pins(python312);
    const r = await runInRootfs({
      rootfs,
      argv: [IN_IMAGE.python312, "-c", CHECK_VERSIONS_PY, JSON.stringify(py312)],
    });
    if (r.code !== 0)
      throw new Error(
        `python3.12: ${failure(r.stderr, "scratchrun-versions") ?? `checking the packages failed: ${r.stderr.trim()}`}`,
      );
  }

  let node20: Record<string, string> = {};
  if (config.npm) {
    node20 = config.npm.packages;
    const r = await runInRootfs({
      rootfs,
      cwd: "/home/user",
      argv: [IN_IMAGE.node20, "-e", CHECK_NPM_JS, JSON.stringify(node20)],
    });
    if (r.code !== 0) {
      const why = failure(r.stderr, "scratchrun-npm");
      const name = why ? (JSON.parse(why.slice(0, why.indexOf('" ') + 1)) as string) : "";
      throw new Error(
        why
          ? `node20.packages[${JSON.stringify(name)}]: ${name} ${why.slice(why.indexOf('" ') + 2)}`
          : `node20: checking the packages failed: ${r.stderr.trim()}`,
      );
    }
  }

  const files = await verifyExtraFiles(rootfs, config.files);
  return {
    extras: {
      config: config.path,
      configSha256: config.sha256,
      debian,
      "python3.11": python311,
      node20,
      "python3.12": config.python312 ? py312 : {},
      files,
    },
    node20Packages: npmLock ? lockedPackages(npmLock) : {},
  };
}
