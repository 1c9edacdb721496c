import {
  copyFile,
  lstat,
  mkdir,
  readdir,
  readlink,
  symlink,
  utimes,
  chmod,
} from "node:fs/promises";
import { join } from "node:path";

export interface CopyOptions {
  /** Paths relative to the source root, '/'-separated; true skips the entry (and its subtree). */
  exclude?: (relPath: string, isDir: boolean) => boolean;
  onProgress?: (copied: { files: number; bytes: number }) => void;
}

export interface CopyStats {
  files: number;
  bytes: number;
  skipped: number;
}

/**
 * Copies a tree keeping modes, symlinks (verbatim, never followed) and mtimes; mtimes matter
 * because Python trusts a .pyc only while its source's mtime matches.
 */
export async function copyTree(
  src: string,
  dest: string,
  options: CopyOptions = {},
): Promise<CopyStats> {
  const stats: CopyStats = { files: 0, bytes: 0, skipped: 0 };
  let lastReport = 0;
  const walk = async (rel: string): Promise<void> => {
    const from = rel ? join(src, rel) : src;
    const to = rel ? join(dest, rel) : dest;
    const st = await lstat(from);
    if (rel && options.exclude?.(rel, st.isDirectory())) {
      stats.skipped++;
      return;
    }
    if (st.isSymbolicLink()) {
      await symlink(await readlink(from), to);
      return;
    }
    if (st.isDirectory()) {
      await mkdir(to, { recursive: true });
      for (const name of (await readdir(from)).sort()) await walk(rel ? `${rel}/${name}` : name);
      await chmod(to, st.mode & 0o7777);
      await utimes(to, st.atime, st.mtime);
      return;
    }
    if (!st.isFile()) {
      stats.skipped++;
      return;
    }
    await copyFile(from, to);
    await chmod(to, st.mode & 0o7777);
    await utimes(to, st.atime, st.mtime);
    stats.files++;
    stats.bytes += st.size;
    if (options.onProgress && stats.files - lastReport >= 500) {
      lastReport = stats.files;
      options.onProgress({ files: stats.files, bytes: stats.bytes });
    }
  };
  await walk("");
  options.onProgress?.({ files: stats.files, bytes: stats.bytes });
  return stats;
}
