// The ScratchRun console: one page, its views (#keys, #runs, #usage, #playground, #health, and an
// admin's #people and #audit), each drawn from the console's JSON API (/v1/console/…,
// openapi.json) and nothing else. Every value from the server reaches the page as text
// (textContent), never as HTML.
"use strict";

const RUNTIMES = ["python3.12", "python3.11", "node20", "bash"];
const EXAMPLE =
  "import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 10, 100)\nplt.plot(x, np.sin(x))\nplt.savefig('/tmp/plot.png')";
const VIEWS = ["keys", "runs", "run", "usage", "playground", "health", "people", "audit"];
let csrf = "";
let me = null;
// The policy form's bounds (GET /v1/console/session): the server's settings, and this user's most.
let limits = null;
let createPolicy = null;
let editPolicy = null;
let serverUrl = location.origin;
let keys = [];
let runsTimer = null;
let runsBefore = null;

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "on") for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children.flat())
    e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

function flash(message) {
  const f = $("flash");
  f.textContent = message || "";
  f.hidden = !message;
}

async function api(method, path, body) {
  const headers = {};
  if (method !== "GET") headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  if (res.status === 401) {
    location.assign("/console/signin?next=" + encodeURIComponent("/console" + location.hash));
    throw new Error("signed out");
  }
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((data.error && data.error.message) || "HTTP " + res.status);
  return data;
}

const when = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "–");

// Each cell carries its column's name: on a phone a row is drawn as a card of labelled lines.
function table(t, head, rows) {
  t.replaceChildren(
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        head.map((h) => el("th", {}, h)),
      ),
    ),
    el(
      "tbody",
      {},
      rows.map((r) =>
        el(
          "tr",
          {},
          r.map((c, i) => el("td", { "data-label": head[i] || undefined }, c)),
        ),
      ),
    ),
  );
}

function fillKeySelect(select, withAll) {
  const keep = select.value;
  select.replaceChildren(
    ...(withAll ? [el("option", { value: "" }, "All keys")] : []),
    ...keys.map((k) => el("option", { value: k.id }, `${k.name} (${k.id})`)),
  );
  if ([...select.options].some((o) => o.value === keep)) select.value = keep;
}

async function loadKeys() {
  keys = (await api("GET", "/v1/console/keys")).keys;
  fillKeySelect($("run-key"), true);
  fillKeySelect($("play-key"), false);
}

// Keys ---------------------------------------------------------------------------------------

function keyState(k) {
  if (k.revoked_at) return `revoked ${when(k.revoked_at)}`;
  if (k.expires_at && k.expires_at <= Date.now()) return `expired ${when(k.expires_at)}`;
  return k.expires_at ? `active, expires ${when(k.expires_at)}` : "active";
}

async function showKeys() {
  await loadKeys();
  // Every key of this person's, the revoked and expired ones too (listed, never usable).
  const all = (await api("GET", "/v1/console/keys?state=all")).keys;
  const live = new Set(keys.map((k) => k.id));
  table(
    $("key-table"),
    ["Name", "ID", "State", "Created", "Last used", "Policy", ""],
    all.map((k) => [
      k.name,
      el("code", {}, k.id),
      el("span", { class: "wrap", "data-state": live.has(k.id) ? "active" : "ended" }, keyState(k)),
      when(k.created_at),
      when(k.last_used_at),
      el("span", { class: "wrap" }, k.policy ? JSON.stringify(k.policy) : "server defaults"),
      live.has(k.id) ? keyActions(k) : "",
    ]),
  );
  for (const tr of $("key-table").tBodies[0].rows)
    if (tr.querySelector("[data-state=ended]")) tr.classList.add("ended");
}

function keyActions(k) {
  return el(
    "span",
    { class: "actions" },
    el(
      "button",
      { type: "button", class: "secondary", "data-key": k.id, on: { click: () => showKey(k) } },
      "Policy & grants",
    ),
    el(
      "button",
      {
        type: "button",
        class: "danger",
        "data-revoke": k.id,
        on: { click: () => revokeKey(k) },
      },
      "Revoke",
    ),
  );
}

async function revokeKey(k) {
  if (!confirm(`Revoke ${k.name}? Its next call is refused.`)) return;
  await api("DELETE", `/v1/console/keys/${encodeURIComponent(k.id)}`);
  $("key-detail").hidden = true;
  // The new key's secret and snippets go with it: nothing on screen names a dead key.
  if ($("key-secret").dataset.key === k.id) hideSecret();
  await showKeys();
}

