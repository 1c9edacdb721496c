import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { resolveHostSources } from "../../src/images/recipe.js";
import { EXIT_ENDINGS, EXIT_HELPER, exitScript } from "../helpers/exit-script.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

/**
 * guest/prestart.py's pre-import (decision 0011) on the host's python3.12, with fixture modules
 * instead of numpy: the agent's side of the protocol is played here (SPEC as the argument, "w" on
 * fd 4, "T"/"R" warm-ups, the call on fd 3). What must hold: an import that fails, writes output
 * or leaves a descriptor open makes the pre-start give up (exit 3, before "w"); the writable areas
 * are left as found, and the directories an import made are there again for code that names the
 * module; what the imports seeded or cached is fresh at the hand-over; warm-ups leave nothing.
 */
const SCRIPT = join(REPO_ROOT, "guest", "prestart.py");
const src = resolveHostSources(settingsFrom(process.env).images);
const PY = src.ok ? `${src.sources.python312Prefix}/bin/python3.12` : "/usr/bin/python3";

const tmp = mkdtempSync(join(tmpdir(), "scratchrun-preimport-script-"));
const mods = join(tmp, "mods");
const scratch = join(tmp, "scratch");
mkdirSync(mods);
mkdirSync(scratch);
/** Each session's HOME (a sandbox's is a fresh tmpfs). */
let home = "";
after(() => rmSync(tmp, { recursive: true, force: true }));

const MODULES: Record<string, string> = {
  // Like matplotlib: makes a directory under HOME at import, seeds from the kernel and caches.
  fine: [
    "import logging, os, random, tempfile",
    "IMPORT_CWD = os.getcwd()",
    "os.makedirs(os.path.join(os.environ['HOME'], '.cache', 'fine'), exist_ok=True)",
    `open(os.path.join(${JSON.stringify(scratch)}, 'left-by-import'), 'w').write('x')`,
    "tempfile.gettempdir()",
    "",
  ].join("\n"),
  chatty: "print('imported!')\n",
  warns: "import warnings\nwarnings.warn('at import', UserWarning)\n",
  leaky: "import os\nKEEP = open(os.devnull)\n",
  broken: "raise ImportError('no')\n",
};
for (const [name, text] of Object.entries(MODULES)) writeFileSync(join(mods, `${name}.py`), text);

const env = () => ({
  PATH: "/usr/bin:/bin",
  HOME: home,
  LANG: "C.UTF-8",
  PYTHONPATH: mods,
  PYTHONDONTWRITEBYTECODE: "1",
});
const spec = (modules: string) => `modules=${modules};scratch=${home},${scratch}`;

interface Session {
  /** Resolves true on "w", false when fd 4 closes first. */
  waiting(): Promise<boolean>;
  send(bytes: string): void;
  call(
    code: string,
    env?: Record<string, string>,
  ): Promise<{ stdout: string; stderr: string; status: number | null }>;
  exited: Promise<number | null>;
}

