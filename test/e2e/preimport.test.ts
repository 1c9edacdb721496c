import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { EXIT_ENDINGS, EXIT_HELPER, exitScript, SYNTAX_ERROR } from "../helpers/exit-script.js";
import { assertFreshRandomness } from "../helpers/randomness.js";
import { serverForSuite, type SuiteServer } from "../helpers/suite.js";
import { PY } from "../helpers/pythons.js";

/**
 * Pre-imported interpreters (docs/decisions/0011-preimport.md), on both backends: a pooled
 * python3.11 that has imported numpy, pandas and matplotlib (and drawn a throwaway figure)
 * serves calls whose code starts by importing them. A call must not be able to tell it apart
 * from a plain run but by speed, sys.modules and what decision 0011 lists: these tests compare
 * the same code in a pre-imported and in a plain interpreter, and check randomness, leftovers,
 * and which calls must get a plain one.
 */
const PRODUCT =
  "import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 10, 100)\nplt.plot(x, np.sin(x))\nplt.savefig('/tmp/plot.png')";

/** Python (after the code's imports) that prints how this interpreter was started. */
const WHO = [
  "def _who():",
  "    a = open('/proc/self/cmdline', 'rb').read().split(b'\\0')",
  "    if len(a) > 3 and a[2].startswith(b'modules='): return 'preimported'",
  "    return 'prestarted' if a[1].endswith(b'prestart.py') else 'fresh'",
].join("\n");

/** The state a script can see after importing the stack, as JSON (random values aside). */
const DUMP = [
  "import numpy as np",
  "import pandas as pd",
  "import matplotlib",
  "import matplotlib.pyplot as plt",
  "import faulthandler, gc, json, locale, os, resource, signal, sys, tempfile, threading, warnings",
  WHO,
  "def tree(root):",
  "    out = []",
  "    for d, dirs, files in os.walk(root):",
  "        out += [os.path.join(d, n) for n in dirs + files]",
  "    return sorted(out)",
  "fds = {}",
  "for fd in os.listdir('/proc/self/fd'):",
  "    try: fds[fd] = os.readlink('/proc/self/fd/' + fd).split('[')[0]",
  "    except OSError: pass",
  "state = {",
  "    'globals': sorted(k for k in globals() if k.startswith('__')),",
  "    'main': [__name__, __file__, type(__loader__).__name__, __spec__, __cached__],",
  "    'argv': sys.argv, 'orig_argv': sys.orig_argv[1:], 'path': sys.path, 'cwd': os.getcwd(),",
  "    'env': dict(os.environ),",
  "    'warnings': [repr(f) for f in warnings.filters], 'onceregistry': len(warnings.onceregistry),",
  "    'rc': {k: repr(v) for k, v in matplotlib.rcParams.items()},",
  "    'fignums': plt.get_fignums(), 'backend': matplotlib.get_backend(),",
  "    'dirs': [matplotlib.get_cachedir(), matplotlib.get_configdir(), tempfile.gettempdir()],",
  "    'files': tree('/home/user') + tree('/tmp') + tree('/dev/shm') + tree('/run/scratchrun'),",
  "    'fds': fds, 'threads': [t.name for t in threading.enumerate()],",
  "    'signals': {s: repr(signal.getsignal(s)) for s in range(1, 32) if s not in (9, 19)},",
  "    'locale': locale.setlocale(locale.LC_ALL), 'umask': os.umask(0o22), 'flags': repr(sys.flags),",
  "    'gc': [gc.isenabled(), gc.get_threshold()], 'recursion': sys.getrecursionlimit(),",
  "    'faulthandler': faulthandler.is_enabled(), 'np': [repr(np.geterr()), repr(np.get_printoptions())],",
  "    'pd': [pd.get_option('display.max_rows'), pd.get_option('mode.chained_assignment')],",
  "    'meta_path': [type(m).__name__ for m in sys.meta_path],",
  "    'hooks': [sys.excepthook is sys.__excepthook__, sys.displayhook is sys.__displayhook__],",
  "    'stdio': [sys.stdout.encoding, sys.stdout.line_buffering, sys.stderr.errors],",
  "    'rlimits': {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith('RLIMIT_')},",
  // logging's start time: no older than the call's script (a plain run imports logging during
  // the call; how long ago depends on how long its imports took, seconds under TCG).
  "    'logging_since_call': __import__('logging')._startTime >= os.stat(__file__).st_mtime,",
  "}",
  "print(json.dumps({'who': _who(), 'state': state}, sort_keys=True, default=repr))",
].join("\n");

