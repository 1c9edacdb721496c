import { z } from "zod";
import type { ExtrasKey } from "../runtimes/table.js";
import { RUNTIMES, type RuntimeName } from "../runtimes/names.js";

const runtimeInfo = z
  .object({
    /** Interpreter command; the engine appends the code file. */
    argv: z.array(z.string()).min(1),
    /** As the interpreter reports it from inside the built image, e.g. "3.12.1", "v20.20.2". */
    version: z.string().min(1),
    /**
     * What the runtime can load, name -> version: python, the distributions importlib.metadata
     * reports; node20, the npm packages under /node_modules (the image config's and their
     * dependencies); bash, the image config's extra Debian packages. Absent: none.
     */
    packages: z.record(z.string(), z.string()).optional(),
  })
  .strict();

/**
 * What the image config added to each runtime it extends, keyed by the runtime table's ExtrasKey
 * (a key missing here, or one the table does not name, is a type error).
 */
const runtimeExtras = {
  /** Debian packages -> installed version. */
  debian: z.record(z.string(), z.string()),
  /** Debian python3-* packages -> installed version, with the Python distributions each holds. */
  "python3.11": z.record(z.string(), z.string()),
  /** npm packages named by the config -> installed version (all of them: runtimes.node20.packages). */
  node20: z.record(z.string(), z.string()),
  /** python3.12 distributions the config's wheelhouse or requirements named -> version. */
  "python3.12": z.record(z.string(), z.string()),
} satisfies Record<ExtrasKey, z.ZodType>;

/**
 * What the operator's image config added, each as the image holds it (verified inside the image
 * at build time). Keys are what the config named; values the installed versions.
 */
const extrasSchema = z
  .object({
    /** The config file the image was built from, and its sha256. */
    config: z.string(),
    configSha256: z.string().regex(/^[0-9a-f]{64}$/),
    ...runtimeExtras,
    /** Extra files and directories: image path, bytes, sha256 over their content. */
    files: z.array(
      z
        .object({
          path: z.string(),
          files: z.number().int().nonnegative(),
          bytes: z.number().int().nonnegative(),
          sha256: z.string(),
        })
        .strict(),
    ),
  })
  .strict();

export const manifestSchema = z
  .object({
    format: z.literal(1),
    recipeHash: z.string().regex(/^[0-9a-f]{16,64}$/),
    builtAt: z.string(),
    /** Bytes on disk of the rootfs directory (manifest excluded). */
    sizeBytes: z.number().int().nonnegative(),
    env: z.record(z.string(), z.string()),
    runtimes: z
      .object(
        Object.fromEntries(RUNTIMES.map((r) => [r, runtimeInfo])) as Record<
          RuntimeName,
          typeof runtimeInfo
        >,
      )
      .strict(),
    /** How python3.12's third-party packages got there: wheelhouse, PyPI, or not at all. */
    python312PackagesFrom: z.enum(["wheelhouse", "index", "pypi", "none"]),
    /** How python3.13's got there: the lock through the host's pip, or not at all. */
    python313PackagesFrom: z.enum(["pypi", "none"]),
    notes: z.array(z.string()),
    /**
     * The recipe hash without the operator's config (absent: images built before configs existed,
     * whose recipe hash is their base). A server may fall back only to an image of its own base.
     */
    baseRecipeHash: z
      .string()
      .regex(/^[0-9a-f]{16,64}$/)
      .optional(),
    /** What the operator's image config added (absent: no config). */
    extras: extrasSchema.optional(),
  })
  .strict();

export type ImageExtras = z.infer<typeof extrasSchema>;

export type RuntimeInfo = z.infer<typeof runtimeInfo>;
export type Manifest = z.infer<typeof manifestSchema>;

/** Parses manifest.json text; a damaged or foreign manifest is an error string, not a throw. */
export function parseManifest(
  text: string,
): { ok: true; manifest: Manifest } | { ok: false; error: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return { ok: false, error: `manifest is not JSON: ${(e as Error).message}` };
  }
  const parsed = manifestSchema.safeParse(raw);
  if (!parsed.success) return { ok: false, error: `manifest is invalid: ${parsed.error.message}` };
  return { ok: true, manifest: parsed.data };
}
