import { chmod, copyFile, mkdir, readdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { copyTree, type CopyStats } from "./copy-tree.js";
import { IN_IMAGE } from "./paths.js";
import { checkInRootfs } from "./rootfs-exec.js";

/** Top-level parts of lib/python3.12 that a headless sandbox never uses (Tk GUI, tests). */
const PY_STDLIB_DROPPED = new Set(["test", "idlelib", "tkinter", "turtledemo"]);
const PY_BIN_DROPPED = /^idle/;

/**
 * What of a CPython 3.12 prefix is not copied into the image: test suites, the Tk GUI (its
 * libraries are not in the image), the static libpython, and .pth files at the top of
 * site-packages (host-specific path hooks).
 */
export function python312Excluded(rel: string, isDir: boolean): boolean {
  const parts = rel.split("/");
  if (parts[0] === "bin" && parts.length === 2) return PY_BIN_DROPPED.test(parts[1] ?? "");
  if (parts[0] !== "lib" || parts[1] !== "python3.12") return false;
  const top = parts[2] ?? "";
  if (parts.length === 3 && PY_STDLIB_DROPPED.has(top)) return true;
  if (isDir && ["test", "tests", "idle_test"].includes(parts[parts.length - 1] ?? "")) return true;
  if (top === "lib-dynload" && /^_tkinter\./.test(parts[3] ?? "")) return true;
  if (top.startsWith("config-3.12") && rel.endsWith(".a")) return true;
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

export async function installPython312(
  rootfs: string,
  hostPrefix: string,
  onProgress: (line: string) => void,
): Promise<CopyStats> {
  const dest = join(rootfs, IN_IMAGE.python312Prefix);
  const stats = await copyTree(hostPrefix, dest, {
    exclude: python312Excluded,
    onProgress: (c) => onProgress(`python3.12: copied ${c.files} files, ${mib(c.bytes)} MiB`),
  });
  for (const name of await readdir(join(dest, "bin"))) {
    const p = join(dest, "bin", name);
    let text: string;
    try {
      text = await readFile(p, "latin1");
    } catch {
      continue; // a dangling symlink or a directory
    }
    const fixed = rewriteShebang(text, hostPrefix, IN_IMAGE.python312Prefix);
    if (fixed !== null) await writeFile(p, fixed, "latin1");
  }
  // The binary's RUNPATH names the host prefix; the dynamic linker finds libpython here instead.
  await writeFile(
    join(rootfs, "etc/ld.so.conf.d/scratchrun-python3.12.conf"),
    `${IN_IMAGE.python312Prefix}/lib\n`,
  );
  await checkInRootfs({ rootfs, writable: true, argv: ["/sbin/ldconfig"] });
  await mkdir(join(rootfs, "usr/local/bin"), { recursive: true });
  await symlink(IN_IMAGE.python312, join(rootfs, "usr/local/bin/python3.12"));
  return stats;
}

export async function installNode20(rootfs: string, hostNode: string): Promise<void> {
  const dest = join(rootfs, IN_IMAGE.node20);
  await mkdir(join(dest, ".."), { recursive: true });
  await copyFile(hostNode, dest);
  await chmod(dest, 0o755);
  await mkdir(join(rootfs, "usr/local/bin"), { recursive: true });
  await symlink(IN_IMAGE.node20, join(rootfs, "usr/local/bin/node"));
}

/** In-image paths of every ELF object the copied runtimes load. */
export async function copiedElfObjects(rootfs: string): Promise<string[]> {
  const dynload = `${IN_IMAGE.python312Prefix}/lib/python3.12/lib-dynload`;
  const sos = (await readdir(join(rootfs, dynload))).filter((n) => n.endsWith(".so"));
  return [
    IN_IMAGE.python312,
    `${IN_IMAGE.python312Prefix}/lib/libpython3.12.so.1.0`,
    ...sos.map((n) => `${dynload}/${n}`),
    IN_IMAGE.node20,
  ];
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