interface Dump {
  who: string;
  state: Record<string, unknown>;
}

async function dump(h: SuiteServer, code: string, extra: Record<string, unknown> = {}) {
  const { s } = await h.exec({ runtime: PY, code, timeout_ms: 30_000, ...extra });
  assert.equal(s.exit_reason, "ok", s.stderr);
  return JSON.parse(s.stdout) as Dump;
}

/**
 * Runs `code` (whose first output word is _who()) until a pre-imported interpreter served it:
 * a call that finds no pre-imported sandbox ready (its pool refills after each such call: ~0.6 s
 * of imports in a jail, a clone under TCG) runs in a plain one, as it should.
 */
async function inPreimported(h: SuiteServer, code: string, extra: Record<string, unknown> = {}) {
  for (let i = 0; ; i++) {
    const { s, result } = await h.exec({
      runtime: PY,
      code,
      timeout_ms: 30_000,
      ...extra,
    });
    assert.equal(s.exit_reason, "ok", s.stderr);
    if (s.stdout.startsWith("preimported") || s.stdout.includes('"who": "preimported"'))
      return { s, result };
    assert.ok(i < 60, `no pre-imported interpreter served: ${s.stdout.slice(0, 200)}`);
    await sleep(1000);
  }
}

for (const backend of TEST_BACKENDS) {
  describe(`pre-imported python [${backend}]`, () => {
    const h = serverForSuite(backend);

    // The product page's runtime always, and the file's Python (the matrix's) when it differs.
    for (const runtime of [...new Set(["python3.12", PY])]) {
      test(`the product page's example runs in a pre-imported ${runtime} and returns its PNG`, async () => {
        // Until the pre-imported template is built (for a runtime pooled once called, python3.13,
        // that starts with this suite's first call) a call runs in a plain interpreter, beside
        // the template builds: cheap calls the router sends to a pre-imported one wait for it,
        // so that the plot is not drawn in a plain clone beside them (over 30 s under TCG on two
        // CPUs in the matrix).
        let who = "";
        for (let i = 0; i < 120 && who !== "preimported"; i++) {
          const code = `import numpy\n${WHO}\nprint(_who())`;
          const { s } = await h.exec({ runtime, code, timeout_ms: 30_000 });
          assert.equal(s.exit_reason, "ok", s.stderr);
          who = s.stdout.trim();
          if (who !== "preimported") await sleep(1000);
        }
        assert.equal(who, "preimported", "no call reached a pre-imported interpreter");
        who = "";
        let png = 0;
        for (let i = 0; i < 120 && who !== "preimported"; i++) {
          const { s, result } = await h.exec({
            runtime,
            code: `${PRODUCT}\n${WHO}\nprint(_who(), 'pandas' in __import__('sys').modules)`,
            return_files: ["/tmp/plot.png"],
            timeout_ms: 30_000,
          });
          assert.equal(s.exit_reason, "ok", s.stderr);
          who = s.stdout.split(" ")[0] ?? "";
          if (who === "preimported") {
            assert.equal(s.stdout, "preimported True\n", "pandas was imported before the call");
            const image = result.content.find((b) => b.type === "image");
            assert.ok(image && image.type === "image" && image.mimeType === "image/png");
            png = Buffer.from(image.data, "base64").length;
          } else await sleep(1000);
        }
        assert.equal(who, "preimported", "no call reached a pre-imported interpreter");
        assert.ok(png > 1000);
      });
    }

    test("after the same imports it looks like a plain interpreter, even after a call that left state behind", async () => {
      // A call that changes everything it can: the next one must find none of it.
      const { s } = await h.exec({
        runtime: PY,
        code: [
          "import numpy as np",
          "import matplotlib.pyplot as plt",
          "import os, warnings",
          "plt.rcParams['lines.linewidth'] = 9; plt.figure(); plt.plot([1, 2])",
          "warnings.simplefilter('error'); np.random.seed(1234); os.environ['LEFT'] = '1'",
          "open('/tmp/left', 'w').write('x'); os.makedirs(os.path.expanduser('~/.cache/matplotlib/x'))",
          "open('/dev/shm/left', 'w').write('x')",
          "print(np.random.rand())",
        ].join("\n"),
        timeout_ms: 30_000,
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      const seeded = Number(s.stdout);
      const pre = JSON.parse((await inPreimported(h, DUMP)).s.stdout) as Dump;
      const plain = await dump(h, `pass\n${DUMP}`);
      assert.equal(pre.who, "preimported");
      assert.notEqual(plain.who, "preimported");
      // Only what decision 0011 lists may differ; nothing here is on that list.
      assert.deepEqual(pre.state, plain.state);
      const after = await inPreimported(
        h,
        `import numpy as np\n${WHO}\nprint(_who(), np.random.rand())`,
      );
      assert.notEqual(Number(after.s.stdout.split(" ")[1]), seeded);
    });

    test("it ends as a plain run ends: threads, atexit, finalizers, unflushed files, C stdio, the status", async () => {
      // decision 0011, "The exit": what the code can see of its exit is what a plain exit
      // shows, in order (the code's __main__ is collected as a fresh run's), but for the order
      // among the finalizers the exit's collection runs: that follows the collector's counts
      // when the call came, which no pre-started interpreter shares with a fresh start (measured
      // in decision 0011). Every finalizer runs, and everything else keeps its place.
      const finalizersAside = (stdout: string) => {
        const lines = stdout.split("\n");
        const dels = lines.filter((l) => l.startsWith("del ")).sort();
        return { lines: lines.map((l) => (l.startsWith("del ") ? "del …" : l)), dels };
      };
      const run = async (head: string, ending: string, preimported: boolean) => {
        for (let i = 0; ; i++) {
          const { s, result } = await h.exec({
            runtime: PY,
            code: exitScript([head, WHO, "print(_who(), flush=True)"], ending),
            files: { "helper.py": EXIT_HELPER },
            return_files: ["out.txt"],
            timeout_ms: 30_000,
          });
          const [who, ...rest] = s.stdout.split("\n");
          const seen = {
            stdout: finalizersAside(rest.join("\n")),
            stderr: s.stderr,
            exit_code: s.exit_code,
            file: JSON.stringify(result.content).includes("written at exit"),
          };
          if (!preimported || who?.startsWith("preimported")) return { who, seen };
          assert.ok(i < 60, `no pre-imported interpreter served: ${s.stdout.slice(0, 200)}`);
          await sleep(1000);
        }
      };
      // (A syntax error prints no _who(): test/microvm/preimport-script.test.ts has that ending.)
      for (const ending of EXIT_ENDINGS.filter((e) => e !== SYNTAX_ERROR)) {
        // The same imports either way. A leading statement that is not an import sends the
        // plain run to a plain interpreter; both heads are two lines, so that tracebacks name
        // the same line.
        const plain = await run("_plain = 1\nimport numpy", ending, false);
        const pre = await run("import numpy\n_plain = 0", ending, true);
        assert.notEqual(plain.who, "preimported");
        assert.equal(pre.who, "preimported");
        assert.deepEqual(pre.seen, plain.seen, ending);
        const dels = ["del cycle", "del helper", "del main"];
        assert.deepEqual(plain.seen.stdout.dels, dels, ending);
        assert.ok(plain.seen.file, ending);
      }
    });

    test("every call draws its own randomness: random, numpy's legacy and new generators, urandom, uuid, tempfile, OpenSSL", async () => {
      const code = [
        "import numpy as np",
        "import os, random, ssl, tempfile, uuid",
        WHO,
        "print(_who(), random.random(), np.random.rand(), np.random.randint(1 << 62), np.random.default_rng().random(),",
        "      os.urandom(8).hex(), uuid.uuid4(), uuid.uuid1().clock_seq, os.path.basename(tempfile.mkstemp()[1]),",
        "      ssl.RAND_bytes(8).hex())",
      ].join("\n");
      // uuid1's 14-bit clock sequence may repeat by chance once in 16384 pairs: left out.
      await assertFreshRandomness({ exec: () => inPreimported(h, code) }, PY, code, 3, (stdout) => {
        const [who, ...values] = stdout.trim().split(" ");
        assert.equal(who, "preimported");
        assert.equal(values.length, 9);
        return values.filter((_, i) => i !== 6);
      });
    });

    test("a call that changes what the imports read gets a fresh interpreter, and its setting applies", async () => {
      const code = `import matplotlib\nimport matplotlib.pyplot as plt\n${WHO}\nprint(_who(), matplotlib.get_backend(), plt.rcParams['lines.linewidth'])`;
      const run = async (extra: Record<string, unknown>) => {
        const { s } = await h.exec({ runtime: PY, code, timeout_ms: 30_000, ...extra });
        assert.equal(s.exit_reason, "ok", s.stderr);
        return s.stdout.trim();
      };
      // A variable the imports do not read: the pre-imported interpreter takes it, and answers as
      // a plain interpreter does (how the backend is spelt differs between matplotlib releases).
      const greeting = await inPreimported(h, code, { env: { GREETING: "hi" } });
      // The calls below each take a plain interpreter of their own (none can tell which it got
      // but by its answer): two at a time.
      const [plain, svg] = await Promise.all([
        run({ code: `_plain = 1\n${code}` }),
        run({ env: { MPLBACKEND: "svg" } }),
      ]);
      assert.match(plain, /^(fresh|prestarted) /);
      const [, backend, width] = plain.split(" ");
      assert.equal(greeting.s.stdout, `preimported ${backend} ${width}\n`);
      // ScratchRun's backend (Agg whose show() shows; docs/decisions/0017-outputs.md).
      assert.match(`${backend} ${width}`, /^module:\/\/scratchrun_mpl 1\.5$/);
      // Ones they read: never a pre-imported interpreter (a fresh one when a pre-imported sandbox
      // was ready and refused, a plain pre-started one when none was), and the setting applies.
      assert.match(svg, /^(fresh|prestarted) svg 1\.5$/);
      const [rc, blas] = await Promise.all([
        run({ files: { matplotlibrc: "lines.linewidth: 7\n" } }),
        run({ env: { OPENBLAS_NUM_THREADS: "1" } }),
      ]);
      assert.match(rc, new RegExp(`^(fresh|prestarted) ${backend} 7\\.0$`));
      assert.match(blas, /^(fresh|prestarted) /, "OPENBLAS_NUM_THREADS");
      const [tz, xdg] = await Promise.all([
        run({ env: { TZ: "Asia/Tokyo" } }),
        run({ env: { XDG_CONFIG_HOME: "/tmp" } }),
      ]);
      assert.match(tz, /^(fresh|prestarted) /, "TZ");
      assert.match(xdg, /^(fresh|prestarted) /, "XDG_CONFIG_HOME");
    });

    test("calls that set up before importing, or keep less memory, get a plain interpreter", async () => {
      const run = async (code: string, extra: Record<string, unknown> = {}) => {
        const { s } = await h.exec({ runtime: PY, code, timeout_ms: 30_000, ...extra });
        assert.equal(s.exit_reason, "ok", s.stderr);
        return s.stdout.trim();
      };
      const setup = `import os\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\nimport numpy\n${WHO}\nprint(_who(), os.environ['OPENBLAS_NUM_THREADS'])`;
      assert.equal(await run(setup), "prestarted 1");
      // Below PREIMPORT_MIN_MEMORY_MB the pre-imported pages would take too much of memory_mb.
      assert.match(
        await run(`${PRODUCT}\n${WHO}\nprint(_who())`, { memory_mb: 128 }),
        /^(prestarted|fresh)$/,
      );
      assert.equal(await run(`print(1)\n${WHO}\nprint(_who())`), "1\nprestarted");
    });
  });
}