function start(modules: string, py = PY): Session {
  home = mkdtempSync(join(tmp, "home-"));
  const child = spawn(py, [SCRIPT, spec(modules)], {
    cwd: "/",
    env: env(),
    stdio: ["ignore", "pipe", "pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const ctl = child.stdio[3] as NodeJS.WritableStream;
  const note = child.stdio[4] as NodeJS.ReadableStream;
  let notes = 0;
  let ended = false;
  const listeners: (() => void)[] = [];
  note.on("data", (d: Buffer) => {
    notes += d.toString().split("w").length - 1;
    for (const l of listeners.splice(0)) l();
  });
  note.on("end", () => {
    ended = true;
    for (const l of listeners.splice(0)) l();
  });
  note.on("error", () => {});
  ctl.on("error", () => {});
  const exited = new Promise<number | null>((r) => child.once("close", (status) => r(status)));
  let seen = 0;
  return {
    async waiting() {
      while (notes <= seen && !ended) await new Promise<void>((r) => listeners.push(r));
      if (notes > seen) {
        seen++;
        return true;
      }
      return false;
    },
    send: (bytes) => ctl.write(bytes),
    async call(code, extra = {}) {
      const file = join(tmp, `main-${Math.random().toString(36).slice(2)}.py`);
      writeFileSync(file, code);
      const entries = Object.entries({ ...env(), ...extra }).map(([k, v]) => `${k}=${v}\0`);
      ctl.end([home, "\0", file, "\0", ...entries].join(""));
      const status = await exited;
      return { stdout, stderr, status };
    },
    exited,
  };
}

describe("prestart.py with a pre-import (host python3.12, fixture modules)", () => {
  test("an import that fails, prints, warns or keeps a descriptor open: no pre-start (exit 3)", async () => {
    for (const m of ["broken", "chatty", "warns", "leaky", "nonexistent"]) {
      const s = start(`fine,${m}`);
      assert.equal(await s.waiting(), false, m);
      assert.equal(await s.exited, 3, m);
      assert.deepEqual(readdirSync(scratch), [], `${m}: the scratch area is as found`);
    }
  });

  test("the areas are left as found; warm-ups leave nothing; the hand-over is a plain run's", async () => {
    const s = start("fine");
    assert.equal(await s.waiting(), true);
    assert.deepEqual(readdirSync(home), [], "what the import made is gone while it waits");
    assert.deepEqual(readdirSync(scratch), []);
    for (const kind of ["T", "R", "T"]) {
      s.send(kind);
      assert.equal(await s.waiting(), true, `answered ${kind}`);
    }
    await new Promise((r) => setTimeout(r, 1500)); // logging's start time must be the call's
    const r = await s.call(
      [
        "import fine",
        "import json, logging, os, random, sys, tempfile, time",
        "print(json.dumps({",
        "  'import_cwd': fine.IMPORT_CWD, 'cwd': os.getcwd(), 'argv': sys.argv[1:],",
        "  'home': sorted(os.path.join(d, n)[len(os.environ['HOME']):] for d, ds, fs in os.walk(os.environ['HOME']) for n in ds + fs),",
        "  'scratch': os.listdir(" + JSON.stringify(scratch) + "),",
        "  'tempdir': tempfile.tempdir, 'names': tempfile._name_sequence,",
        "  'log_age': time.time() - logging._startTime, 'frozen': __import__('gc').get_freeze_count() > 0,",
        "  'fds': sorted(os.listdir('/proc/self/fd')), 'rehearsal': 'SCRATCHRUN_REHEARSAL' in os.environ,",
        "  'greeting': os.environ.get('GREETING'),",
        "}))",
      ].join("\n"),
      { GREETING: "hi" },
    );
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stderr, "");
    const got = JSON.parse(r.stdout) as Record<string, unknown>;
    assert.equal(got.import_cwd, "/", "imported before the call, at the pre-start's directory");
    assert.equal(got.cwd, home);
    assert.deepEqual(
      got.home,
      ["/.cache", "/.cache/fine"],
      "the directories its import made, again",
    );
    assert.deepEqual(got.scratch, [], "a file its import wrote is not left for the call");
    assert.equal(got.tempdir, null);
    assert.equal(got.names, null);
    assert.ok((got.log_age as number) < 1, `logging started ${String(got.log_age)} s before`);
    assert.equal(got.frozen, true, "decision 0011: the pre-start's objects are frozen");
    // (Descriptors above 100 are the test runner's, inherited by this spawn; the agent closes them.)
    assert.deepEqual(
      (got.fds as string[]).filter((fd) => Number(fd) < 100),
      ["0", "1", "2", "3"],
    );
    assert.equal(got.rehearsal, false);
    assert.equal(got.greeting, "hi");
  });

  test("a pre-imported interpreter ends as a fresh one does, in every way a call can end", async () => {
    // With ctypes among the imports, python3.11's exit is leave()'s (decision 0011, "The exit");
    // python3.12's is the interpreter's own. Both against a fresh interpreter running the file.
    // Debian's python3.11, the image's (the host has it: the image is built from its packages).
    for (const py of [PY, "/usr/bin/python3.11"])
      for (const ending of EXIT_ENDINGS) {
        const file = join(tmp, "ending.py");
        const run = async (pre: boolean) => {
          let r: { stdout: string; stderr: string; status: number | null };
          if (pre) {
            const s = start("fine,ctypes", py);
            assert.equal(await s.waiting(), true);
            writeFileSync(join(home, "helper.py"), EXIT_HELPER);
            r = await s.call(exitScript(["import fine"], ending));
          } else {
            home = mkdtempSync(join(tmp, "home-"));
            writeFileSync(join(home, "helper.py"), EXIT_HELPER);
            writeFileSync(file, exitScript(["import fine"], ending));
            const child = spawn(py, [file], { cwd: home, env: env(), stdio: "pipe" });
            let stdout = "";
            let stderr = "";
            child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
            child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
            const status = await new Promise<number | null>((ok) => child.once("close", ok));
            r = { stdout, stderr, status };
          }
          let written = "";
          try {
            written = readFileSync(join(home, "out.txt"), "utf8");
          } catch {
            // not written: the code did not get that far
          }
          // Tracebacks name the code file: the pre-start's is a fresh name per call.
          const stderr = r.stderr.replace(/"[^"]*\.py"/g, '"FILE"');
          return { stdout: r.stdout, stderr, status: r.status, written };
        };
        const plain = await run(false);
        const pre = await run(true);
        assert.deepEqual(pre, plain, `${py}: ${ending}`);
      }
  });

  test("code that does not name the module finds no directory of its import", async () => {
    const s = start("fine");
    assert.equal(await s.waiting(), true);
    const r = await s.call(
      `import os\nprint(sorted(os.listdir(os.environ['HOME'])), 'fine' in __import__('sys').modules)`,
    );
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, "[] True\n");
  });
});
