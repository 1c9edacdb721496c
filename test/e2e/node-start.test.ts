import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { TEST_BACKENDS } from "../helpers/backends.js";
import { assertFreshRandomness } from "../helpers/randomness.js";
import { serverForSuite } from "../helpers/suite.js";

/**
 * The code runs as `node /run/scratchrun/main.js` would run it, whichever way the backend starts
 * node (both hand most calls to a node pre-started by the agent, guest/prestart.js: in the
 * microVM's snapshot, in a pooled namespace jail; a jail started for a call execs a fresh one):
 * the same main module, arguments, environment, stack traces and exit codes, and randomness of
 * its own in every call.
 * test/microvm/prestart-script.test.ts compares the script with a direct run case by case.
 */
for (const backend of TEST_BACKENDS) {
  describe(`node starts as a script run [${backend}]`, () => {
    const h = serverForSuite(backend);

    test("main module, argv, cwd and the call's environment (TZ included) are a script's", async () => {
      const { s } = await h.exec({
        runtime: "node20",
        env: { GREETING: "hello", TZ: "Asia/Tokyo" },
        code: [
          "const { execFileSync } = require('child_process');",
          "console.log(JSON.stringify({",
          "  argv: process.argv.slice(1), main: require.main === module, id: module.id,",
          "  file: __filename, cache: Object.keys(require.cache), cwd: process.cwd(),",
          "  greeting: process.env.GREETING, hour: new Date(0).getHours(),",
          "  child: execFileSync('sh', ['-c', 'echo $GREETING'], { encoding: 'utf8' }).trim(),",
          "}));",
        ].join("\n"),
      });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.deepEqual(JSON.parse(s.stdout), {
        argv: ["/run/scratchrun/main.js"],
        main: true,
        id: ".",
        file: "/run/scratchrun/main.js",
        cache: ["/run/scratchrun/main.js"],
        cwd: "/home/user",
        greeting: "hello",
        hour: 9,
        child: "hello",
      });
    });

    test("an uncaught exception prints the code's stack, exit 1", async () => {
      const { s } = await h.exec({
        runtime: "node20",
        code: "function f() {\n  throw new Error('boom');\n}\nf();\n",
      });
      assert.equal(s.exit_code, 1);
      assert.equal(s.exit_reason, "error");
      assert.ok(s.stderr.startsWith("/run/scratchrun/main.js:2\n"), s.stderr);
      assert.match(s.stderr, /\nError: boom\n {4}at f \(\/run\/scratchrun\/main\.js:2:9\)\n/);
      assert.doesNotMatch(s.stderr, /prestart/);
    });

    test("every call draws its own randomness", async () => {
      const code = [
        "const c = require('crypto'), vm = require('vm'), { Worker } = require('worker_threads');",
        "const w = new Worker('require(\"worker_threads\").parentPort.postMessage(Math.random())', { eval: true });",
        "w.on('message', (m) => console.log(c.randomBytes(16).toString('hex'), c.randomUUID(),",
        "  Math.random(), vm.runInNewContext('Math.random()'), m));",
      ].join("\n");
      await assertFreshRandomness(h, "node20", code, 3, (stdout) => {
        const values = stdout.trim().split(" ");
        assert.equal(values.length, 5, stdout);
        return values;
      });
    });
  });
}