function hideSecret() {
  $("key-secret").hidden = true;
  delete $("key-secret").dataset.key;
  for (const id of ["key-secret-value", "snippet-claude", "snippet-json", "snippet-curl"])
    $(id).textContent = "";
}

/** The new key, and how to use it from Claude Code, Claude Desktop or Cursor, and curl. */
function showSecret(id, key) {
  const base = serverUrl.replace(/\/+$/, "");
  $("key-secret").dataset.key = id;
  $("key-secret-value").textContent = key;
  $("snippet-claude").textContent =
    `claude mcp add --transport http scratchrun ${base}/mcp --header "Authorization: Bearer ${key}"`;
  $("snippet-json").textContent = JSON.stringify(
    {
      mcpServers: {
        scratchrun: {
          command: "npx",
          args: ["-y", "scratchrun-mcp"],
          env: { SCRATCHRUN_URL: base, SCRATCHRUN_API_KEY: key },
        },
      },
    },
    null,
    2,
  );
  $("snippet-curl").textContent =
    `curl -sS ${base}/v1/exec -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" -d '{"runtime": "python3.12", "code": "print(6 * 7)"}'`;
  $("key-secret").hidden = false;
}

/** Copies the text of the element a Copy button names; where the clipboard is refused, selects it. */
async function copyFrom(button) {
  const source = $(button.dataset.copy);
  try {
    await window.navigator.clipboard.writeText(source.textContent);
    button.textContent = "Copied";
  } catch {
    window.getSelection().selectAllChildren(source);
    button.textContent = "Selected: press Ctrl+C";
  }
  window.setTimeout(() => (button.textContent = "Copy"), 2000);
}

async function showKey(k) {
  $("key-detail").hidden = false;
  $("key-detail").dataset.key = k.id;
  $("key-detail-title").textContent = `${k.name} (${k.id})`;
  editPolicy.set(k.policy);
  const { grants } = await api("GET", `/v1/console/keys/${encodeURIComponent(k.id)}/grants`);
  table(
    $("grant-table"),
    ["Client", "Created", "State", ""],
    grants.map((g) => [
      g.client_name,
      when(g.created_at),
      g.revoked_at ? `revoked ${when(g.revoked_at)}` : "active",
      g.revoked_at
        ? ""
        : el(
            "button",
            {
              type: "button",
              class: "danger",
              on: {
                click: async () => {
                  await api("DELETE", `/v1/console/grants/${encodeURIComponent(g.id)}`);
                  await showKey(k);
                },
              },
            },
            "Revoke",
          ),
    ]),
  );
  if (grants.length === 0)
    $("grant-table").replaceChildren(el("caption", {}, "No client was approved for this key."));
}

// The policy form: one field per key policy field, showing the server's setting and (a member)
// the most they may give; every change writes the JSON below it, which is what is sent.

const NUMBERS = [
  ["max_timeout_ms", "Longest timeout (ms)"],
  ["max_memory_mb", "Most memory (MB)"],
  ["concurrency", "Calls at once"],
  ["rate_per_minute", "Calls per minute"],
];
const FIELDS = ["runtimes", "network", "egress_allow", ...NUMBERS.map(([f]) => f)];

function limitText(field, v) {
  if (field === "egress_allow") return v ? v.join(", ") : "every public domain";
  if (field === "networks") return v.join(" or ");
  return Array.isArray(v) ? v.join(", ") : String(v);
}

function hint(field) {
  const server = limitText(field, limits.server[field]);
  return limits.yours
    ? `server: ${server} · your most: ${limitText(field, limits.yours[field])}`
    : `server: ${server}`;
}

