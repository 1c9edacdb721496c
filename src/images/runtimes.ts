import { chmod, copyFile, mkdir, readdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { copyTree, type CopyStats } from "./copy-tree.js";
import { IN_IMAGE } from "../runtimes/in-image.js";
import { checkInRootfs } from "./rootfs-exec.js";

/** Top-level parts of lib/python3.X that a headless sandbox never uses (Tk GUI, tests). */
const PY_STDLIB_DROPPED = new Set(["test", "idlelib", "tkinter", "turtledemo"]);
const PY_BIN_DROPPED = /^idle/;

/** A CPython copied from the host into the image, by its minor version. */
export type CopiedPython = "3.12" | "3.13";

const PREFIX_IN_IMAGE: Record<CopiedPython, { prefix: string; bin: string }> = {
  "3.12": { prefix: IN_IMAGE.python312Prefix, bin: IN_IMAGE.python312 },
  "3.13": { prefix: IN_IMAGE.python313Prefix, bin: IN_IMAGE.python313 },
};

/**
 * What of a CPython 3.<minor> prefix is not copied into the image: test suites, the Tk GUI (its
 * libraries are not in the image), the static libpython, and .pth files at the top of
 * site-packages (host-specific path hooks).
 */
export function pythonExcluded(minor: CopiedPython): (rel: string, isDir: boolean) => boolean {
  return (rel, isDir) => excluded(minor, rel, isDir);
}

/** python3.12's rule (pythonExcluded("3.12")). */
export const python312Excluded = pythonExcluded("3.12");

function excluded(minor: CopiedPython, rel: string, isDir: boolean): boolean {
  const parts = rel.split("/");
  if (parts[0] === "bin" && parts.length === 2) return PY_BIN_DROPPED.test(parts[1] ?? "");
  if (parts[0] !== "lib" || parts[1] !== `python${minor}`) return false;
  const top = parts[2] ?? "";
  if (parts.length === 3 && PY_STDLIB_DROPPED.has(top)) return true;
  if (isDir && ["test", "tests", "idle_test"].includes(parts[parts.length - 1] ?? "")) return true;
  if (top === "lib-dynload" && /^_tkinter\./.test(parts[3] ?? "")) return true;
  if (top.startsWith(`config-${minor}`) && rel.endsWith(".a")) return true;
  if (top === "site-packages" && parts.length === 4 && !isDir && rel.endsWith(".pth")) return true;
  return false;
}

/** A script whose shebang names the old prefix gets the in-image prefix instead. */
export function rewriteShebang(text: string, oldPrefix: string, newPrefix: string): string | null {
  if (!text.startsWith("#!")) return null;
  const nl = text.indexOf("\n");
  const first = nl === -1 ? text : text.slice(0, nl);
  if (!first.includes(`${oldPrefix}/`)) return null;
  return first.split(`${oldPrefix}/`).join(`${newPrefix}/`) + (nl === -1 ? "" : text.slice(nl));
}

/** Copies the host's CPython 3.<minor> to /opt/python3.<minor> and links python3.<minor>. */
export async function installPython(
  rootfs: string,
  minor: CopiedPython,
  hostPrefix: string,
  onProgress: (line: string) => void,
): Promise<CopyStats> {
  const inImage = PREFIX_IN_IMAGE[minor];
  const dest = join(rootfs, inImage.prefix);
  const stats = await copyTree(hostPrefix, dest, {
    exclude: pythonExcluded(minor),
    onProgress: (c) => onProgress(`python${minor}: copied ${c.files} files, ${mib(c.bytes)} MiB`),
  });
  for (const name of await readdir(join(dest, "bin"))) {
    const p = join(dest, "bin", name);
    let text: string;
    try {
      text = await readFile(p, "latin1");
    } catch {
      continue; // a dangling symlink or a directory
    }
    const fixed = rewriteShebang(text, hostPrefix, inImage.prefix);
    if (fixed !== null) await writeFile(p, fixed, "latin1");
  }
  // The binary's RUNPATH names the host prefix; the dynamic linker finds libpython here instead.
  await writeFile(
    join(rootfs, `etc/ld.so.conf.d/scratchrun-python${minor}.conf`),
    `${inImage.prefix}/lib\n`,
  );
  await checkInRootfs({ rootfs, writable: true, argv: ["/sbin/ldconfig"] });
  await mkdir(join(rootfs, "usr/local/bin"), { recursive: true });
  await symlink(inImage.bin, join(rootfs, `usr/local/bin/python${minor}`));
  return stats;
}

/**
 * Copies a Node.js binary to its place in the image (`inImage`, e.g. /opt/node20/bin/node) and
 * links it from /usr/local/bin as `link` (node20 is `node`, node24 is `node24`).
 */
export async function installNode(
  rootfs: string,
  binary: string,
  inImage: string,
  link: string,
): Promise<void> {
  const dest = join(rootfs, inImage);
  await mkdir(join(dest, ".."), { recursive: true });
  await copyFile(binary, dest);
  await chmod(dest, 0o755);
  await mkdir(join(rootfs, "usr/local/bin"), { recursive: true });
  await symlink(inImage, join(rootfs, "usr/local/bin", link));
}

/** In-image paths of every ELF object the copied runtimes load. */
export async function copiedElfObjects(rootfs: string): Promise<string[]> {
  const out: string[] = [];
  for (const minor of Object.keys(PREFIX_IN_IMAGE) as CopiedPython[]) {
    const { prefix, bin } = PREFIX_IN_IMAGE[minor];
    const dynload = `${prefix}/lib/python${minor}/lib-dynload`;
    const sos = (await readdir(join(rootfs, dynload))).filter((n) => n.endsWith(".so"));
    out.push(bin, `${prefix}/lib/libpython${minor}.so.1.0`, ...sos.map((n) => `${dynload}/${n}`));
  }
  return [...out, IN_IMAGE.node20, IN_IMAGE.node24];
}

/** Shared libraries that `ldd` inside the image cannot find, as "object: library" lines. */
export async function missingSharedLibs(rootfs: string, objects: string[]): Promise<string[]> {
  const script = 'for f in "$@"; do ldd "$f" 2>&1 | sed "s|^|$f: |"; done';
  const out = await checkInRootfs({
    rootfs,
    argv: ["/bin/bash", "-c", script, "ldd-all", ...objects],
  });
  return out
    .split("\n")
    .filter((l) => l.includes("not found"))
    .map((l) => l.replace(/\s+/g, " ").trim());
}

function mib(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(0);
}
