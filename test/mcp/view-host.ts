/**
 * A web host of MCP Apps views for the view's browser test, written from the extension's
 * specification (2026-01-26): the host page on one origin frames a sandbox proxy on another
 * (`allow-scripts allow-same-origin`), which loads the view's HTML into its own inner frame
 * (`srcdoc`, the same sandbox, under the restrictive CSP a host applies when a resource declares
 * none) and relays every message but its own `ui/notifications/sandbox-*`. The host answers
 * `ui/initialize` (downloads through it, the tool's definition in the context), sends the tool's
 * input and result once the view says `initialized`, sizes the frame from `size-changed`, and
 * records every message, every `tools/call` (answered with an error, as a host answers a view
 * calling a model-only tool) and every download request. Both pages are served from loopback.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** The CSP a host gives a view whose resource declares none (the specification's default). */
export const HOST_DEFAULT_CSP =
  "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; media-src 'self' data:; connect-src 'none'; frame-src 'none'; object-src 'none'; base-uri 'self'";

function hostPage(proxyOrigin: string): string {
  return `<!doctype html><html><head><meta charset="utf-8"><title>host</title><link rel="icon" href="data:,">
<style>body{margin:0;padding:8px;font:14px sans-serif} iframe{display:block;width:720px;height:60px;border:1px solid #999;margin:0 0 12px}</style>
</head><body><script>
"use strict";
const PROXY = ${JSON.stringify(proxyOrigin)};
window.__host = { messages: [], toolCalls: [], downloads: [], sized: {}, initialized: {} };
window.__show = (id, html, tool, args, result) => {
  const frame = document.createElement("iframe");
  frame.id = id;
  frame.setAttribute("sandbox", "allow-scripts allow-same-origin");
  frame.src = PROXY + "/proxy.html";
  const post = (m) => frame.contentWindow.postMessage({ jsonrpc: "2.0", ...m }, PROXY);
  window.addEventListener("message", (e) => {
    if (e.source !== frame.contentWindow || e.origin !== PROXY) return;
    const m = e.data;
    window.__host.messages.push({ view: id, message: m });
    if (m.method === "ui/notifications/sandbox-proxy-ready")
      post({ method: "ui/notifications/sandbox-resource-ready", params: { html } });
    else if (m.method === "ui/initialize")
      post({ id: m.id, result: {
        protocolVersion: "2026-01-26",
        hostInfo: { name: "scratchrun-test-host", version: "1" },
        hostCapabilities: { downloadFile: {}, openLinks: {}, serverTools: {}, serverResources: {} },
        hostContext: { toolInfo: { id: 1, tool }, theme: "light", displayMode: "inline",
          availableDisplayModes: ["inline"], containerDimensions: { width: 720, maxHeight: 6000 },
          platform: "web", locale: "en-US" } } });
    else if (m.method === "ui/notifications/initialized") {
      window.__host.initialized[id] = true;
      post({ method: "ui/notifications/tool-input", params: { arguments: args } });
      post({ method: "ui/notifications/tool-result", params: result });
    } else if (m.method === "ui/notifications/size-changed") {
      window.__host.sized[id] = m.params;
      frame.style.height = Math.ceil(m.params.height) + "px";
    } else if (m.method === "ui/download-file") {
      window.__host.downloads.push(m.params);
      post({ id: m.id, result: {} });
    } else if (m.method === "tools/call") {
      window.__host.toolCalls.push(m.params);
      post({ id: m.id, error: { code: -32000, message: "the tool is not visible to apps" } });
    } else if (m.id !== undefined && m.method !== undefined)
      post({ id: m.id, error: { code: -32601, message: "Method not found" } });
  });
  document.body.append(frame);
  // Chromium does not lay out a frame out of sight: the host shows the view it adds.
  frame.scrollIntoView({ block: "start" });
};
</script></body></html>`;
}

function proxyPage(hostOrigin: string): string {
  return `<!doctype html><html><head><meta charset="utf-8"><title>sandbox proxy</title>
<style>html,body{margin:0;height:100%;overflow:hidden} iframe{border:0;width:100%;height:100%;display:block}</style>
</head><body><script>
"use strict";
const HOST = ${JSON.stringify(hostOrigin)};
const CSP = ${JSON.stringify(HOST_DEFAULT_CSP)};
const inner = document.createElement("iframe");
inner.setAttribute("sandbox", "allow-scripts allow-same-origin");
window.addEventListener("message", (e) => {
  const m = e.data;
  if (e.source === window.parent && e.origin === HOST) {
    if (m.method === "ui/notifications/sandbox-resource-ready") {
      const meta = '<meta http-equiv="Content-Security-Policy" content="' + CSP + '">';
      inner.srcdoc = m.params.html.replace(/<head>/i, "<head>" + meta);
      document.body.append(inner);
    } else inner.contentWindow.postMessage(m, "*");
  } else if (e.source === inner.contentWindow) {
    if (typeof m?.method === "string" && m.method.startsWith("ui/notifications/sandbox-")) return;
    window.parent.postMessage(m, HOST);
  }
});
window.parent.postMessage({ jsonrpc: "2.0", method: "ui/notifications/sandbox-proxy-ready", params: {} }, HOST);
</script></body></html>`;
}

export interface ViewHost {
  /** The host page's URL. */
  url: string;
  /** Every path either server was asked for, in order. */
  requested: string[];
  close(): Promise<void>;
}

const listen = (server: Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)),
  );

/** The host page and the sandbox proxy, each on its own loopback port (two origins). */
export async function startViewHost(): Promise<ViewHost> {
  const requested: string[] = [];
  let hostOrigin = "";
  let proxyOrigin = "";
  const page =
    (path: string, body: () => string) => (req: IncomingMessage, res: ServerResponse) => {
      requested.push(`${req.headers.host}${req.url}`);
      if (req.url !== path) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, {
        "Content-Type": "text/html; charset=utf-8",
        "Cache-Control": "no-store",
      });
      res.end(body());
    };
  const host = createServer(page("/host.html", () => hostPage(proxyOrigin)));
  const proxy = createServer(page("/proxy.html", () => proxyPage(hostOrigin)));
  hostOrigin = `http://127.0.0.1:${await listen(host)}`;
  proxyOrigin = `http://127.0.0.1:${await listen(proxy)}`;
  return {
    url: `${hostOrigin}/host.html`,
    requested,
    close: async () => {
      host.closeAllConnections();
      proxy.closeAllConnections();
      await Promise.all([new Promise((r) => host.close(r)), new Promise((r) => proxy.close(r))]);
    },
  };
}
