import { existsSync, readFileSync, realpathSync } from "node:fs";
import type { ImageSettings } from "../schema/settings/values.js";

/** A package index for python3.12's packages (a PyPI mirror) and the hash-pinned list to install. */
export interface PipIndex {
  /** A PEP 503 "simple" index, e.g. https://mirror.example/simple */
  url: string;
  /** Real path of a requirements file with an exact version and a --hash for every requirement. */
  requirements: string;
}

const HASH = /--hash[= ](sha256|sha384|sha512):[0-9a-f]{64,128}\b/;

/** Logical lines of a requirements file: continuations joined, comments and blanks dropped. */
function logicalLines(text: string): string[] {
  return text
    .replace(/\\\r?\n/g, " ")
    .split(/\r?\n/)
    .map((l) => l.replace(/(^|\s)#.*$/, "").trim())
    .filter((l) => l !== "");
}

/**
 * Requirements of `text` that pip's --require-hashes would refuse or that could install something
 * other than what was reviewed: no exact `==` pin, no hash, or an option line (an index, a link or
 * a nested file given inside the file would bypass the configured index and the pins).
 */
export function unpinnedRequirements(text: string): string[] {
  return logicalLines(text).filter(
    (l) =>
      l.startsWith("-") ||
      !/^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*===?\s*[^\s;]+/.test(l) ||
      !HASH.test(l),
  );
}

export type PipIndexResult = { ok: true; index: PipIndex | null } | { ok: false; error: string };

/**
 * SCRATCHRUN_PIP_INDEX_URL (an http(s) PEP 503 index) and SCRATCHRUN_PYTHON312_REQUIREMENTS (the
 * hash-pinned file; default `defaultRequirements`), or null when no index is configured.
 */
export function pipIndexOf(
  images: Pick<ImageSettings, "pipIndexUrl" | "python312Requirements">,
  defaultRequirements: string,
): PipIndexResult {
  const url = images.pipIndexUrl;
  const requirements = images.python312Requirements;
  if (!url) {
    if (requirements)
      return {
        ok: false,
        error:
          "SCRATCHRUN_PYTHON312_REQUIREMENTS is set but SCRATCHRUN_PIP_INDEX_URL is not; set the index to install from",
      };
    return { ok: true, index: null };
  }
  try {
    const u = new URL(url);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error("scheme");
  } catch {
    return {
      ok: false,
      error: `SCRATCHRUN_PIP_INDEX_URL=${JSON.stringify(url)} is not an http(s) URL`,
    };
  }
  const file = requirements ?? defaultRequirements;
  if (!existsSync(file))
    return { ok: false, error: `SCRATCHRUN_PYTHON312_REQUIREMENTS=${file} does not exist` };
  const bad = unpinnedRequirements(readFileSync(file, "utf8"));
  if (bad.length > 0)
    return {
      ok: false,
      error: `${file} must pin every requirement with == and --hash=sha256:… for an index install (pip --require-hashes); not pinned: ${bad.slice(0, 3).join(" | ")}${bad.length > 3 ? ` and ${bad.length - 3} more` : ""}. Make one where the index is reachable, e.g. pip-compile --generate-hashes, and point SCRATCHRUN_PYTHON312_REQUIREMENTS at it`,
    };
  return { ok: true, index: { url, requirements: realpathSync(file) } };
}

/** The index URL with any password replaced, for logs. */
export function displayIndexUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return url;
  }
}
