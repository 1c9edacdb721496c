import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertFreshRandomness } from "../helpers/randomness.js";
import { serverForSuite } from "../helpers/suite.js";

/**
 * The code runs as `python3 /run/scratchrun/main.py` would run it, whichever way the backend
 * starts the interpreter (both hand most calls to an interpreter pre-started by the agent,
 * guest/prestart.py: in the microVM's snapshot, in a pooled namespace jail; a jail started for a
 * call execs a fresh one): the same module state, arguments, tracebacks, exit codes, environment,
 * and randomness of its own in every call. Calls that import numpy, pandas or matplotlib first run
 * in a pre-imported interpreter: test/e2e/preimport.test.ts.
 */
for (const backend of TEST_BACKENDS) {
  describe(`python starts as a script run [${backend}]`, () => {
    const h = serverForSuite(backend);

    for (const runtime of ["python3.12", "python3.11"]) {
      test(`${runtime}: __main__, argv and sys.path are a script's`, async () => {
        const { s } = await h.exec({
          runtime,
          code: [
            "import json, os, sys",
            "g = dict(globals())",
            "print(json.dumps({",
            "  'globals': [k for k in g if k not in ('json', 'os', 'sys')],",
            "  'name': __name__, 'file': __file__, 'cached': __cached__, 'spec': __spec__,",
            "  'loader': type(__loader__).__name__, 'annotations': __annotations__,",
            "  'argv': sys.argv, 'orig_argv': sys.orig_argv[1:], 'path0': sys.path[0],",
            "  'cwd': os.getcwd(),",
            "  'preloaded': sorted(m for m in ('random', 'runpy', 'signal', 'tempfile') if m in sys.modules),",
            "}))",
          ].join("\n"),
        });
        assert.equal(s.exit_reason, "ok", s.stderr);
        assert.deepEqual(JSON.parse(s.stdout), {
          globals: [
            "__name__",
            "__doc__",
            "__package__",
            "__loader__",
            "__spec__",
            "__annotations__",
            "__builtins__",
            "__file__",
            "__cached__",
          ],
          name: "__main__",
          file: "/run/scratchrun/main.py",
          cached: null,
          spec: null,
          loader: "SourceFileLoader",
          annotations: {},
          argv: ["/run/scratchrun/main.py"],
          orig_argv: ["/run/scratchrun/main.py"],
          path0: "/run/scratchrun",
          cwd: "/home/user",
          preloaded: [],
        });
      });

      test(`${runtime}: an uncaught exception prints the code's traceback only, exit 1`, async () => {
        const { s } = await h.exec({
          runtime,
          code: "def f():\n    raise ValueError('boom')\nf()\n",
        });
        assert.equal(s.exit_code, 1);
        assert.equal(s.exit_reason, "error");
        const lines = s.stderr.split("\n").filter((l) => !/^\s*\^+\s*$/.test(l));
        assert.deepEqual(lines, [
          "Traceback (most recent call last):",
          '  File "/run/scratchrun/main.py", line 3, in <module>',
          "    f()",
          '  File "/run/scratchrun/main.py", line 2, in f',
          "    raise ValueError('boom')",
          "ValueError: boom",
          "",
        ]);
      });

      test(`${runtime}: syntax errors, sys.exit codes and atexit behave as in a script`, async () => {
        const bad = await h.exec({ runtime, code: "print(\n" });
        assert.equal(bad.s.exit_code, 1);
        assert.match(bad.s.stderr, /^ {2}File "\/run\/scratchrun\/main\.py", line 1\n/);
        assert.match(bad.s.stderr, /SyntaxError: /);
        assert.doesNotMatch(bad.s.stderr, /Traceback|prestart/);
        const exit = await h.exec({
          runtime,
          code: "import atexit, sys\natexit.register(lambda: print('bye'))\nclass A:\n    def __del__(self): print('del')\na = A()\nsys.exit(7)\n",
        });
        assert.equal(exit.s.exit_code, 7);
        assert.equal(exit.s.stdout, "bye\ndel\n");
      });

      test(`${runtime}: the call's environment is the process's, TZ included`, async () => {
        const { s } = await h.exec({
          runtime,
          env: { GREETING: "hello", TZ: "Asia/Tokyo" },
          code: [
            "import os, subprocess, time",
            "print(os.environ['GREETING'], time.tzname[0], os.environ['PYTHONUNBUFFERED'])",
            "print(subprocess.run(['sh', '-c', 'echo $GREETING'], capture_output=True, text=True).stdout.strip())",
          ].join("\n"),
        });
        assert.equal(s.exit_reason, "ok", s.stderr);
        assert.equal(s.stdout, "hello JST 1\nhello\n");
      });

      test(`${runtime}: every call draws its own randomness`, async () => {
        const code =
          "import os, random, uuid\nprint(os.urandom(16).hex(), random.random(), uuid.uuid4())";
        await assertFreshRandomness(h, runtime, code, 3);
      });

      test(`${runtime}: PYTHONHASHSEED from the call is honoured`, async () => {
        const code = "print(hash('scratchrun'))";
        const { s } = await h.exec({ runtime, env: { PYTHONHASHSEED: "0" }, code });
        assert.equal(s.exit_reason, "ok", s.stderr);
        // hash() of a str with PYTHONHASHSEED=0 is fixed for 64-bit CPython 3.11 and 3.12 (SipHash-1-3
        // keyed from the seed): `PYTHONHASHSEED=0 python3.11 -c "print(hash('scratchrun'))"`.
        assert.equal(s.stdout, "-6583485184527814024\n");
        const again = await h.exec({ runtime, env: { PYTHONHASHSEED: "0" }, code });
        assert.equal(again.s.stdout, s.stdout);
      });
    }
  });
}
