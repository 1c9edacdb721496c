import { posix } from "node:path";
import { LIMITS, WORKDIR, WRITABLE_ROOTS } from "./limits.js";

export type PathCheck = { ok: true; path: string } | { ok: false; error: string };

/**
 * Validates a path the caller names inside the sandbox and returns its absolute, normalised form.
 * Relative paths resolve against the working directory; the result must lie strictly inside a
 * writable area. Rejects rather than repairs anything suspicious (`..`, NUL, control characters).
 */
export function normaliseSandboxPath(input: string): PathCheck {
  if (input.length === 0) return { ok: false, error: "path is empty" };
  if (Buffer.byteLength(input, "utf8") > LIMITS.pathBytes.max)
    return { ok: false, error: `path is longer than ${LIMITS.pathBytes.max} bytes` };
  if (input.includes("\0")) return { ok: false, error: "path contains a NUL byte" };
  // C0, DEL and C1 (U+0080..U+009F, e.g. the 8-bit CSI U+009B) are all control characters.
  if (/\p{Cc}/u.test(input)) return { ok: false, error: "path contains a control character" };
  // A lone surrogate has no UTF-8 form: the sandbox would get U+FFFD instead, so the name the
  // agent reports back would not be the name asked for.
  if (/\p{Cs}/u.test(input))
    return { ok: false, error: "path contains a lone UTF-16 surrogate (not valid Unicode)" };
  if (input.split("/").includes(".."))
    return { ok: false, error: "path contains a '..' component" };
  if (input.endsWith("/")) return { ok: false, error: "path names a directory (ends with '/')" };
  const absolute = posix.normalize(input.startsWith("/") ? input : `${WORKDIR}/${input}`);
  const root = WRITABLE_ROOTS.find((r) => absolute.startsWith(`${r}/`));
  if (!root)
    return {
      ok: false,
      error: `path must lie inside ${WRITABLE_ROOTS.join(" or ")} (relative paths resolve against ${WORKDIR})`,
    };
  return { ok: true, path: absolute };
}

/** Returns why `name` is not a valid environment variable name, or null when it is. */
export function checkEnvName(name: string): string | null {
  if (name.length === 0) return "is empty";
  if (Buffer.byteLength(name, "utf8") > LIMITS.env.maxNameBytes)
    return `is longer than ${LIMITS.env.maxNameBytes} bytes`;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
    return "must match [A-Za-z_][A-Za-z0-9_]* (letters, digits, underscore; not starting with a digit)";
  return null;
}
