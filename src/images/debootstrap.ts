import { spawn } from "node:child_process";

export const SUITE = "bookworm";
export const MIRRORS = [
  "deb http://deb.debian.org/debian bookworm main",
  "deb http://deb.debian.org/debian bookworm-updates main",
  "deb http://deb.debian.org/debian-security bookworm-security main",
] as const;

/** Files dpkg never unpacks: docs, man pages, translations (C.UTF-8 is built into libc). */
const DPKG_EXCLUDES = [
  "path-exclude=/usr/share/man/*",
  "path-exclude=/usr/share/doc/*",
  "path-include=/usr/share/doc/*/copyright",
  "path-exclude=/usr/share/info/*",
  "path-exclude=/usr/share/locale/*",
  "path-exclude=/usr/share/lintian/*",
  "path-exclude=/usr/share/linda/*",
];

/** Parses packages.txt: one name a line, '#' starts a comment, blank lines ignored. */
export function parsePackageList(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.replace(/#.*/, "").trim();
    if (!line) continue;
    if (!/^[a-z0-9][a-z0-9+.-]*$/.test(line)) throw new Error(`bad package name in list: ${line}`);
    if (!out.includes(line)) out.push(line);
  }
  return out;
}

/** The mmdebstrap command line that makes a bookworm rootfs with `packages` in `target`. */
export function mmdebstrapArgs(packages: readonly string[], target: string): string[] {
  return [
    "--variant=apt",
    "--mode=root",
    "--format=directory",
    `--aptopt=APT::Install-Recommends "false"`,
    ...DPKG_EXCLUDES.map((o) => `--dpkgopt=${o}`),
    `--include=${packages.join(",")}`,
    SUITE,
    target,
    ...MIRRORS,
  ];
}

/** Runs mmdebstrap, streaming its progress lines; throws with its last output on failure. */
export function runMmdebstrap(
  packages: readonly string[],
  target: string,
  onProgress: (line: string) => void,
): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn("mmdebstrap", mmdebstrapArgs(packages, target), {
      stdio: ["ignore", "pipe", "pipe"],
    });
    const tail: string[] = [];
    // mmdebstrap is silent for a minute or more while dpkg configures; say it is still alive.
    const since = Date.now();
    const heartbeat = setInterval(
      () => onProgress(`mmdebstrap: still working (${Math.round((Date.now() - since) / 1000)} s)`),
      20_000,
    );
    const onData = (buf: Buffer) => {
      for (const line of buf.toString("utf8").split("\n")) {
        if (!line.trim()) continue;
        tail.push(line);
        if (tail.length > 40) tail.shift();
        onProgress(`mmdebstrap: ${line}`);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("error", (e) => {
      clearInterval(heartbeat);
      reject(new Error(`cannot run mmdebstrap (apt-get install mmdebstrap): ${e.message}`));
    });
    child.on("close", (code, signal) => {
      clearInterval(heartbeat);
      if (code === 0) resolvePromise();
      else reject(new Error(`mmdebstrap failed (${code ?? signal}):\n${tail.join("\n")}`));
    });
  });
}
