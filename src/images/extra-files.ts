/**
 * The image config's extra files: copied in by a build jail whose / is the image (so a symlink in
 * the image resolves inside it, never on the host), then checked byte for byte from inside.
 */
import { createHash } from "node:crypto";
import { lstatSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { HIDDEN_AT_RUN_TIME, type ExtraFile } from "./config.js";
import { sha256Hex } from "./config-hash.js";
import type { ImageExtras } from "./manifest.js";
import { checkInRootfs, runInRootfs, type Bind } from "./rootfs-exec.js";

const EXTRA_MOUNT = "/tmp/scratchrun-extra";

/**
 * Copies each extra file or directory in, inside a build jail whose / is the image (so a symlink
 * in the image resolves inside it, never on the host). Adds only: a path the image already has,
 * or one that resolves under a directory sandboxes mount over, is refused naming the entry.
 * Files become root-owned and world-readable; setuid, setgid and group/other write bits go.
 */
export async function installExtraFiles(
  rootfs: string,
  files: readonly ExtraFile[],
  log: (line: string) => void,
  /** More host paths to mount (tests give a skeleton rootfs the host's /usr). */
  extraBinds: readonly Bind[] = [],
): Promise<void> {
  if (files.length === 0) return;
  log(`copying ${files.length} extra file entr${files.length === 1 ? "y" : "ies"} into the image`);
  const hidden = HIDDEN_AT_RUN_TIME.map((h) => `${h}|${h}/*`).join("|");
  const script = [
    "set -eu",
    "umask 022",
    'while [ "$#" -gt 0 ]; do',
    "  s=$1; t=$2; shift 2",
    '  if [ -e "$t" ] || [ -L "$t" ]; then echo "scratchrun-exists $t" >&2; exit 3; fi',
    '  r=$(realpath -m -- "$t")',
    `  case "$r" in ${hidden}) echo "scratchrun-hidden $t $r" >&2; exit 4;; esac`,
    '  mkdir -p -- "$(dirname -- "$r")"',
    '  cp -RT --no-preserve=ownership --preserve=mode,timestamps -- "$s" "$r"',
    '  chmod -R u-s,g-s,go-w,a+rX -- "$r"',
    "done",
  ].join("\n");
  const r = await runInRootfs({
    rootfs,
    writable: true,
    binds: [
      ...extraBinds,
      ...files.map((f, i) => ({ src: f.source, dest: `${EXTRA_MOUNT}/${i}` })),
    ],
    argv: [
      "/bin/bash",
      "-c",
      script,
      "extra-files",
      ...files.flatMap((f, i) => [`${EXTRA_MOUNT}/${i}`, f.target]),
    ],
  });
  if (r.code === 0) return;
  const exists = /scratchrun-exists (.*)/.exec(r.stderr);
  if (exists)
    throw new Error(
      `files[${JSON.stringify(exists[1])}]: the image already has ${exists[1]}; extra files add to the image and never replace what is there`,
    );
  const hiddenAt = /scratchrun-hidden (\S+) (.*)/.exec(r.stderr);
  if (hiddenAt)
    throw new Error(
      `files[${JSON.stringify(hiddenAt[1])}]: resolves to ${hiddenAt[2]} in the image, which every sandbox mounts over at run time`,
    );
  throw new Error(
    `copying the extra files failed (exit ${r.code ?? r.signal}): ${r.stderr.trim()}`,
  );
}

/** Regular files under `path` (a file: itself as "."), relative path -> sha256, sorted. */
function contentList(path: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (abs: string, rel: string) => {
    const st = lstatSync(abs);
    if (st.isDirectory())
      for (const n of readdirSync(abs).sort())
        walk(join(abs, n), rel === "." ? `./${n}` : `${rel}/${n}`);
    else if (st.isFile()) out.set(rel, sha256Hex(readFileSync(abs)));
  };
  const st = lstatSync(path);
  if (st.isFile()) out.set(".", sha256Hex(readFileSync(path)));
  else walk(path, ".");
  return out;
}

export async function verifyExtraFiles(
  rootfs: string,
  files: readonly ExtraFile[],
): Promise<ImageExtras["files"]> {
  const out: ImageExtras["files"] = [];
  for (const f of files) {
    const want = contentList(f.source);
    const listed = await checkInRootfs({
      rootfs,
      argv: [
        "/bin/bash",
        "-c",
        'set -eo pipefail; if [ -f "$1" ]; then sha256sum < "$1" | sed "s/ .*/  ./"; else cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum; fi',
        "verify",
        f.target,
      ],
    });
    const got = new Map<string, string>();
    for (const line of listed.split("\n").filter(Boolean)) {
      const m = /^([0-9a-f]{64}) {2}(.*)$/.exec(line);
      if (m) got.set(m[2]!, m[1]!);
    }
    const differ = [...want].filter(([p, h]) => got.get(p) !== h).map(([p]) => p);
    if (differ.length > 0 || got.size !== want.size)
      throw new Error(
        `files[${JSON.stringify(f.target)}]: the image's copy differs from ${f.source} (${differ.slice(0, 3).join(", ") || "file count"})`,
      );
    const bytes = [...want.keys()].reduce(
      (n, rel) => n + lstatSync(rel === "." ? f.source : join(f.source, rel)).size,
      0,
    );
    const digest = createHash("sha256");
    for (const [p, h] of [...want].sort(([a], [b]) => (a < b ? -1 : 1)))
      digest.update(`${p}\0${h}\0`);
    out.push({ path: f.target, files: want.size, bytes, sha256: digest.digest("hex") });
  }
  return out;
}
