import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { resolveHostSources } from "../../src/images/recipe.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

/**
 * guest/prestart.py against the interpreter running the same file directly, on the host's
 * python3.12 and python3.11 (the interpreters the image is made from): the cases the e2e suite
 * cannot reach cheaply (signals, warnings, pickling, source introspection, encodings).
 */
const SCRIPT = join(REPO_ROOT, "guest", "prestart.py");

interface Run {
  stdout: string;
  stderr: string;
  status: number | null;
  signal: NodeJS.Signals | null;
}

const ENV = { PATH: "/usr/bin:/bin", HOME: "/tmp", LANG: "C.UTF-8", PYTHONUNBUFFERED: "1" };

function direct(python: string, file: string, cwd: string): Run {
  const r = spawnSync(python, [file], { cwd, env: ENV, encoding: "utf8" });
  return { stdout: r.stdout, stderr: r.stderr, status: r.status, signal: r.signal };
}

/** The agent's side of the hand-over: start, wait for "w" on fd 4, send the call on fd 3. */
function prestarted(
  interp: string,
  file: string,
  cwd: string,
  script = SCRIPT,
  env: Record<string, string> = ENV,
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(interp, [script], {
      cwd: "/",
      env: { ...ENV, PYTHONDONTWRITEBYTECODE: "1" },
      stdio: ["ignore", "pipe", "pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    const ctl = child.stdio[3] as NodeJS.WritableStream;
    const note = child.stdio[4] as NodeJS.ReadableStream;
    note.once("data", () => {
      const entries = Object.entries(env).map(([k, v]) => `${k}=${v}\0`);
      ctl.end([cwd, "\0", file, "\0", ...entries].join(""));
    });
    child.once("error", reject);
    child.once("close", (status, signal) => resolve({ stdout, stderr, status, signal }));
  });
}

const programs: Record<string, string> = {
  "KeyboardInterrupt dies of SIGINT": "print('a')\nraise KeyboardInterrupt\n",
  "sys.exit with a message": "import sys\nsys.exit('stopped here')\n",
  "a warning names the code's file and line": "import warnings\nwarnings.warn('careful')\n",
  "chained exceptions":
    "try:\n    1/0\nexcept ZeroDivisionError as e:\n    raise ValueError('bad') from e\n",
  "pickle a class defined in __main__":
    "import pickle\nclass P:\n    x = 3\nprint(pickle.loads(pickle.dumps(P())).x, P.__module__)\n",
  "inspect finds the source":
    "import inspect\ndef f():\n    return 1\nprint(inspect.getsource(f), end='')\n",
  "the __main__ guard and sys.modules['__main__']":
    "import sys\nif __name__ == '__main__':\n    print(sys.modules['__main__'].__file__, __spec__)\n",
  "relative imports fail as in a script": "from . import x\n",
};

/** What the direct run must show, so that "same as direct" is never "both broke the same way". */
const expectations: Record<string, (r: Run, file: string) => void> = {
  "KeyboardInterrupt dies of SIGINT": (r) => {
    assert.equal(r.signal, "SIGINT");
    assert.match(r.stderr, /KeyboardInterrupt\n$/);
  },
  "sys.exit with a message": (r) => assert.deepEqual([r.status, r.stderr], [1, "stopped here\n"]),
  "a warning names the code's file and line": (r, file) =>
    assert.ok(r.stderr.startsWith(`${file}:2: UserWarning: careful`), r.stderr),
  "chained exceptions": (r) =>
    assert.match(r.stderr, /ZeroDivisionError[\s\S]*direct cause[\s\S]*ValueError: bad\n$/),
  "pickle a class defined in __main__": (r) => assert.equal(r.stdout, "3 __main__\n"),
  "inspect finds the source": (r) => assert.equal(r.stdout, "def f():\n    return 1\n"),
  "the __main__ guard and sys.modules['__main__']": (r, file) =>
    assert.equal(r.stdout, `${file} None\n`),
  "relative imports fail as in a script": (r) => {
    assert.equal(r.status, 1);
    assert.match(r.stderr, /ImportError: attempted relative import with no known parent package/);
  },
};

const hostPythons = (): [string, string][] => {
  const src = resolveHostSources(settingsFrom(process.env).images);
  const out: [string, string][] = [["python3.11", "/usr/bin/python3.11"]];
  if (src.ok) out.unshift(["python3.12", join(src.sources.python312Prefix, "bin", "python3.12")]);
  return out;
};

describe("guest/prestart.py behaves as running the file", () => {
  const dir = mkdtempSync(join(tmpdir(), "prestart-script-test-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test("a source file in another encoding (PEP 263) is decoded the same way", async () => {
    const file = join(dir, "latin.py");
    writeFileSync(
      file,
      Buffer.concat([
        Buffer.from("# -*- coding: latin-1 -*-\nprint('caf"),
        Buffer.from([0xe9]),
        Buffer.from("')\n"),
      ]),
    );
    for (const [, python] of hostPythons()) {
      const want = direct(python, file, dir);
      assert.equal(want.stdout, "café\n");
      assert.deepEqual(await prestarted(python, file, dir), want);
    }
  });

  for (const [name, code] of Object.entries(programs))
    test(name, async () => {
      const file = join(dir, "main.py");
      writeFileSync(file, code);
      const pythons = hostPythons();
      assert.equal(pythons.length, 2, "the host's python3.12 was not found");
      for (const [label, python] of pythons) {
        const want = direct(python, file, dir);
        expectations[name]?.(want, file);
        const got = await prestarted(python, file, dir);
        assert.deepEqual(got, want, label);
      }
    });
});

/**
 * guest/prestart.js (with the reseed addon next to it, as in the guest's /run) against the host's
 * node running the file directly (a Node 20 like the image's: the host's, or SCRATCHRUN_NODE20).
 */
describe("guest/prestart.js behaves as running the file", () => {
  const dir = mkdtempSync(join(tmpdir(), "prestart-js-test-"));
  const waiter = join(dir, "scratchrun-prestart.js");
  copyFileSync(join(REPO_ROOT, "guest", "prestart.js"), waiter);
  copyFileSync(
    join(REPO_ROOT, "build", "guest", "scratchrun-reseed.node"),
    join(dir, "scratchrun-reseed.node"),
  );
  after(() => rmSync(dir, { recursive: true, force: true }));
  const src = resolveHostSources(settingsFrom(process.env).images);
  const node = src.ok && "path" in src.sources.node20 ? src.sources.node20.path : process.execPath;
  const env = { ...ENV, GREETING: "hi", TZ: "Asia/Tokyo" };

  const direct = (file: string): Run => {
    const r = spawnSync(node, [file], { cwd: dir, env, encoding: "utf8" });
    return { stdout: r.stdout, stderr: r.stderr, status: r.status, signal: r.signal };
  };

  const programs: Record<string, [string, string, (r: Run, file: string) => void]> = {
    "argv, main module, cache, cwd and environment are a script's": [
      "main.js",
      [
        "console.log(JSON.stringify({ argv: process.argv.slice(1), execArgv: process.execArgv,",
        "  main: require.main === module, id: module.id, parent: module.parent, file: __filename,",
        "  cache: Object.keys(require.cache), cwd: process.cwd(), env: process.env,",
        "  tz: new Date(0).getHours() }));",
      ].join("\n"),
      (r, file) => {
        const got = JSON.parse(r.stdout) as Record<string, unknown>;
        assert.deepEqual(got.argv, [file]);
        assert.deepEqual(got.cache, [file]);
        assert.deepEqual(got.env, env);
        assert.equal(got.tz, 9);
      },
    ],
    "an uncaught exception prints the code's stack, exit 1": [
      "main.js",
      "function f() {\n  throw new Error('boom');\n}\nf();\n",
      (r) => {
        assert.equal(r.status, 1);
        assert.match(r.stderr, /^Error: boom\n {4}at f \(/m);
      },
    ],
    "ticks, microtasks, timers, immediates and exitCode keep their order": [
      "main.js",
      [
        "process.nextTick(() => console.log('tick'));",
        "Promise.resolve().then(() => console.log('micro'));",
        // From an I/O callback an immediate always runs before a 0 ms timer; from the main
        // module their order depends on how long the loop took to start, in a direct run too.
        "require('fs').readFile(__filename, () => {",
        "  setTimeout(() => console.log('timeout'), 0);",
        "  setImmediate(() => console.log('immediate'));",
        "});",
        "process.on('exit', (c) => console.log('exit', c));",
        "console.log('top');",
        "process.exitCode = 3;",
      ].join("\n"),
      (r) => {
        assert.equal(r.status, 3);
        assert.equal(r.stdout, "top\ntick\nmicro\nimmediate\ntimeout\nexit 3\n");
      },
    ],
    "an ES module runs as one": [
      "main.mjs",
      "import { readFileSync } from 'node:fs';\nconsole.log(typeof readFileSync, import.meta.url);\n",
      (r, file) => assert.equal(r.stdout, `function file://${file}\n`),
    ],
    "process.exit, stderr and a child that inherits stdout": [
      "main.js",
      [
        "console.error('to stderr');",
        "require('child_process').execFileSync('sh', ['-c', 'echo from-child'], { stdio: 'inherit' });",
        "process.exit(5);",
      ].join("\n"),
      (r) => assert.deepEqual([r.status, r.stdout, r.stderr], [5, "from-child\n", "to stderr\n"]),
    ],
    "worker threads, vm contexts and crypto work": [
      "main.js",
      [
        "const { Worker } = require('worker_threads');",
        "const w = new Worker('require(\"worker_threads\").parentPort.postMessage(typeof Math.random())', { eval: true });",
        "w.on('message', (m) => console.log(m, typeof require('vm').runInNewContext('Math.random()'),",
        "  require('crypto').randomBytes(4).length));",
      ].join("\n"),
      (r) => assert.equal(r.stdout, "number number 4\n"),
    ],
  };

  for (const [name, [base, code, expect]] of Object.entries(programs))
    test(name, async () => {
      const file = join(dir, base);
      writeFileSync(file, code);
      const want = direct(file);
      expect(want, file);
      const got = await prestarted(node, file, dir, waiter, env);
      // One frame differs by design: the code runs from node's tick queue, not from the
      // bootstrap's run_main_module (docs/decisions/0003-microvm.md).
      const tick =
        /^ {4}at process\.processTicksAndRejections \(node:internal\/process\/task_queues:\d+:\d+\)$/m;
      const boot = /^ {4}at node:internal\/main\/run_main_module:\d+:\d+$/m;
      if (boot.test(want.stderr)) {
        assert.match(got.stderr, tick);
        got.stderr = got.stderr.replace(tick, boot.exec(want.stderr)![0]);
      }
      assert.deepEqual(got, want);
    });

  test("a malformed call is refused before any code runs", async () => {
    const child = spawn(node, [waiter], {
      cwd: "/",
      env: ENV,
      stdio: ["ignore", "pipe", "pipe", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    (child.stdio[4] as NodeJS.ReadableStream).once("data", () =>
      (child.stdio[3] as NodeJS.WritableStream).end("/only-a-cwd"),
    );
    const status = await new Promise((resolve) => child.once("close", resolve));
    assert.equal(status, 127);
    assert.equal(stderr, "scratchrun: malformed pre-start message\n");
  });
});