function policyFields(box, textarea, mode) {
  const p = box.id;
  const runtimes = (limits.yours || limits.server).runtimes;
  const field = (label, input, help) =>
    el("div", { class: "field" }, label, input, el("span", { class: "hint" }, help));
  box.replaceChildren(
    box.querySelector("legend"),
    field(
      el("label", {}, "Runtimes"),
      el(
        "div",
        { class: "choices" },
        runtimes.map((r) =>
          el(
            "label",
            {},
            el("input", { type: "checkbox", id: `${p}-runtime-${r}`, value: r }),
            ` ${r}`,
          ),
        ),
      ),
      hint("runtimes"),
    ),
    field(
      el("label", { for: `${p}-network` }, "Network"),
      el(
        "select",
        { id: `${p}-network` },
        el("option", { value: "" }, "The server's"),
        el("option", { value: "public" }, "public"),
        el("option", { value: "none" }, "none"),
      ),
      hint("networks"),
    ),
    field(
      el("label", { for: `${p}-egress_allow` }, "Only these domains (with public)"),
      el("input", { id: `${p}-egress_allow`, placeholder: "example.com, *.example.org" }),
      hint("egress_allow"),
    ),
    ...NUMBERS.map(([f, label]) =>
      field(
        el("label", { for: `${p}-${f}` }, label),
        el("input", { id: `${p}-${f}`, type: "number", min: "1", step: "1" }),
        hint(f),
      ),
    ),
  );
  let base = {};
  const read = () => {
    const out = {};
    const picked = runtimes.filter((r) => $(`${p}-runtime-${r}`).checked);
    if (picked.length) out.runtimes = picked;
    if ($(`${p}-network`).value) out.network = $(`${p}-network`).value;
    const domains = $(`${p}-egress_allow`)
      .value.split(/[\s,]+/)
      .filter(Boolean);
    if (domains.length) out.egress_allow = domains;
    for (const [f] of NUMBERS)
      if ($(`${p}-${f}`).value !== "") out[f] = Number($(`${p}-${f}`).value);
    return out;
  };
  const write = () => {
    const now = read();
    if (mode === "create") {
      textarea.value = Object.keys(now).length ? JSON.stringify(now) : "";
      return;
    }
    // A change names only the fields that changed (null: back to the server's setting), so a
    // member's change is held to their ceiling field by field, as `keys update` is.
    const patch = {};
    for (const f of FIELDS)
      if (JSON.stringify(now[f]) !== JSON.stringify(base[f])) patch[f] = now[f] ?? null;
    textarea.value = JSON.stringify(patch);
  };
  box.addEventListener("input", write);
  box.addEventListener("change", write);
  return {
    set(policy) {
      base = policy || {};
      for (const r of runtimes)
        $(`${p}-runtime-${r}`).checked = !!base.runtimes && base.runtimes.includes(r);
      $(`${p}-network`).value = base.network || "";
      $(`${p}-egress_allow`).value = (base.egress_allow || []).join(", ");
      for (const [f] of NUMBERS) $(`${p}-${f}`).value = base[f] == null ? "" : String(base[f]);
      write();
    },
  };
}

function parsePolicy(text) {
  if (!text.trim()) return null;
  try {
    return JSON.parse(text);
  } catch {
    throw new Error("The policy is not JSON");
  }
}

// Runs ---------------------------------------------------------------------------------------

function runsQuery(before) {
  const q = new URLSearchParams({ limit: "50" });
  if ($("run-key").value) q.set("key_id", $("run-key").value);
  if ($("run-runtime").value) q.set("runtime", $("run-runtime").value);
  if ($("run-exit").value) q.set("exit_reason", $("run-exit").value);
  if ($("run-since").value) q.set("since", String(Date.parse($("run-since").value + "T00:00:00Z")));
  if ($("run-session").value.trim()) q.set("session", $("run-session").value.trim());
  if (before) q.set("before", String(before));
  return "/v1/console/runs?" + q;
}

// Each row opens its run's page (#run/ID): the time is its link, and a click anywhere on the row.
const runRow = (r) => [
  el("a", { href: "#run/" + encodeURIComponent(r.id), class: "run-link" }, when(r.received_at)),
  r.key_name || r.key_id,
  r.runtime,
  r.exit_reason || r.error_code || r.status,
  r.duration_ms == null ? "–" : `${r.duration_ms} ms`,
  r.isolation || "–",
  r.worker || "–",
];
const RUN_HEAD = ["Time (UTC)", "Key", "Runtime", "Exit", "Duration", "Isolation", "Worker"];

async function showRuns() {
  if (keys.length === 0) await loadKeys();
  const { runs, next_before } = await api("GET", runsQuery());
  table($("run-table"), RUN_HEAD, runs.map(runRow));
  for (const [i, tr] of [...$("run-table").tBodies[0].rows].entries()) openOnClick(tr, runs[i]);
  runsBefore = next_before;
  $("run-more").hidden = next_before === null;
}

