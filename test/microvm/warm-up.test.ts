import { skipOutsideCi } from "../helpers/ci.js";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createMicrovmBackend, type MicrovmBackend } from "../../src/backends/microvm/create.js";
import { toAgentRequest } from "../../src/engine/request.js";
import { locateRootfs } from "../../src/images/locate.js";
import { runtimeArgv } from "../../src/runtimes/table.js";
import type { RuntimeName } from "../../src/schema/exec.js";
import { parseExecRequest } from "../../src/schema/validate.js";
import { assertNoLeftovers, canRunMicrovm, hostLeftovers, text } from "./fixture.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

const root = locateRootfs(settingsFrom(process.env).images);
const BURST_WINDOW_MS = 3000;
/** Until a burst's extra clones are dropped, and the pool is back at its sizes. */
const burstOver = () => new Promise((r) => setTimeout(r, BURST_WINDOW_MS + 500));
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
 * Pooled clones run a warm-up before they are parked (vm.ts warmUp(); guest/agent-seed.c): the
 * full one ('T', when no call runs) pre-starts a second Python or node and hands it an empty call,
 * bash runs on /dev/null; the rehearsal ('R', while calls run and a CPU is spare) runs the call's
 * path inside the kept Python. Both happen before the seed, so the call must find nothing of
 * them: no process, no output, no variable, and the pre-started interpreter still there to take
 * the call.
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
        // The burst rule with a short window: the tests below wait it out between scenarios
        // (a kind taken twice keeps an extra clone, whose warm-up would otherwise be counted).
        pool: {
          sizes: { bash: 1, "python3.12": 1, node20: 1 },
          mode: "restore",
          burst: { extra: 1, takes: 2, windowMs: BURST_WINDOW_MS },
        },
        // The warm-up decision counts two CPUs whatever the host has: the tests below make one
        // and two calls run while a refill is made.
        cpus: 2,
      });
      await backend.pool.whenFull();
      assert.equal(backend.templateError, null);
    });
    after(async () => {
      await backend?.close();
      await assertNoLeftovers(before0, "a VM or template left something behind");
    });

    const run = (runtime: RuntimeName, code: string) => {
      const req = parseExecRequest({ runtime, code, network: "none" });
      return backend.run(
        {
          runtime,
          memoryMb: req.memory_mb,
          egress: { kind: "none" },
          request: toAgentRequest(req, backend.codeIds),
        },
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

    const delta = (c0: typeof backend.counters) =>
      JSON.stringify(
        Object.fromEntries(
          Object.entries(backend.counters).map(([k, v]) => [k, v - c0[k as keyof typeof c0]]),
        ),
      );

    test("a bash clone made while a call runs gets the full warm-up (a CPU is spare; bash has no kept interpreter to rehearse in), or is parked cold (none is); an idle refill gets the full warm-up", async () => {
      await burstOver(); // the bash calls above made a burst
      await backend.pool.whenFull();
      let c0 = { ...backend.counters };
      // A takes the pooled bash clone, B restores one of its own. A ends first: its refill is made
      // while B runs, one call on two CPUs: a Python's would be rehearsed, bash's gets its full
      // warm-up (a rehearsal would leave bash cold). C takes it.
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
        `A ran in the warmed clone ${delta(c0)}`,
      );
      const c = await run("bash", "echo c");
      assert.equal(text(c.agent.stdout), "c\n");
      assert.equal(
        backend.counters.warmedCalls - c0.warmedCalls,
        2,
        `C's clone got the full warm-up ${delta(c0)}`,
      );
      assert.equal(backend.counters.rehearsedCalls - c0.rehearsedCalls, 0, delta(c0));
      // Now two calls run while the refill is made: no CPU is spare, it is parked cold.
      await burstOver(); // the burst's extra clone is dropped
      await backend.pool.whenFull();
      c0 = { ...backend.counters };
      await Promise.all([
        run("bash", "sleep 0.2; echo a"),
        ...[1, 2].map(async (i) => {
          await new Promise((r) => setTimeout(r, 50 * i));
          return run("bash", "sleep 6; echo b");
        }),
      ]);
      const d = await run("bash", "echo d");
      assert.equal(text(d.agent.stdout), "d\n");
      assert.equal(
        backend.counters.warmedCalls - c0.warmedCalls,
        1,
        `only A was warmed ${delta(c0)}`,
      );
      assert.equal(
        backend.counters.rehearsedCalls - c0.rehearsedCalls,
        0,
        `nothing was rehearsed ${delta(c0)}`,
      );
      await burstOver();
      await call("bash", "echo e"); // asserts that E's clone got the full warm-up
    });

    test("python3.12: a rehearsed clone's pre-started interpreter takes the call, which sees nothing of the rehearsal", async () => {
      await burstOver();
      await backend.pool.whenFull();
      // A (python3.12, pooled) ends while B (bash) runs: A's refill is rehearsed; C takes it.
      await Promise.all([
        run("python3.12", "print(1)"),
        (async () => {
          await new Promise((r) => setTimeout(r, 50));
          return run("bash", "sleep 4");
        })(),
      ]);
      // Counted around C only: B's bash clone has its own warm-up.
      const c0 = { ...backend.counters };
      const r = await run(
        "python3.12",
        [
          PROCS.python,
          "import sys",
          "print('env', sorted(os.environ))",
          "print('cwd', os.getcwd(), sorted(os.listdir('/proc/self/fd')))",
          "print('preloaded', sorted(m for m in ('random', 'tempfile', 'gc', 'io') if m in sys.modules))",
        ].join("\n"),
      );
      assert.equal(backend.counters.rehearsedCalls - c0.rehearsedCalls, 1, delta(c0));
      assert.equal(r.agent.exit?.reason, "exited", text(r.agent.stderr));
      const lines = text(r.agent.stdout).trim().split("\n");
      assert.deepEqual(userProcs(lines.filter((l) => /^\d+ /.test(l))), [
        `1000 ${runtimeArgv("python3.12")[0]} /run/scratchrun-prestart.py`,
      ]);
      const env = lines.find((l) => l.startsWith("env "));
      assert.doesNotMatch(env ?? "", /REHEARSAL/);
      assert.ok(lines.includes("cwd /home/user ['0', '1', '2', '3']"), lines.join("\n"));
      assert.ok(lines.includes("preloaded ['io']"), lines.join("\n"));
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

    test("bash: once a call started node, a clone made while no call runs starts node too before it is parked, and its call finds nothing of it", async () => {
      // No bash call above named node or python: an idle bash clone's warm-up is bash alone, and
      // the call's shell gets the same pid in every such clone.
      await burstOver();
      const [p0] = await call("bash", "echo $$");
      await burstOver();
      const [p1] = await call("bash", "echo $$");
      assert.equal(p1, p0, "an idle bash clone's warm-up is the same each time");
      assert.deepEqual(await call("bash", "node -v >/dev/null && echo ran"), ["ran"]);
      // The refill made after that call, with no call running, starts node on /dev/null too (its
      // process and threads take pids before the seed), then reaps it.
      await burstOver();
      const lines = await call("bash", `echo "pid $$"; ${PROCS.bash}`);
      const pid = Number(lines.find((l) => l.startsWith("pid "))?.slice(4));
      // node's threads take pids too: a failed exec would take one.
      assert.ok(pid - Number(p0) >= 4, `the clone's warm-up ran node: pid ${pid} vs ${p0}`);
      for (const l of userProcs(lines))
        assert.match(l, /^1000 (\/bin\/bash \/run\/scratchrun\/main\.sh|\/bin\/bash|tr|stat)\b/, l);
      assert.ok(!userProcs(lines).some((l) => l.includes("node")), lines.join("\n"));
    });
  },
);
