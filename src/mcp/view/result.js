// The result view (MCP Apps, io.modelcontextprotocol/ui): one scratchrun_exec result, or a
// session tool's, as the host hands it over postMessage. Everything the sandbox made (streams,
// outputs' text forms, HTML, file names and contents) reaches the page as text nodes, table cells
// built from text, images from base64 through data: URLs, or bytes for a download: never as
// markup, so it runs no script and never reaches the host bridge (see docs/SECURITY.md).
"use strict";
(() => {
  const PROTOCOL = "2026-01-26";
  const APP = { name: "scratchrun-result", version: "1" };
  /** Image types an <img> is given (an image never runs script; these are the ones we send). */
  const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml"];
  const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
  /** Characters of one text kept in a session's stored cell. */
  const CELL_TEXT = 20000;
  /** A stored image past this (base64 characters) is named, not kept. */
  const CELL_IMAGE = 400000;
  /** All of a session's stored cells, as JSON characters. */
  const CELLS_TOTAL = 3000000;

  const parentWindow = window.parent;
  let nextId = 1;
  const pending = new Map();
  let hostCapabilities = {};
  let toolName = null;
  let toolArguments = null;

  const send = (message) => parentWindow.postMessage({ jsonrpc: "2.0", ...message }, "*");
  const notify = (method, params) => send({ method, params });
  function request(method, params) {
    const id = nextId++;
    send({ id, method, params });
    return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
  }

  // ---- building the page from text only -------------------------------------------------------

  /** An element with a class and children: strings become text nodes, never markup. */
  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children)
      if (child !== null && child !== undefined)
        node.append(typeof child === "string" ? document.createTextNode(child) : child);
    return node;
  }
  const text = (value) => (typeof value === "string" ? value : JSON.stringify(value));
  const pre = (value, className) => el("pre", className, text(value));
  const bytes = (n) =>
    n < 1024
      ? `${n} B`
      : n < 1048576
        ? `${(n / 1024).toFixed(1)} KiB`
        : `${(n / 1048576).toFixed(1)} MiB`;

  function image(mimeType, data, alt) {
    if (!IMAGE_TYPES.includes(mimeType) || typeof data !== "string" || !BASE64.test(data))
      return el("p", "note", `[${text(mimeType)}: not shown]`);
    const img = document.createElement("img");
    img.alt = alt;
    img.src = `data:${mimeType};base64,${data}`;
    return img;
  }

  /** A Markdown pipe table (a DataFrame's text/markdown form) as a table, or null. */
  function pipeTable(markdown) {
    const lines = markdown.split("\n");
    if (lines.length < 2 || !/^\|(\s*:?-+:?\s*\|)+\s*$/.test(lines[1] ?? "")) return null;
    const cells = (line) =>
      line
        .trim()
        .replace(/^\|/, "")
        .replace(/\|$/, "")
        .split(/(?<!\\)\|/)
        .map((c) => c.trim().replace(/\\\|/g, "|"));
    const table = el("table");
    const head = el("tr");
    for (const c of cells(lines[0] ?? "")) head.append(el("th", null, c));
    table.append(el("thead", null, head));
    const body = el("tbody");
    let i = 2;
    for (; i < lines.length && (lines[i] ?? "").trim().startsWith("|"); i++) {
      const row = el("tr");
      for (const c of cells(lines[i] ?? "")) row.append(el("td", null, c));
      body.append(row);
    }
    table.append(body);
    const rest = lines.slice(i).join("\n").trim();
    return el("div", "output", el("div", "table", table), rest ? el("p", "note", rest) : null);
  }

  const DEFAULT_REPR = /^<[\w.]+ object at 0x[0-9a-fA-F]+>$/;

  /** One display or result: its image, its table, or its best text form (HTML as its source). */
  function outputView(output, imageBlock, no) {
    const forms = Array.isArray(output.data) ? output.data : [];
    const box = el("div", "output");
    const img = forms.find((f) => f.text === undefined);
    if (img && imageBlock) {
      box.append(image(imageBlock.mimeType, imageBlock.data, `output ${no}`));
      return box;
    }
    if (img)
      box.append(
        el(
          "p",
          "note",
          `[${text(img.mime_type)}, ${bytes(img.size_bytes)}: ${text(img.left_out ?? "not in this answer")}]`,
        ),
      );
    const byType = (t) => forms.find((f) => f.mime_type === t && typeof f.text === "string");
    const markdown = byType("text/markdown");
    const table = markdown ? pipeTable(markdown.text) : null;
    if (table) return table;
    const plain = byType("text/plain");
    const html = byType("text/html");
    const first = forms.find((f) => typeof f.text === "string");
    if (html && (!plain || DEFAULT_REPR.test(plain.text))) {
      box.append(
        el("p", "note", "text/html, shown as its source: this view renders no HTML a sandbox made"),
      );
      box.append(pre(html.text));
    } else if (first) box.append(pre((markdown ?? plain ?? first).text));
    return box;
  }

  // ---- the answer's blocks: which image and file each is ---------------------------------------

  /** Image blocks of outputs come first, one per output with an image form; files follow. */
  function splitBlocks(result, blocks) {
    const rest = blocks.slice(1); // the first is the text summary
    const images = new Map();
    (result.outputs ?? []).forEach((o, i) => {
      if (o.type !== "display" && o.type !== "result") return;
      const img = (o.data ?? []).find((f) => f.text === undefined && !f.left_out);
      if (img && rest[0] && rest[0].type === "image") images.set(i, rest.shift());
    });
    const files = new Map();
    for (const f of result.files ?? []) {
      if (f.status !== "ok") continue;
      const block = rest[0];
      if (!block) break;
      const uri = block.type === "resource" ? block.resource?.uri : undefined;
      if (block.type === "image" || uri === `file://${f.path}`) files.set(f, rest.shift());
    }
    return { images, files };
  }

  function base64Bytes(data) {
    const raw = atob(data);
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  /** A returned file to the user: through the host (ui/download-file), else a download link. */
  async function download(file, block) {
    const resource =
      block.type === "resource"
        ? block.resource
        : { uri: `file://${file.path}`, mimeType: block.mimeType, blob: block.data };
    if (hostCapabilities.downloadFile) {
      try {
        const answer = await request("ui/download-file", {
          contents: [{ type: "resource", resource }],
        });
        if (!answer || !answer.isError) return;
      } catch {
        // the host refused: the link below, where the host lets a view download
      }
    }
    const content =
      typeof resource.blob === "string"
        ? base64Bytes(resource.blob)
        : new TextEncoder().encode(resource.text ?? "");
    // Never rendered: octet-stream, so an HTML file is bytes to save, not a page of this origin.
    const url = URL.createObjectURL(new Blob([content], { type: "application/octet-stream" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = file.path.split("/").pop() || "file";
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  function fileView(file, block) {
    const box = el(
      "div",
      "file",
      el("span", "name", file.path),
      el(
        "span",
        "meta",
        `${text(file.mime_type)} · ${bytes(file.size_bytes)}${file.status !== "ok" ? ` · not returned: ${text(file.message ?? file.status)}` : ""}`,
      ),
    );
    if (!block) {
      if (file.status === "ok") box.append(el("span", "meta", "not in this answer"));
      return box;
    }
    if (block.type === "image") box.append(image(block.mimeType, block.data, file.path));
    const button = el("button", null, "Download");
    button.type = "button";
    button.addEventListener("click", () => void download(file, block));
    box.append(button);
    if (block.type === "resource" && typeof block.resource?.text === "string") {
      const head = block.resource.text.slice(0, 65536);
      box.append(el("details", null, el("summary", null, "contents"), pre(head)));
    }
    return box;
  }

  // ---- the verdict and what the server said ---------------------------------------------------

  function verdictView(r) {
    const ok = r.exit_reason === "ok";
    const label =
      r.exit_reason === "ok" || r.exit_reason === "error"
        ? `exit ${r.exit_code}`
        : `${r.exit_reason}${r.signal !== null && r.signal !== undefined ? ` (signal ${r.signal})` : ""}`;
    const parts = [`${r.duration_ms} ms`, `isolation ${r.isolation}`, `network ${r.network}`];
    if (r.session)
      parts.push(
        `session cell ${r.session.calls}, interpreter ${r.session.interpreter}${r.session.ended ? ", session ended" : ""}`,
      );
    return el(
      "div",
      "verdict",
      el("span", `badge ${ok ? "ok" : "bad"}`, label),
      el("span", "meta", parts.join(" · ")),
    );
  }

  function notesView(r) {
    const box = el("div");
    if (r.message) box.append(el("p", "note warn", r.message));
    if (r.network_reason) box.append(el("p", "note", `network: ${r.network_reason}`));
    const refused = Array.isArray(r.network_refused) ? r.network_refused : [];
    if (refused.length || r.network_refused_omitted) {
      box.append(el("h2", null, "Refused by the egress allowlist"));
      const list = el("ul", "refused");
      for (const f of refused)
        list.append(
          el(
            "li",
            null,
            `${f.host ?? "(no name)"}:${f.port} · ${String(f.reason).replace(/_/g, " ")}${f.count > 1 ? ` · ${f.count}×` : ""}`,
          ),
        );
      if (r.network_refused_omitted)
        list.append(el("li", "meta", `and ${r.network_refused_omitted} more`));
      box.append(list);
    }
    if (r.network_blocked_packets)
      box.append(el("p", "note", `${r.network_blocked_packets} packets blocked`));
    if (r.outputs_left_out)
      box.append(
        el(
          "p",
          "note",
          `${r.outputs_left_out.count} outputs left out: ${(r.outputs_left_out.names ?? []).join(", ")}`,
        ),
      );
    return box;
  }

  // ---- one result -----------------------------------------------------------------------------

  function execView(r, blocks, args) {
    const view = el("section", "cell current");
    const { images, files } = splitBlocks(r, blocks);
    if (args && typeof args.code === "string")
      view.append(
        el(
          "details",
          null,
          el("summary", null, `code (${text(args.runtime ?? "")})`),
          pre(args.code),
        ),
      );
    view.append(verdictView(r), notesView(r));
    if (r.stdout || r.stdout_truncated)
      view.append(
        el(
          "h2",
          null,
          `stdout${r.stdout_omitted_bytes ? ` (${r.stdout_omitted_bytes} bytes omitted)` : ""}`,
        ),
        pre(r.stdout, "stdout"),
      );
    const shown = (r.outputs ?? [])
      .map((o, i) => [o, i])
      .filter(([o]) => o.type === "display" || o.type === "result");
    if (shown.length) {
      view.append(el("h2", null, "outputs"));
      for (const [o, i] of shown) view.append(outputView(o, images.get(i), i + 1));
    }
    if (r.stderr || r.stderr_truncated)
      view.append(
        el(
          "h2",
          null,
          `stderr${r.stderr_omitted_bytes ? ` (${r.stderr_omitted_bytes} bytes omitted)` : ""}`,
        ),
        pre(r.stderr, "stderr"),
      );
    for (const o of r.outputs ?? [])
      if (o.type === "error")
        view.append(
          el("h2", null, `${text(o.ename)}: ${text(o.evalue)}`),
          pre(o.traceback, "stderr"),
        );
    if ((r.files ?? []).length) {
      view.append(el("h2", null, "files"));
      const list = el("div", "files");
      for (const f of r.files) list.append(fileView(f, files.get(f)));
      view.append(list);
    }
    if (!r.stdout && !r.stderr && !shown.length && !(r.files ?? []).length)
      view.append(el("p", "note", "(no output)"));
    return view;
  }

  // ---- a session's cells, as this client holds them -------------------------------------------

  function storage() {
    try {
      const s = window.sessionStorage;
      s.getItem("scratchrun");
      return s;
    } catch {
      return null; // an opaque origin: the host gives this view no storage
    }
  }
  const cellsKey = (id) => `scratchrun.cells.${id}`;

  function loadCells(id) {
    const s = storage();
    if (!s) return null;
    try {
      const cells = JSON.parse(s.getItem(cellsKey(id)) ?? "[]");
      return Array.isArray(cells) ? cells : [];
    } catch {
      return [];
    }
  }

  const clip = (value) =>
    typeof value === "string" && value.length > CELL_TEXT
      ? `${value.slice(0, CELL_TEXT)}\n[… ${value.length - CELL_TEXT} more characters in the cell's own view]`
      : value;

  /** This cell as it is kept: texts clipped, images kept while small. */
  function cellRecord(r, blocks, args) {
    const { images } = splitBlocks(r, blocks);
    const outputs = [];
    (r.outputs ?? []).forEach((o, i) => {
      if (o.type !== "display" && o.type !== "result") return;
      const block = images.get(i);
      if (block && block.data.length <= CELL_IMAGE)
        outputs.push({ image: { mimeType: block.mimeType, data: block.data } });
      else if (block) outputs.push({ text: `[${block.mimeType}: in the cell's own view]` });
      else {
        const forms = (o.data ?? [])
          .filter((f) => typeof f.text === "string")
          .map((f) => ({ mime_type: f.mime_type, size_bytes: f.size_bytes, text: clip(f.text) }));
        outputs.push({ data: forms });
      }
    });
    return {
      calls: r.session.calls,
      code: clip(args && typeof args.code === "string" ? args.code : ""),
      runtime: args?.runtime ?? "",
      exit_reason: r.exit_reason,
      exit_code: r.exit_code,
      signal: r.signal,
      duration_ms: r.duration_ms,
      isolation: r.isolation,
      network: r.network,
      stdout: clip(r.stdout),
      stderr: clip(r.stderr),
      outputs,
    };
  }

  function saveCell(id, record) {
    const s = storage();
    if (!s) return;
    let cells = (loadCells(id) ?? []).filter((c) => c.calls !== record.calls);
    cells.push(record);
    cells.sort((a, b) => a.calls - b.calls);
    // Over the bound the oldest cells' images go first, then the oldest cells.
    for (const c of cells)
      if (JSON.stringify(cells).length > CELLS_TOTAL)
        c.outputs = c.outputs.map((o) =>
          o.image ? { text: "[image: in the cell's own view]" } : o,
        );
    while (cells.length > 1 && JSON.stringify(cells).length > CELLS_TOTAL) cells = cells.slice(1);
    try {
      s.setItem(cellsKey(id), JSON.stringify(cells));
    } catch {
      // full: the cells shown stay what they were
    }
  }

  function storedCellView(c) {
    const box = el("div", "cell");
    if (c.code) box.append(pre(c.code));
    box.append(verdictView({ ...c, session: null }));
    if (c.stdout) box.append(pre(c.stdout, "stdout"));
    (c.outputs ?? []).forEach((o, i) => {
      if (o.image)
        box.append(
          el(
            "div",
            "output",
            image(o.image.mimeType, o.image.data, `cell ${c.calls}, output ${i + 1}`),
          ),
        );
      else if (o.text) box.append(el("p", "note", o.text));
      else box.append(outputView({ data: o.data ?? [] }, undefined, i + 1));
    });
    if (c.stderr) box.append(pre(c.stderr, "stderr"));
    return el(
      "details",
      null,
      el(
        "summary",
        null,
        `cell ${c.calls} (${text(c.runtime)}, ${c.exit_reason === "ok" || c.exit_reason === "error" ? `exit ${c.exit_code}` : c.exit_reason})`,
      ),
      box,
    );
  }

  /** The cells this client showed before `before` (every cell when null), and a line saying so. */
  function earlierCells(id, before) {
    const cells = loadCells(id);
    const box = el("div");
    if (cells === null) {
      box.append(
        el(
          "p",
          "note",
          "This host gives the view no storage: earlier cells of the session are in their own views.",
        ),
      );
      return box;
    }
    const earlier = cells.filter((c) => before === null || c.calls < before);
    if (!earlier.length) return box;
    box.append(
      el(
        "h2",
        null,
        `earlier cells of session ${id} shown in this client (ScratchRun keeps no output)`,
      ),
    );
    for (const c of earlier) box.append(storedCellView(c));
    return box;
  }

  function sessionView(info) {
    const view = el("section");
    view.append(
      el(
        "div",
        "verdict",
        el("span", "badge ok", toolName === "scratchrun_session_end" ? "session ended" : "session"),
        el(
          "span",
          "meta",
          `${text(info.session_id)} · ${text(info.runtime)} · ${info.memory_mb} MB · network ${text(info.network)} · ${text(info.isolation)} · ${info.calls ?? 0} calls`,
        ),
      ),
    );
    if (info.expires_at && toolName !== "scratchrun_session_end")
      view.append(el("p", "note", `ends at ${text(info.expires_at)} at the latest`));
    view.append(earlierCells(String(info.session_id), null));
    return view;
  }

  // ---- the host's messages --------------------------------------------------------------------

  const root = () => document.getElementById("root");

  function render(result) {
    const main = root();
    main.replaceChildren();
    const blocks = Array.isArray(result?.content) ? result.content : [];
    const sc = result?.structuredContent;
    if (result?.isError || !sc || typeof sc !== "object") {
      main.append(
        el("div", "verdict", el("span", "badge bad", result?.isError ? "refused" : "result")),
      );
      for (const b of blocks) if (b?.type === "text") main.append(pre(b.text));
      return;
    }
    if (typeof sc.exit_reason === "string") {
      if (sc.session && typeof sc.session.session_id === "string") {
        const id = sc.session.session_id;
        main.append(earlierCells(id, sc.session.calls));
        main.append(execView(sc, blocks, toolArguments));
        saveCell(id, cellRecord(sc, blocks, toolArguments));
      } else main.append(execView(sc, blocks, toolArguments));
      return;
    }
    if (typeof sc.session_id === "string") {
      main.append(sessionView(sc));
      return;
    }
    for (const b of blocks) if (b?.type === "text") main.append(pre(b.text));
  }

  const THEME_VARIABLE = /^--(color|font|border|shadow)-[a-z0-9-]+$/;
  function applyContext(context) {
    if (!context || typeof context !== "object") return;
    if (context.toolInfo?.tool?.name) toolName = String(context.toolInfo.tool.name);
    if (context.theme === "light" || context.theme === "dark")
      document.documentElement.dataset.theme = context.theme;
    const variables = context.styles?.variables;
    if (variables && typeof variables === "object")
      for (const [name, value] of Object.entries(variables))
        if (THEME_VARIABLE.test(name) && typeof value === "string")
          document.documentElement.style.setProperty(name, value);
  }

  window.addEventListener("message", (event) => {
    // Only the host (through its sandbox proxy) speaks to this view.
    if (event.source !== parentWindow) return;
    const m = event.data;
    if (!m || typeof m !== "object" || m.jsonrpc !== "2.0") return;
    if (m.method === undefined && m.id !== undefined) {
      const waiter = pending.get(m.id);
      if (!waiter) return;
      pending.delete(m.id);
      if (m.error) waiter.reject(new Error(text(m.error.message)));
      else waiter.resolve(m.result);
      return;
    }
    switch (m.method) {
      case "ui/notifications/tool-input":
        toolArguments = m.params?.arguments ?? null;
        break;
      case "ui/notifications/tool-result":
        render(m.params);
        break;
      case "ui/notifications/tool-cancelled":
        root().replaceChildren(
          el("p", "note", `Cancelled${m.params?.reason ? `: ${text(m.params.reason)}` : ""}.`),
        );
        break;
      case "ui/notifications/host-context-changed":
        applyContext(m.params);
        break;
      case "ui/resource-teardown":
      case "ping":
        send({ id: m.id, result: {} });
        break;
      default:
        if (m.id !== undefined)
          send({ id: m.id, error: { code: -32601, message: "Method not found" } });
    }
  });

  // The host sizes the frame to the page.
  let last = "";
  new ResizeObserver(() => {
    // The page's own height (not the frame's): the frame can shrink back when the page does.
    const size = {
      width: document.documentElement.scrollWidth,
      height: Math.ceil(document.documentElement.getBoundingClientRect().height),
    };
    const key = `${size.width}x${size.height}`;
    if (key === last) return;
    last = key;
    notify("ui/notifications/size-changed", size);
  }).observe(document.documentElement);

  request("ui/initialize", {
    appInfo: APP,
    appCapabilities: { availableDisplayModes: ["inline"] },
    protocolVersion: PROTOCOL,
  }).then(
    (answer) => {
      hostCapabilities = answer?.hostCapabilities ?? {};
      applyContext(answer?.hostContext);
      notify("ui/notifications/initialized", {});
    },
    () => root().replaceChildren(el("p", "note", "The host did not answer ui/initialize.")),
  );
})();