async function moreRuns() {
  const { runs, next_before } = await api("GET", runsQuery(runsBefore));
  const body = $("run-table").tBodies[0];
  for (const r of runs) {
    const tr = el(
      "tr",
      {},
      runRow(r).map((c, i) => el("td", { "data-label": RUN_HEAD[i] }, c)),
    );
    openOnClick(tr, r);
    body.append(tr);
  }
  runsBefore = next_before;
  $("run-more").hidden = next_before === null;
}

function openOnClick(tr, r) {
  tr.classList.add("opens");
  tr.addEventListener("click", (ev) => {
    if (!ev.target.closest("a")) location.hash = "run/" + encodeURIComponent(r.id);
  });
}

// One run's page: everything its record holds, by group, each value as text. Code and output are
// never stored: their sizes and SHA-256 are, which match a copy the caller kept.
const RUN_FIELDS = [
  ["Call", ["id", "Run"], ["key_id", "Key"], ["transport", "Transport"], ["status", "Status"]],
  [
    "Request",
    ["runtime", "Runtime"],
    ["network", "Network"],
    ["timeout_ms", "Timeout", "ms"],
    ["memory_mb", "Memory", "MB"],
    ["code_bytes", "Code size", "bytes"],
    ["code_sha256", "Code SHA-256"],
    ["env_count", "Env variables"],
    ["files_in_count", "Files in"],
    ["files_in_bytes", "Files in, size", "bytes"],
  ],
  [
    "Time (UTC)",
    ["received_at", "Received", "time"],
    ["started_at", "Started", "time"],
    ["finished_at", "Finished", "time"],
    ["duration_ms", "Duration", "ms"],
  ],
  [
    "Outcome",
    ["isolation", "Isolation"],
    ["exit_reason", "Exit reason"],
    ["exit_code", "Exit code"],
    ["signal", "Signal"],
    ["error_code", "Error code"],
    ["stdout_bytes", "Stdout size", "bytes"],
    ["stdout_sha256", "Stdout SHA-256"],
    ["stderr_bytes", "Stderr size", "bytes"],
    ["stderr_sha256", "Stderr SHA-256"],
    ["files_out_count", "Files out"],
    ["files_out_bytes", "Files out, size", "bytes"],
    ["files_out_sha256", "Files out SHA-256"],
  ],
  ["Where", ["replica_id", "Replica"], ["worker", "Worker"], ["session_record", "Session"]],
];

const derived = (name, label, ms) => [
  el("dt", {}, label),
  el("dd", { "data-derived": name }, ms == null ? "–" : `${ms} ms`),
];

function runValue(v, unit) {
  if (v === null || v === undefined) return "–";
  if (unit === "time") return when(v);
  return unit ? `${v} ${unit}` : String(v);
}

async function showRun(id) {
  const { run, session, key_name } = await api("GET", "/v1/console/runs/" + encodeURIComponent(id));
  const named = new Set();
  const group = (title, fields) =>
    el(
      "div",
      { class: "run-group" },
      el("h2", {}, title),
      el(
        "dl",
        {},
        fields.flatMap(([col, label, unit]) => {
          named.add(col);
          const v = col === "key_id" && key_name ? `${key_name} (${run.key_id})` : run[col];
          return [el("dt", {}, label), el("dd", { "data-col": col }, runValue(v, unit))];
        }),
      ),
    );
  const groups = RUN_FIELDS.map(([title, ...fields]) => group(title, fields));
  // Not stored: worked out from the times that are (docs/decisions/0021-run-record-fields.md).
  const { received_at: rec, started_at: st, finished_at: fin, duration_ms: dur } = run;
  groups[2]
    .querySelector("dl")
    .append(
      ...derived("queued", "Queued (started − received)", st != null ? st - rec : null),
      ...derived(
        "around",
        "Around the code (finished − started − duration)",
        st != null && fin != null && dur != null ? fin - st - dur : null,
      ),
    );
  // A column this page does not know yet is shown too, as recorded.
  const rest = Object.keys(run).filter((c) => !named.has(c));
  if (rest.length)
    groups.push(
      group(
        "Also recorded",
        rest.map((c) => [c, c]),
      ),
    );
  if (session)
    groups.push(
      el(
        "div",
        { class: "run-group" },
        el("h2", {}, "Session"),
        el(
          "dl",
          {},
          [
            ["Runtime", session.runtime],
            ["Started", when(session.started_at)],
            ["Ended", session.ended_at ? when(session.ended_at) : "open"],
            ["End reason", session.end_reason || "–"],
            ["Calls", session.calls == null ? "–" : String(session.calls)],
          ].flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]),
        ),
        el(
          "a",
          {
            href: "#runs",
            id: "run-session-calls",
            on: { click: () => ($("run-session").value = session.id) },
          },
          "Every call of this session",
        ),
      ),
    );
  $("run-title").textContent = `Run ${run.id}`;
  $("run-detail").replaceChildren(...groups);
}

