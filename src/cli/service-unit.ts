/**
 * The files setup writes for the local service (decision 0018), as pure renderers: the systemd
 * unit that runs `scratchrun daemon`, and the two commands every user finds on PATH.
 */

/** Quotes a path for sh (single quotes; a quote inside closed, escaped and reopened). */
const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** `PREFIX/bin/NAME`: runs the installed copy's entry on the Node that ran setup. */
export function renderWrapper(node: string, script: string): string {
  return `#!/bin/sh
# Installed by scratchrun setup: the world-readable copy of ScratchRun, on the Node that set it up.
exec ${sh(node)} ${sh(script)} "$@"
`;
}

/**
 * scratchrun.service: `scratchrun daemon` as root, its settings from /etc/default/scratchrun
 * (SCRATCHRUN_* lines, optional), its log in the journal, restarted if it fails. A stop is
 * SIGTERM to the daemon, which drains its calls and destroys its sandboxes (they live in cgroups
 * of their own, outside the unit's) within TimeoutStopSec.
 */
export function renderServiceUnit(scratchrun: string): string {
  if (!scratchrun.startsWith("/") || /\s/.test(scratchrun))
    throw new Error(`the unit needs an absolute path without spaces, not ${scratchrun}`);
  return `[Unit]
Description=ScratchRun local service: sandboxes for this machine's users (scratchrun daemon)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
EnvironmentFile=-/etc/default/scratchrun
ExecStart=${scratchrun} daemon
Restart=on-failure
RestartSec=2
KillMode=mixed
TimeoutStopSec=120

[Install]
WantedBy=multi-user.target
`;
}

/** The unit's sections and keys (pure): what a parse test checks where systemd is absent. */
export function parseUnit(text: string): Map<string, Map<string, string[]>> {
  const out = new Map<string, Map<string, string[]>>();
  let section: Map<string, string[]> | undefined;
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const head = /^\[([A-Za-z]+)\]$/.exec(line);
    if (head) {
      if (out.has(head[1]!)) throw new Error(`line ${i + 1}: section [${head[1]}] twice`);
      out.set(head[1]!, (section = new Map()));
      continue;
    }
    const kv = /^([A-Za-z][A-Za-z0-9]*)=(.*)$/.exec(line);
    if (!kv || !section) throw new Error(`line ${i + 1}: not a key=value in a section: ${raw}`);
    section.set(kv[1]!, [...(section.get(kv[1]!) ?? []), kv[2]!]);
  }
  return out;
}
