import { skipOutsideCi } from "../helpers/ci.js";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createMicrovmBackend, type MicrovmBackend } from "../../src/backends/microvm/backend.js";
import { toAgentRequest } from "../../src/engine/request.js";
import { locateRootfs } from "../../src/images/locate.js";
import { runtimeArgv } from "../../src/images/manifest.js";
import { execInputSchema, type RuntimeName } from "../../src/schema/exec.js";
import { assertNoLeftovers, canRunMicrovm, hostLeftovers, text } from "./fixture.js";

const root = locateRootfs();
const skip = skipOutsideCi(canRunMicrovm() ?? (root ? null : "no runtime image built"));

/**
 * Every process in the guest but kernel threads, as "<uid> <argv>", from the code itself; bash,
 * Python and node print the same lines so the runtimes can be compared with one expectation.
 */
const PROCS: Record<"bash" | "python" | "node", string> = {
  bash:
    'for p in /proc/[0-9]*; do a=$(tr "\\0" " " <"$p/cmdline" 2>/dev/null); ' +
    '[ -n "$a" ] && echo "$(stat -c %u "$p") ${a% }"; done; true',
  python: [
    "import os",
    "for p in sorted(int(d) for d in os.listdir('/proc') if d.isdigit()):",
    "    try:",
    "        a = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')",
    "        print(os.stat(f'/proc/{p}').st_uid, b' '.join(a).decode().strip())",
    "    except (FileNotFoundError, ProcessLookupError):",
    "        pass",
  ].join("\n"),
  node: [
    "const fs = require('fs');",
    "for (const p of fs.readdirSync('/proc').filter((d) => /^\\d+$/.test(d)).map(Number).sort((a, b) => a - b)) {",
    "  try {",
    "    const a = fs.readFileSync(`/proc/${p}/cmdline`).toString().split('\\0').join(' ').trim();",
    "    if (a) console.log(fs.statSync(`/proc/${p}`).uid, a);",
    "  } catch {}",
    "}",
  ].join("\n"),
};

/**
 * Pooled clones run a warm-up before they are parked (vm.ts warmUp(); guest/agent-seed.c 'T'):
 * Python and node pre-start a second interpreter and hand it an empty call, bash runs on
 * /dev/null. That happens before the seed, so the call must find nothing of it: no process, no
 * output, and for Python and node the pre-started interpreter still there to take the call.
 */
describe(
  "microvm: pooled clones are warmed up before they are parked",
  {
    skip: skip ?? false,
    timeout: 300_000,
  },
  () => {
    let backend: MicrovmBackend;
    let before0: Awaited<ReturnType<typeof hostLeftovers>>;

    before(async () => {
      before0 = await hostLeftovers();
      backend = await createMicrovmBackend({
        rootfsDir: root!.dir,
        pool: { sizes: { bash: 1, "python3.12": 1, node20: 1 }, mode: "restore" },
      });
      await backend.pool.whenFull();
      assert.equal(backend.templateError, null);
    });
    after(async () => {
      await backend?.close();
      await assertNoLeftovers(before0, "a VM or template left something behind");
    });

    const run = (runtime: RuntimeName, code: string) => {
      const req = execInputSchema.parse({ runtime, code, network: "none" });
      return backend.run(
        { runtime, memoryMb: req.memory_mb, network: "none", request: toAgentRequest(req, null) },
        { signal: new AbortController().signal },
      );
    };

    /** A call in a clone the pool warmed (waits for the pool to be full first). */
    async function call(runtime: RuntimeName, code: string) {
      await backend.pool.whenFull();
      const warmedBefore = backend.counters.warmedCalls;
      const r = await run(runtime, code);
      assert.equal(
        backend.counters.warmedCalls - warmedBefore,
        1,
        "the call's clone was not warmed",
      );
      assert.equal(r.agent.failure, null);
      assert.equal(r.agent.exit?.reason, "exited", text(r.agent.stderr));
      assert.equal(text(r.agent.stderr), "");
      return text(r.agent.stdout)
        .trim()
        .split("\n")
        .map((l) => l.trim());
    }

    /** Lines of processes owned by the code's user (uid 1000). */
    const userProcs = (lines: string[]) => lines.filter((l) => l.startsWith("1000 "));

    test("bash: the warm-up's interpreter is gone; only the call's own processes run as its user", async () => {
      const lines = await call("bash", PROCS.bash);
      assert.ok(
        lines.some((l) => l.startsWith("0 /run/scratchrun-agent")),
        lines.join("\n"),
      );
      for (const l of userProcs(lines))
        assert.match(l, /^1000 (\/bin\/bash \/run\/scratchrun\/main\.sh|\/bin\/bash|tr|stat)\b/, l);
      assert.ok(!lines.some((l) => l.includes("/dev/null")), lines.join("\n"));
    });

    test("the agent's warm-up file is gone: the code directory holds the call's file only", async () => {
      const lines = await call("bash", "ls -A /run/scratchrun");
      assert.deepEqual(lines, ["main.sh"]);
    });

    test("a clone made while a call is in flight is parked without a warm-up; an idle refill warms", async () => {
      await backend.pool.whenFull();
      const c0 = { ...backend.counters };
      const delta = () =>
        JSON.stringify(
          Object.fromEntries(
            Object.entries(backend.counters).map(([k, v]) => [k, v - c0[k as keyof typeof c0]]),
          ),
        );
      // A takes the pooled bash clone, B restores one of its own. A ends first: its refill happens
      // while B still runs, so that clone is parked cold. C takes it; D, after an idle refill, not.
      const [a, b] = await Promise.all([
        run("bash", "sleep 0.2; echo a"),
        (async () => {
          await new Promise((r) => setTimeout(r, 50));
          return run("bash", "sleep 6; echo b");
        })(),
      ]);
      assert.deepEqual([text(a.agent.stdout), text(b.agent.stdout)], ["a\n", "b\n"]);
      assert.equal(
        backend.counters.warmedCalls - c0.warmedCalls,
        1,
        `A ran in the warmed clone ${delta()}`,
      );
      const c = await run("bash", "echo c");
      assert.equal(text(c.agent.stdout), "c\n");
      // (B may have cold-booted instead of restoring: either way three calls, one warmed.)
      assert.equal(
        backend.counters.clonedCalls +
          backend.counters.bootedCalls -
          c0.clonedCalls -
          c0.bootedCalls,
        3,
        delta(),
      );
      assert.equal(
        backend.counters.warmedCalls - c0.warmedCalls,
        1,
        `C's clone was warmed under load ${delta()}`,
      );
      await call("bash", "echo d"); // asserts that D's clone was warmed
    });

    test("node20: the warm-up's node is gone and the pre-started node takes the call", async () => {
      const lines = await call("node20", PROCS.node);
      assert.deepEqual(userProcs(lines), [
        `1000 ${runtimeArgv("node20")[0]} /run/scratchrun-prestart.js`,
      ]);
    });

    test("python3.12: the warm-up's interpreter is gone and the pre-started one takes the call", async () => {
      const lines = await call("python3.12", PROCS.python);
      assert.deepEqual(userProcs(lines), [
        `1000 ${runtimeArgv("python3.12")[0]} /run/scratchrun-prestart.py`,
      ]);
    });
  },
);