// Usage: a stacked bar per day, one colour per key, drawn as SVG here ------------------------

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// A stacked bar per day, one colour per key; a label under the last day and every `step` before.
function dayChart(u, days, valueOf, label, unit) {
  const ids = u.keys.map((k) => k.id);
  const per = new Map(days.map((d) => [d, new Map()]));
  for (const r of u.usage) per.get(r.day)?.set(r.key_id, valueOf(r));
  const totals = days.map((d) => [...per.get(d).values()].reduce((a, b) => a + b, 0));
  const max = Math.max(1, ...totals);
  const W = 640,
    H = 200,
    left = 40,
    bottom = 20,
    top = 10;
  const bw = (W - left) / days.length;
  const step = Math.ceil(days.length / 8);
  const chart = svg("svg", {
    viewBox: `0 0 ${W} ${H}`,
    width: "100%",
    role: "img",
    "aria-label": label,
  });
  const y = (v) => H - bottom - (v / max) * (H - bottom - top);
  chart.append(svg("line", { x1: left, x2: W, y1: H - bottom, y2: H - bottom, stroke: "#aab3bd" }));
  chart.append(svg("text", { x: 0, y: top + 8 }, String(Math.round(max * 10) / 10)));
  chart.append(svg("text", { x: 0, y: H - bottom }, "0"));
  days.forEach((d, i) => {
    let base = 0;
    ids.forEach((id, j) => {
      const v = per.get(d).get(id) || 0;
      if (!v) return;
      const r = svg("rect", {
        x: left + i * bw + 2,
        width: Math.max(1, bw - 4),
        y: y(base + v),
        height: y(base) - y(base + v),
        class: "c" + (j % 6),
      });
      r.append(svg("title", {}, `${d} ${u.keys[j].name}: ${Math.round(v * 1000) / 1000} ${unit}`));
      chart.append(r);
      base += v;
    });
    if ((days.length - 1 - i) % step === 0)
      chart.append(svg("text", { x: left + i * bw + 2, y: H - 5 }, d.slice(5)));
  });
  return chart;
}

const refusals = (r) =>
  Object.entries(r)
    .map(([code, n]) => `${code} ${n}`)
    .join(", ") || "–";
const figures = (f) => [
  String(f.calls),
  String(f.sandbox_seconds),
  String(f.gb_seconds),
  String(f.peak_concurrency),
  refusals(f.refusals),
];
const USAGE_HEAD = ["Key", "Calls", "Sandbox-seconds", "GB-seconds", "Peak at once", "Refused"];

// Which showUsage() is the latest: an earlier period's answer (or refusal) arriving after it is dropped.
let usageSeq = 0;

async function showUsage() {
  const seq = ++usageSeq;
  const q = new URLSearchParams();
  if ($("usage-from").value) q.set("from", $("usage-from").value);
  else q.set("days", "14");
  if ($("usage-to").value) q.set("to", $("usage-to").value);
  let u;
  try {
    u = await api("GET", "/v1/console/usage?" + q);
  } catch (e) {
    if (seq === usageSeq) throw e;
    return;
  }
  if (seq !== usageSeq) return;
  $("usage-from").value = u.since;
  $("usage-to").value = u.until;
  const start = Date.parse(u.since + "T00:00:00Z");
  const days = Array.from({ length: u.days }, (_, i) =>
    new Date(start + i * 86400000).toISOString().slice(0, 10),
  );
  const per = new Map(u.per_key.map((f) => [f.key_id, f]));
  const zero = { calls: 0, sandbox_seconds: 0, gb_seconds: 0, peak_concurrency: 0, refusals: {} };
  const keyName = (k) => `${k.name}${k.revoked_at ? " (revoked)" : ""}`;
  table($("usage-table"), USAGE_HEAD, [
    ...u.keys.filter((k) => per.has(k.id)).map((k) => [keyName(k), ...figures(per.get(k.id))]),
    ["Total", ...figures(u.total || zero)],
  ]);
  $("usage-table").tBodies[0].lastChild.classList.add("total");
  $("usage-chart").replaceChildren(
    dayChart(u, days, (r) => r.runs, "Calls per key per day", "calls"),
  );
  $("usage-compute").replaceChildren(
    dayChart(u, days, (r) => r.duration_ms / 1000, "Sandbox-seconds per key per day", "s"),
  );
  $("usage-legend").replaceChildren(
    ...u.keys.map((k, j) =>
      el(
        "li",
        {},
        el("span", { class: "c" + (j % 6) }),
        `${keyName(k)}: ${(per.get(k.id) || zero).calls} calls`,
      ),
    ),
  );
}

