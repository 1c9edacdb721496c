// Builds the sandbox agent (guest/agent.c + guest/agent-*.c) into build/guest/agent as a static
// binary, the pre-started node's reseed addon (guest/node-reseed.c) into
// build/guest/scratchrun-reseed.node, and the host's one native piece, the local service's
// peer-credentials addon (src/http/peer-cred.c) into build/host/scratchrun-peercred.node, each
// only when a source is newer than what was built, and copies the runtime table's pre-start
// scripts (src/runtimes/table.ts: guest/prestart.py, guest/prestart.js) beside them: the
// namespace backend mounts that directory into its jails. Run by `npm run build` and by setup.
import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const guest = join(root, "guest");
const out = join(root, "build", "guest", "agent");
const sources = readdirSync(guest)
  .filter((f) => f === "agent.c" || /^agent-[a-z0-9-]+\.c$/.test(f))
  .sort()
  .map((f) => join(guest, f));
const headers = readdirSync(guest)
  .filter((f) => /^agent-[a-z0-9-]+\.h$/.test(f))
  .map((f) => join(guest, f));
const flags = ["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11"];

function fail(message) {
  console.error(`build-guest: ${message}`);
  process.exit(1);
}

if (!sources.includes(join(guest, "agent.c"))) fail(`missing ${join(guest, "agent.c")}`);

const addonSource = join(guest, "node-reseed.c");
const addonOut = join(root, "build", "guest", "scratchrun-reseed.node");
const peerSource = join(root, "src", "http", "peer-cred.c");
const peerOut = join(root, "build", "host", "scratchrun-peercred.node");
const self = fileURLToPath(import.meta.url);
const stale = (target, inputs) =>
  !existsSync(target) ||
  statSync(target).mtimeMs < Math.max(...[...inputs, self].map((f) => statSync(f).mtimeMs));
// The runtime table's pre-start and session scripts, next to the agent (namespace jails see this directory at
// /opt/scratchrun); the table is read from the compiled TypeScript (`npm run build` runs tsc first).
const tableModule = join(root, "dist", "src", "runtimes", "table.js");
if (!existsSync(tableModule)) fail(`missing ${tableModule}: run tsc first (npm run build)`);
const { GUEST_SCRIPTS } = await import(pathToFileURL(tableModule).href);
for (const script of GUEST_SCRIPTS) {
  const src = join(guest, script);
  const dest = join(root, "build", "guest", script);
  const text = readFileSync(src);
  if (existsSync(dest) && readFileSync(dest).equals(text)) continue;
  mkdirSync(dirname(dest), { recursive: true });
  writeFileSync(`${dest}.tmp-${process.pid}`, text, { mode: 0o444 });
  renameSync(`${dest}.tmp-${process.pid}`, dest);
  console.log(`build-guest: copied ${script}`);
}

// The constants the agent shares with the host, as a header generated from the compiled
// TypeScript (src/protocol/guest-header.ts; `npm run build` runs tsc first).
const include = join(root, "build", "guest", "include");
const sharedHeader = join(include, "scratchrun-shared.h");
const headerModule = join(root, "dist", "src", "protocol", "guest-header.js");
if (!existsSync(headerModule)) fail(`missing ${headerModule}: run tsc first (npm run build)`);
const { renderGuestHeader } = await import(pathToFileURL(headerModule).href);
const headerText = renderGuestHeader();
if (!existsSync(sharedHeader) || readFileSync(sharedHeader, "utf8") !== headerText) {
  mkdirSync(include, { recursive: true });
  writeFileSync(`${sharedHeader}.tmp-${process.pid}`, headerText);
  renameSync(`${sharedHeader}.tmp-${process.pid}`, sharedHeader);
  console.log(`build-guest: wrote ${sharedHeader}`);
}

const agentStale = stale(out, [...sources, ...headers, sharedHeader]);
const addonStale = stale(addonOut, [addonSource]);
const peerStale = stale(peerOut, [peerSource]);
if (!agentStale && !addonStale && !peerStale) {
  console.log(`build-guest: ${out}, ${addonOut} and ${peerOut} are up to date`);
  process.exit(0);
}

const cc = process.env.CC ?? "gcc";
const probe = spawnSync(cc, ["--version"], { encoding: "utf8" });
if (probe.error || probe.status !== 0)
  fail(`C compiler '${cc}' not found. Install it: apt-get install gcc (or set CC).`);

// A static link needs libc.a; check with a tiny program so the message says what is missing.
const probeDir = join(tmpdir(), `scratchrun-build-guest-${process.pid}`);
mkdirSync(probeDir, { recursive: true });
try {
  writeFileSync(join(probeDir, "p.c"), "int main(void) { return 0; }\n");
  const r = spawnSync(cc, ["-static", "-o", join(probeDir, "p"), join(probeDir, "p.c")], {
    encoding: "utf8",
  });
  if (r.status !== 0)
    fail(
      `'${cc} -static' cannot link (static glibc missing?). Install it: apt-get install libc6-dev\n${r.stderr}`,
    );
} finally {
  rmSync(probeDir, { recursive: true, force: true });
}

function compile(target, args, what) {
  mkdirSync(dirname(target), { recursive: true });
  const tmpOut = `${target}.tmp-${process.pid}`;
  const argv = [...args, "-o", tmpOut];
  console.log(`build-guest: ${cc} ${argv.join(" ")}`);
  const r = spawnSync(cc, argv, { stdio: "inherit" });
  if (r.status !== 0) {
    rmSync(tmpOut, { force: true });
    fail(`compiling ${what} failed (exit ${r.status ?? r.signal})`);
  }
  renameSync(tmpOut, target);
  console.log(`build-guest: built ${target}`);
}

if (agentStale) compile(out, [...flags, `-I${include}`, ...sources], "the agent");
// A shared object for the guest's node (same glibc as the image): its Node-API, OpenSSL and V8
// symbols come from the node binary that loads it; -z now makes a missing one fail the load.
const ADDON_FLAGS = [
  "-shared",
  "-fPIC",
  "-O2",
  "-Wall",
  "-Wextra",
  "-Werror",
  "-std=gnu11",
  "-Wl,-z,now",
];
if (addonStale) compile(addonOut, [...ADDON_FLAGS, addonSource], "the reseed addon");
// The host's node loads this one (the local service reads SO_PEERCRED with it): same flags.
if (peerStale) compile(peerOut, [...ADDON_FLAGS, peerSource], "the peer-credentials addon");
