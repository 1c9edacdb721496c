/**
 * The console's pages, rendered on the server as whole HTML documents: no script at all, one
 * stylesheet served by this server, nothing from anywhere else (no CDN, no fonts). Every page
 * goes out with `pageHeaders`: a Content-Security-Policy that allows only that (and form posts
 * to this server, plus the consent page's one redirect target), frame-ancestors 'none' against
 * clickjacking, no caching, and no referrer to any other site. Pure.
 */
import { PASSWORD_MIN } from "../store/users.js";

export const STYLE_PATH = "/console/style.css";

export const STYLE = `*{box-sizing:border-box}
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}
main{max-width:34rem;margin:2rem auto;padding:1.5rem;background:#fff;border:1px solid #d8dde3;border-radius:8px}
h1{font-size:1.4rem;margin:0 0 1rem}
label{display:block;margin:.8rem 0 .2rem;font-weight:600}
input,select{width:100%;padding:.55rem;font:inherit;border:1px solid #aab3bd;border-radius:6px}
button{font:inherit;padding:.55rem 1.1rem;border-radius:6px;border:1px solid #1b4fd6;background:#1b4fd6;color:#fff;margin:1rem .5rem 0 0}
button.secondary{background:#fff;color:#1b1f24;border-color:#aab3bd}
.error{background:#fdecea;border:1px solid #f5b5ae;padding:.6rem;border-radius:6px}
dl{margin:0}dt{font-weight:600;margin-top:.6rem}dd{margin:0;word-break:break-all}
code{font-family:ui-monospace,monospace;font-size:.9em}
@media (max-width:36rem){main{margin:0;border:0;border-radius:0}}
`;

export function escapeHtml(s: string): string {
  return s.replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!,
  );
}

/**
 * The headers of every console page. `formTargets`: origins (or a native app's scheme) a form
 * on the page may end at; a browser applies form-action to the redirect after the post too.
 */
export function pageHeaders(formTargets: readonly string[] = []): Record<string, string> {
  const formAction = ["'self'", ...formTargets].join(" ");
  return {
    "Content-Type": "text/html; charset=utf-8",
    "Content-Security-Policy": `default-src 'none'; style-src 'self'; img-src 'self'; form-action ${formAction}; frame-ancestors 'none'; base-uri 'none'`,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    // Not no-referrer: under it a browser sends `Origin: null` on the page's own form posts,
    // which the Origin check refuses. same-origin still sends nothing to any other site.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
  };
}

/** What a form-action may name for a redirect URI: its origin, or a native app's scheme. */
export function formTargetOf(redirectUri: string): string {
  const u = new URL(redirectUri);
  return u.protocol === "http:" || u.protocol === "https:" ? u.origin : u.protocol;
}

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${escapeHtml(title)} · ScratchRun</title><link rel="icon" href="/favicon.ico"><link rel="stylesheet" href="${STYLE_PATH}"></head>
<body><main>${body}</main></body></html>
`;
}

const hidden = (name: string, value: string) =>
  `<input type="hidden" name="${name}" value="${escapeHtml(value)}">`;

export function signinPage(o: {
  csrf: string;
  next: string;
  error?: string;
  /** The trusted OIDC issuer the console also signs in with, if any. */
  issuer?: string;
}): string {
  const sso = o.issuer
    ? `<p><a class="button" id="sso" href="/console/signin/oidc?next=${encodeURIComponent(o.next)}">Sign in with ${escapeHtml(new URL(o.issuer).host)}</a></p>`
    : "";
  return page(
    "Sign in",
    `<h1>Sign in to ScratchRun</h1>
${o.error ? `<p class="error" role="alert">${escapeHtml(o.error)}</p>` : ""}${sso}
<form method="post" action="/console/signin">${hidden("csrf", o.csrf)}${hidden("next", o.next)}
<label for="name">User</label><input id="name" name="name" autocomplete="username" required autofocus>
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button></form>`,
  );
}

export interface ConsentView {
  requestId: string;
  csrf: string;
  userName: string;
  clientName: string;
  clientId: string;
  redirectUri: string;
  keys: { id: string; name: string }[];
}

export function consentPage(v: ConsentView): string {
  const keys = v.keys.length
    ? `<label for="key">Act as the API key</label><select id="key" name="key_id">${v.keys
        .map(
          (k) =>
            `<option value="${escapeHtml(k.id)}">${escapeHtml(k.name)} (${escapeHtml(k.id)})</option>`,
        )
        .join("")}</select>`
    : `<p class="error">You have no API key to approve it for. An admin can make one: <code>scratchrun keys create --name NAME --owner ${escapeHtml(v.userName)}</code></p>`;
  return page(
    "Approve a client",
    `<h1>Let ${escapeHtml(v.clientName)} use ScratchRun?</h1>
<dl><dt>Client</dt><dd>${escapeHtml(v.clientName)}</dd>
<dt>Client ID</dt><dd><code>${escapeHtml(v.clientId)}</code></dd>
<dt>Returns to</dt><dd><code>${escapeHtml(v.redirectUri)}</code></dd>
<dt>It may</dt><dd>run code in ScratchRun's sandboxes as the key you pick: within that key's policy (runtimes, network, limits) and quota, every run recorded under it. Until you revoke it, the client keeps this by refreshing its token.</dd></dl>
<form method="post" action="/oauth/consent">${hidden("csrf", v.csrf)}${hidden("request", v.requestId)}
${keys}
${v.keys.length ? '<button type="submit" name="decision" value="approve">Approve</button>' : ""}<button type="submit" name="decision" value="deny" class="secondary">Deny</button></form>
<p>Signed in as ${escapeHtml(v.userName)}.</p>`,
  );
}

/**
 * The page an invite or a password-reset link opens: who it is for, and a form to choose a
 * password. The link's token goes back in the form (never in a cookie or a log line).
 */
export function invitePage(o: {
  csrf: string;
  token: string;
  name: string;
  purpose: "join" | "reset";
  role: string | null;
  error?: string;
}): string {
  const what =
    o.purpose === "join"
      ? `You are invited to ScratchRun as <strong>${escapeHtml(o.name)}</strong> (${escapeHtml(o.role ?? "member")}). Choose a password to sign in.`
      : `Choose a new password for <strong>${escapeHtml(o.name)}</strong>. You are signed out everywhere else.`;
  return page(
    o.purpose === "join" ? "Join" : "New password",
    `<h1>${o.purpose === "join" ? "Join ScratchRun" : "Set a new password"}</h1>
${o.error ? `<p class="error" role="alert">${escapeHtml(o.error)}</p>` : ""}<p>${what}</p>
<form method="post" action="/console/invite">${hidden("csrf", o.csrf)}${hidden("token", o.token)}
<input type="text" name="username" value="${escapeHtml(o.name)}" autocomplete="username" hidden>
<label for="password">Password (${PASSWORD_MIN} characters or more)</label><input id="password" name="password" type="password" autocomplete="new-password" minlength="${PASSWORD_MIN}" required autofocus>
<label for="password2">The same again</label><input id="password2" name="password2" type="password" autocomplete="new-password" minlength="${PASSWORD_MIN}" required>
<button type="submit">${o.purpose === "join" ? "Join and sign in" : "Set and sign in"}</button></form>`,
  );
}

export function messagePage(title: string, message: string): string {
  return page(
    title,
    `<h1>${escapeHtml(title)}</h1><p class="error" role="alert">${escapeHtml(message)}</p>`,
  );
}