// Playground: the request a model would send, the result as the API returns it ---------------

function addFileRow(path, content) {
  const row = el(
    "div",
    { class: "file-in" },
    el("label", {}, "File path"),
    el("input", { class: "file-path", value: path || "/tmp/input.txt" }),
    el("label", {}, "Content"),
    el("textarea", { class: "file-content", rows: "3" }),
    el(
      "button",
      { type: "button", class: "secondary", on: { click: () => row.remove() } },
      "Remove file",
    ),
  );
  row.querySelector("textarea").value = content || "";
  $("play-files").append(row);
}

async function runPlayground(ev) {
  ev.preventDefault();
  flash("");
  const files = {};
  for (const row of $("play-files").children)
    files[row.querySelector(".file-path").value] = row.querySelector(".file-content").value;
  const ret = $("play-return")
    .value.split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  const body = {
    key_id: $("play-key").value,
    runtime: $("play-runtime").value,
    code: $("play-code").value,
  };
  if (Object.keys(files).length) body.files = files;
  if (ret.length) body.return_files = ret;
  $("play-run").disabled = true;
  $("play-status").textContent = "Running…";
  $("play-out").hidden = false;
  try {
    const r = await api("POST", "/v1/console/exec", body);
    $("play-status").textContent =
      `exit_reason ${r.exit_reason}, exit_code ${r.exit_code}, ${r.duration_ms} ms, isolation ${r.isolation}`;
    $("play-status").dataset.exit = r.exit_reason;
    $("play-stdout").textContent = r.stdout;
    $("play-stderr").textContent = r.stderr;
    $("play-files-out").replaceChildren(
      ...r.files.map((f) => {
        const box = el(
          "div",
          { class: "file" },
          el("h3", {}, `${f.path} (${f.status}${f.mime_type ? ", " + f.mime_type : ""})`),
        );
        if (f.content_base64 && /^image\/(png|jpeg|gif|webp)$/.test(f.mime_type || "")) {
          const bytes = Uint8Array.from(atob(f.content_base64), (c) => c.charCodeAt(0));
          box.append(
            el("img", {
              src: URL.createObjectURL(new Blob([bytes], { type: f.mime_type })),
              alt: f.path,
            }),
          );
        } else if (f.content_base64)
          box.append(el("pre", {}, atob(f.content_base64).slice(0, 4000)));
        return box;
      }),
    );
  } catch (e) {
    $("play-status").textContent = "";
    flash(e.message);
  } finally {
    $("play-run").disabled = false;
  }
}

// Health -------------------------------------------------------------------------------------

async function showHealth() {
  const h = await api("GET", "/v1/console/health");
  const facts = [
    ["Status", h.status],
    ["Version", h.version],
    ["Isolation", h.isolation],
    ["Calls in flight", h.calls_in_flight],
  ];
  if (h.workers)
    facts.push([
      "Workers",
      Object.entries(h.workers)
        .map(([s, n]) => `${n} ${s}`)
        .join(", "),
    ]);
  $("health-facts").replaceChildren(
    ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]),
  );
  const pools = (h.pools && h.pools.kinds) || [];
  table(
    $("health-pools"),
    ["Pool", "Runtime", "State", "Ready", "Since"],
    pools.map((p) => [p.kind, p.runtime, p.state, `${p.ready} / ${p.size}`, p.since]),
  );
  if (pools.length === 0)
    $("health-pools").replaceChildren(
      el(
        "caption",
        {},
        h.workers
          ? "Pools live on the workers (scratchrun_pool_ready in their /metrics)."
          : "No warm pool is configured.",
      ),
    );
  const rt = (h.runtimes && h.runtimes.runtimes) || {};
  $("health-runtimes").replaceChildren(
    ...Object.entries(rt).map(([name, r]) => {
      const pk = Object.entries(r.packages || {});
      return el(
        "details",
        {},
        el("summary", {}, `${name} ${r.version} (${pk.length} packages)`),
        el("p", { class: "muted" }, pk.map(([n, v]) => `${n} ${v}`).join(", ") || "none"),
      );
    }),
  );
}

