import { readFileSync } from "node:fs";
import type { ServerResponse } from "node:http";

/**
 * The console's pages: three files shipped in the package (src/console/static, listed in
 * package.json "files"), read once, served from memory. Only these names are served: no path
 * from the request ever reaches the filesystem. The page's CSP lets it load its own script, its
 * own stylesheet, fetch this server's API and show images it made itself (blob: URLs of a run's
 * returned files); nothing from anywhere else, no inline script, no framing.
 */
export const APP_PATH = "/console/index.html";

const FILES: Record<string, { file: string; type: string }> = {
  [APP_PATH]: { file: "index.html", type: "text/html; charset=utf-8" },
  "/console/app.js": { file: "app.js", type: "text/javascript; charset=utf-8" },
  "/console/app.css": { file: "app.css", type: "text/css; charset=utf-8" },
};

/** Every path the console's files are served at. */
export const STATIC_PATHS: readonly string[] = Object.keys(FILES);

export const APP_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** dist/src/console/static.js → src/console/static/ (the same in the repository and the package). */
const DIR = new URL("../../../src/console/static/", import.meta.url);
const cache = new Map<string, Buffer>();

/** Serves `path` when it is one of the console's files; false otherwise. */
export function serveStatic(res: ServerResponse, path: string): boolean {
  const f = FILES[path];
  if (!f) return false;
  let body = cache.get(f.file);
  if (!body) {
    body = readFileSync(new URL(f.file, DIR));
    cache.set(f.file, body);
  }
  res.writeHead(200, {
    "Content-Type": f.type,
    "Content-Security-Policy": APP_CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
  });
  res.end(body);
  return true;
}
