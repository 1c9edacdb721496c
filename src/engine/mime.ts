import { posix } from "node:path";

const BY_EXTENSION: Record<string, string> = {
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".gif": "image/gif",
  ".webp": "image/webp",
  ".svg": "image/svg+xml",
  ".txt": "text/plain",
  ".log": "text/plain",
  ".md": "text/markdown",
  ".csv": "text/csv",
  ".tsv": "text/tab-separated-values",
  ".json": "application/json",
  ".html": "text/html",
  ".xml": "application/xml",
  ".py": "text/x-python",
  ".js": "text/javascript",
  ".sh": "text/x-shellscript",
  ".pdf": "application/pdf",
  ".zip": "application/zip",
};

/** MIME type from the path's extension; content is never sniffed. */
export function mimeTypeOf(path: string): string {
  return BY_EXTENSION[posix.extname(path).toLowerCase()] ?? "application/octet-stream";
}

/** Images an MCP client renders inline (the product page: PNG, JPG, SVG). */
export function isInlineImage(mime: string): boolean {
  return (
    mime === "image/png" ||
    mime === "image/jpeg" ||
    mime === "image/svg+xml" ||
    mime === "image/gif" ||
    mime === "image/webp"
  );
}

export function isTextMime(mime: string): boolean {
  return mime.startsWith("text/") || mime === "application/json" || mime === "application/xml";
}