// People (admins): invite, reset a password, change a role, remove; and the open links -------

function showLink(what, link, id) {
  $("invite-box").dataset.invite = id;
  $("invite-what").textContent = what;
  $("invite-link").textContent = link;
  $("invite-box").hidden = false;
}

async function peopleAction(run) {
  flash("");
  try {
    await run();
    await showPeople();
  } catch (e) {
    flash(e.message);
  }
}

function personActions(u) {
  if (u.id === me.id) return el("span", { class: "muted" }, "you");
  const other = u.role === "admin" ? "member" : "admin";
  const path = `/v1/console/users/${encodeURIComponent(u.id)}`;
  return el(
    "span",
    { class: "actions" },
    el(
      "button",
      {
        type: "button",
        class: "secondary",
        "data-role": u.id,
        on: { click: () => peopleAction(() => api("PUT", path + "/role", { role: other })) },
      },
      `Make ${other}`,
    ),
    el(
      "button",
      {
        type: "button",
        class: "secondary",
        "data-reset": u.id,
        on: {
          click: () =>
            peopleAction(async () => {
              const r = await api("POST", path + "/reset-link");
              showLink(`A password-reset link for ${u.name}:`, r.link, r.id);
            }),
        },
      },
      "Reset password",
    ),
    el(
      "button",
      {
        type: "button",
        class: "danger",
        "data-remove": u.id,
        on: {
          click: () => {
            if (!confirm(`Remove ${u.name}? Their sessions end and every key they own is revoked.`))
              return;
            peopleAction(() => api("DELETE", path));
          },
        },
      },
      "Remove",
    ),
  );
}

async function showPeople() {
  const [{ users }, { invites }] = await Promise.all([
    api("GET", "/v1/console/users"),
    api("GET", "/v1/console/invites"),
  ]);
  table(
    $("people-table"),
    ["Name", "Role", "Key ceiling", ""],
    users.map((u) => [
      u.name,
      u.role,
      el("span", { class: "wrap" }, u.key_ceiling ? JSON.stringify(u.key_ceiling) : "server's"),
      personActions(u),
    ]),
  );
  table(
    $("invite-table"),
    ["For", "What", "Expires (UTC)", ""],
    invites.map((i) => [
      i.name,
      i.purpose === "join" ? `join as ${i.role}` : "new password",
      when(i.expires_at),
      el(
        "button",
        {
          type: "button",
          class: "danger",
          "data-cancel": i.id,
          on: {
            click: () =>
              peopleAction(async () => {
                await api("DELETE", `/v1/console/invites/${encodeURIComponent(i.id)}`);
                // A cancelled link leaves the screen: nothing shown works no more.
                if ($("invite-box").dataset.invite === i.id) $("invite-box").hidden = true;
              }),
          },
        },
        "Cancel",
      ),
    ]),
  );
  if (invites.length === 0)
    $("invite-table").replaceChildren(el("caption", {}, "No link is open."));
}

// Audit log (admins) -------------------------------------------------------------------------

async function showAudit() {
  const { entries } = await api("GET", "/v1/console/audit?limit=200");
  table(
    $("audit-table"),
    ["Time (UTC)", "Who", "Action", "Target", "From", "Detail"],
    entries.map((e) => [
      when(e.at),
      e.actor,
      e.action,
      e.target ? el("code", {}, e.target) : "–",
      e.address || "–",
      el("span", { class: "wrap" }, e.detail ? JSON.stringify(e.detail) : ""),
    ]),
  );
}

// Router ---------------------------------------------------------------------------------------

/** Which show() is the latest: an earlier one still loading must not mark its view after it. */
let shown = 0;

