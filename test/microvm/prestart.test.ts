import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { assertFreshRandomness } from "../helpers/randomness.js";
import { serverForSuite } from "../helpers/suite.js";

/**
 * The microVM's fast path for Python and node: the snapshot template's agent pre-starts the
 * interpreter (guest/prestart.py, guest/prestart.js) and hands it the call when a fresh start
 * would have been the same (guest/agent-prestart.c). test/e2e/python-start.test.ts and
 * node-start.test.ts hold the semantics on both backends; this file holds which calls take the
 * fast path, which get a fresh interpreter, and that clones of one template (which resume the
 * same process) still draw their own random numbers.
 */
const whoRuns =
  "import sys\nwith open('/proc/self/cmdline', 'rb') as f: print(f.read().split(b'\\0')[1].decode())";
const PRESTARTED = "/run/scratchrun-prestart.py\n";
const FRESH = "/run/scratchrun/main.py\n";

const nodeWhoRuns =
  "console.log(require('fs').readFileSync('/proc/self/cmdline', 'utf8').split('\\0')[1]);";
const NODE_PRESTARTED = "/run/scratchrun-prestart.js\n";
const NODE_FRESH = "/run/scratchrun/main.js\n";

describe("microvm: pre-started interpreters", () => {
  const h = serverForSuite("microvm");

  for (const runtime of ["python3.12", "python3.11"]) {
    test(`${runtime}: a call with the base environment runs in the pre-started interpreter`, async () => {
      // A first call waits for the runtime's template and runs in a clone; a call cold-boots
      // (fresh interpreter) only if the build failed, so the loop allows for that.
      let first = "";
      for (let i = 0; i < 60 && first !== PRESTARTED; i++) {
        const { s } = await h.exec({ runtime, code: whoRuns });
        first = s.stdout;
        if (first !== PRESTARTED) await sleep(1000);
      }
      assert.equal(first, PRESTARTED, "no call reached the pre-started interpreter");
      for (const env of [{}, { GREETING: "hi", TZ: "UTC", MPLBACKEND: "svg", PATH: "/bin" }]) {
        const { s } = await h.exec({ runtime, code: whoRuns, env });
        assert.equal(s.exit_reason, "ok", s.stderr);
        assert.equal(s.stdout, PRESTARTED, JSON.stringify(env));
      }
    });

    test(`${runtime}: a call that changes how the interpreter starts gets a fresh one`, async () => {
      const changes: { env?: Record<string, string>; files?: Record<string, string> }[] = [
        { env: { PYTHONHASHSEED: "1" } },
        { env: { PYTHONPATH: "/tmp" } },
        { env: { PYTHONUNBUFFERED: "" } },
        { env: { LANG: "C" } },
        { env: { LC_ALL: "C.UTF-8" } },
        { env: { HOME: "/tmp" } },
        { env: { LD_LIBRARY_PATH: "/home/user/lib" } },
        { env: { MALLOC_ARENA_MAX: "2" } },
        { files: { ".local/lib/site.pth": "" } },
      ];
      for (const change of changes) {
        const { s } = await h.exec({ runtime, code: whoRuns, ...change });
        assert.equal(s.exit_reason, "ok", s.stderr);
        assert.equal(s.stdout, FRESH, JSON.stringify(change));
      }
    });
  }

  test("node20: a call with the base environment runs in the pre-started node", async () => {
    let first = "";
    for (let i = 0; i < 60 && first !== NODE_PRESTARTED; i++) {
      const { s } = await h.exec({ runtime: "node20", code: nodeWhoRuns });
      first = s.stdout;
      if (first !== NODE_PRESTARTED) await sleep(1000);
    }
    assert.equal(first, NODE_PRESTARTED, "no call reached the pre-started node");
    for (const env of [{}, { GREETING: "hi", TZ: "UTC", PATH: "/bin" }]) {
      const { s } = await h.exec({ runtime: "node20", code: nodeWhoRuns, env });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.equal(s.stdout, NODE_PRESTARTED, JSON.stringify(env));
    }
  });

  test("node20: clones of one template resume one process but draw their own random numbers", async () => {
    // Without the reseed (guest/node-reseed.c) every value below repeats: OpenSSL's DRBG and V8's
    // generator are in the snapshot.
    const code = [
      "const c = require('crypto'), vm = require('vm'), { Worker } = require('worker_threads');",
      nodeWhoRuns,
      "const w = new Worker('require(\"worker_threads\").parentPort.postMessage(Math.random())', { eval: true });",
      "w.on('message', (m) => console.log([c.randomBytes(16).toString('hex'), c.randomUUID(),",
      "  c.randomInt(2 ** 47), c.getRandomValues(new Uint32Array(2)).join('.'), Math.random(),",
      "  vm.runInNewContext('Math.random()'), m].join(' ')));",
    ].join("\n");
    await assertFreshRandomness(h, "node20", code, 4, (stdout) => {
      const [who, line] = stdout.split("\n");
      assert.equal(`${who}\n`, NODE_PRESTARTED, "the call did not run in the pre-started node");
      const values = line!.split(" ");
      assert.equal(values.length, 7, stdout);
      return values;
    });
  });

  test("node20: a call that changes how node starts gets a fresh one", async () => {
    const changes: Record<string, string>[] = [
      { NODE_OPTIONS: "--max-old-space-size=100" },
      { NODE_PATH: "/tmp" },
      { UV_THREADPOOL_SIZE: "2" },
      { OPENSSL_CONF: "/dev/null" },
      { FORCE_COLOR: "1" },
      { LANG: "C" },
    ];
    for (const env of changes) {
      const { s } = await h.exec({ runtime: "node20", code: nodeWhoRuns, env });
      assert.equal(s.exit_reason, "ok", s.stderr);
      assert.equal(s.stdout, NODE_FRESH, JSON.stringify(env));
    }
  });

  test("the pre-started interpreter runs as the code's user, with the code's limits", async () => {
    const { s } = await h.exec({
      runtime: "python3.12",
      code: "import os, resource\nprint(os.getuid(), os.getgid(), os.getgroups(), resource.getrlimit(resource.RLIMIT_NPROC)[0])\nprint(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])",
    });
    assert.equal(s.exit_reason, "ok", s.stderr);
    assert.equal(s.stdout, "1000 1000 [] 128\n1\n");
  });

  test("the pre-started node runs as the code's user, with the code's limits", async () => {
    const { s } = await h.exec({
      runtime: "node20",
      code: [
        nodeWhoRuns,
        "const fs = require('fs');",
        "const nproc = fs.readFileSync('/proc/self/limits', 'utf8').match(/Max processes +(\\d+)/)[1];",
        "const nnp = fs.readFileSync('/proc/self/status', 'utf8').match(/NoNewPrivs:\\s+(\\d)/)[1];",
        "const groups = fs.readFileSync('/proc/self/status', 'utf8').match(/Groups:(.*)/)[1].trim();",
        "console.log(process.getuid(), process.getgid(), `[${groups}]`, nproc, nnp);",
      ].join("\n"),
    });
    assert.equal(s.exit_reason, "ok", s.stderr);
    assert.equal(s.stdout, `${NODE_PRESTARTED}1000 1000 [] 128 1\n`);
  });

  // Without tsc=reliable a TCG guest's kernel marked its TSC unstable while the template booted
  // and pre-imported on a busy host, and counted timer ticks instead: its clocks ran slow (a 32 s
  // sleep measured 31.2 s), and the agent enforces timeouts and measures duration_ms by them.
  const CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
  const readClocksource: Record<string, string> = {
    "python3.12": `print(open("${CLOCKSOURCE}").read(), end="")`,
    "python3.11": `print(open("${CLOCKSOURCE}").read(), end="")`,
    node20: `process.stdout.write(require("fs").readFileSync("${CLOCKSOURCE}", "utf8"))`,
    bash: `cat ${CLOCKSOURCE}`,
  };
  for (const [runtime, code] of Object.entries(readClocksource)) {
    test(`${runtime}: the clone keeps time by the TSC (TCG) or kvm-clock (KVM), never the timer tick`, async () => {
      const { s } = await h.exec({ runtime, code });
      assert.equal(s.exit_reason, "ok", s.stderr);
      const clock = s.isolation === "microvm-kvm" ? "kvm-clock" : "tsc";
      assert.equal(s.stdout, `${clock}\n`, `isolation ${s.isolation}`);
    });
  }

  test("its time limit counts from the hand-over and kills it", async () => {
    const { s } = await h.exec({
      runtime: "python3.12",
      timeout_ms: 1500,
      code: "import sys\nprint('started', flush=True)\nwhile True: pass",
    });
    assert.equal(s.exit_reason, "timeout");
    assert.equal(s.stdout, "started\n");
  });
});
