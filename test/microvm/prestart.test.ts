import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { serverForSuite } from "../helpers/suite.js";

/**
 * The microVM's fast path for Python: the snapshot template's agent pre-starts the interpreter
 * (guest/prestart.py) and hands it the call when a fresh start would have been the same
 * (guest/agent-prestart.c). test/e2e/python-start.test.ts holds the semantics on both backends;
 * this file holds which calls take the fast path and which get a fresh interpreter.
 */
const whoRuns =
  "import sys\nwith open('/proc/self/cmdline', 'rb') as f: print(f.read().split(b'\\0')[1].decode())";
const PRESTARTED = "/run/scratchrun-prestart.py\n";
const FRESH = "/run/scratchrun/main.py\n";

describe("microvm: pre-started Python", () => {
  const h = serverForSuite("microvm");

  for (const runtime of ["python3.12", "python3.11"]) {
    test(`${runtime}: a call with the base environment runs in the pre-started interpreter`, async () => {
      // Until the runtime's template exists a call cold-boots (fresh interpreter); the server
      // builds it in the background after its first call.
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

  test("the pre-started interpreter runs as the code's user, with the code's limits", async () => {
    const { s } = await h.exec({
      runtime: "python3.12",
      code: "import os, resource\nprint(os.getuid(), os.getgid(), os.getgroups(), resource.getrlimit(resource.RLIMIT_NPROC)[0])\nprint(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])",
    });
    assert.equal(s.exit_reason, "ok", s.stderr);
    assert.equal(s.stdout, "1000 1000 [] 128\n1\n");
  });

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