async function show() {
  const seq = ++shown;
  // A view's name, and for a run's page (#run/ID) its id.
  const [name, arg] = location.hash.slice(1).split("/");
  const view = VIEWS.includes(name) ? name : "keys";
  for (const v of VIEWS) $(v).hidden = v !== view;
  for (const a of document.querySelectorAll("header nav a"))
    a.classList.toggle("active", a.getAttribute("href") === "#" + (view === "run" ? "runs" : view));
  clearInterval(runsTimer);
  flash("");
  try {
    if (view === "keys") await showKeys();
    if (view === "runs") {
      await showRuns();
      if (seq === shown)
        runsTimer = setInterval(() => showRuns().catch((e) => flash(e.message)), 5000);
    }
    if (view === "run") await showRun(decodeURIComponent(arg || ""));
    if (view === "usage") {
      if (keys.length === 0) await loadKeys();
      await showUsage();
    }
    if (view === "playground") await loadKeys();
    if (view === "health") await showHealth();
    if (view === "people") await showPeople();
    if (view === "audit") await showAudit();
    // The start's show() of the default view can end after a hash change's show() of another.
    if (seq === shown) document.body.dataset.view = view;
  } catch (e) {
    flash(e.message);
  }
}

async function start() {
  const s = await api("GET", "/v1/console/session");
  csrf = s.csrf_token;
  if (s.server_url) serverUrl = s.server_url;
  $("signout-csrf").value = csrf;
  $("who").textContent = `${s.user.name} (${s.user.role})`;
  me = s.user;
  limits = s.limits;
  createPolicy = policyFields($("key-policy-fields"), $("key-policy"), "create");
  editPolicy = policyFields($("key-policy-edit-fields"), $("key-policy-edit"), "edit");
  $("nav-audit").hidden = s.user.role !== "admin";
  $("nav-people").hidden = s.user.role !== "admin";
  $("invite-create").addEventListener("submit", (ev) => {
    ev.preventDefault();
    peopleAction(async () => {
      const r = await api("POST", "/v1/console/invites", {
        name: $("invite-name").value,
        role: $("invite-role").value,
      });
      showLink(`An invite for ${r.name} (${r.role}):`, r.link, r.id);
      $("invite-name").value = "";
    });
  });
  // The runtimes this server's image has (as scratchrun_runtimes reports them).
  const h = await api("GET", "/v1/console/health").catch(() => ({}));
  const runtimes = Object.keys((h.runtimes && h.runtimes.runtimes) || {});
  for (const sel of [$("run-runtime"), $("play-runtime")])
    for (const r of runtimes.length ? runtimes : RUNTIMES)
      sel.append(el("option", { value: r }, r));
  $("play-code").value = EXAMPLE;
  $("play-return").value = "/tmp/plot.png";
  $("key-create").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    flash("");
    try {
      const days = Number($("key-expiry").value);
      const r = await api("POST", "/v1/console/keys", {
        name: $("key-name").value,
        policy: parsePolicy($("key-policy").value),
        expires_at: days ? Date.now() + days * 86400000 : null,
      });
      showSecret(r.id, r.key);
      $("key-name").value = "";
      createPolicy.set(null);
      await showKeys();
    } catch (e) {
      flash(e.message);
    }
  });
  $("key-policy-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    flash("");
    try {
      const id = $("key-detail").dataset.key;
      await api(
        "PUT",
        `/v1/console/keys/${encodeURIComponent(id)}/policy`,
        parsePolicy($("key-policy-edit").value) || {},
      );
      await showKeys();
      // The form starts again from the policy the key has now.
      const saved = keys.find((k) => k.id === id);
      if (saved) editPolicy.set(saved.policy);
    } catch (e) {
      flash(e.message);
    }
  });
  for (const b of document.querySelectorAll("[data-copy]"))
    b.addEventListener("click", () => copyFrom(b));
  $("run-filter").addEventListener("change", () => showRuns().catch((e) => flash(e.message)));
  $("run-filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    showRuns().catch((e) => flash(e.message));
  });
  $("usage-period").addEventListener("change", () => {
    flash("");
    showUsage().catch((e) => flash(e.message));
  });
  $("usage-period").addEventListener("submit", (ev) => ev.preventDefault());
  $("run-more").addEventListener("click", () => moreRuns().catch((e) => flash(e.message)));
  $("play").addEventListener("submit", runPlayground);
  $("play-add-file").addEventListener("click", () => addFileRow());
  window.addEventListener("hashchange", show);
  await show();
}

start().catch((e) => flash(e.message));
