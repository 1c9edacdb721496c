/**
 * The result view (MCP Apps, the `io.modelcontextprotocol/ui` extension, 2026-01-26): one HTML
 * document, shipped with the package (src/mcp/view/, listed in package.json "files"), that a host
 * renders in a sandboxed frame beside a result of scratchrun_exec or a session tool. The tools
 * name it in `_meta.ui.resourceUri`; resources/read serves it. Its script and style are inline
 * and its own CSP allows exactly those (by hash), images from data: and blob: URLs, and nothing
 * else: no origin, no connection, no frame, no form. docs/SECURITY.md says what it trusts.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

export const VIEW_URI = "ui://scratchrun/result.html";
/** The MIME type MCP Apps hosts render (the extension's profile of text/html). */
export const VIEW_MIME = "text/html;profile=mcp-app";

/**
 * What a tool says in tools/list for the host to render its results with the view. Visible to
 * the model only: a host refuses a view's tools/call for a tool that does not name "app", so not
 * even a view that went wrong can run code through the bridge.
 */
export const VIEW_TOOL_META = { ui: { resourceUri: VIEW_URI, visibility: ["model"] } } as const;

/** The view's resource as resources/list shows it. */
export const VIEW_RESOURCE = {
  uri: VIEW_URI,
  name: "scratchrun-result",
  title: "ScratchRun result",
  description:
    "Shows one scratchrun_exec result (verdict, stdout, stderr, figures, tables, returned files) or a session's cells.",
  mimeType: VIEW_MIME,
  // No csp: the host's most restrictive default (no origin at all); the page's own is stricter.
  _meta: { ui: { prefersBorder: true } },
} as const;

/** dist/src/mcp/view.js → src/mcp/view/ (the same in the repository and the package). */
const DIR = new URL("../../../src/mcp/view/", import.meta.url);
const sha256 = (text: string) => `'sha256-${createHash("sha256").update(text).digest("base64")}'`;

/** The page's policy: its one script and one style by hash, images it makes from base64. */
export function viewCsp(script: string, style: string): string {
  return [
    "default-src 'none'",
    `script-src ${sha256(script)}`,
    `style-src ${sha256(style)}`,
    "img-src data: blob:",
    "connect-src 'none'",
    "frame-src 'none'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
  ].join("; ");
}

let html: string | undefined;

/** The view's HTML: the template with its script and style inline and their hashes in its CSP. */
export function viewHtml(): string {
  if (html !== undefined) return html;
  const read = (name: string) => readFileSync(new URL(name, DIR), "utf8");
  const script = `\n${read("result.js")}`;
  const style = `\n${read("result.css")}`;
  if (/<\/(script|style)/i.test(script + style))
    throw new Error("the view's script or style closes its own element");
  html = read("result.html")
    .replace("{{CSP}}", viewCsp(script, style))
    .replace(/<style>[^<]*<\/style>/, () => `<style>${style}</style>`)
    .replace(/<script>[^<]*<\/script>/, () => `<script>${script}</script>`);
  return html;
}

/** resources/read's answer for the view. */
export function readView() {
  return {
    contents: [
      { uri: VIEW_URI, mimeType: VIEW_MIME, text: viewHtml(), _meta: VIEW_RESOURCE._meta },
    ],
  };
}
