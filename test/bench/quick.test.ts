import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { REPO_ROOT } from "../../bench/peers.js";
import type { BenchResults } from "../../bench/results.js";

const RUN = join(REPO_ROOT, "dist/bench/run.js");
const leftovers = () => readdirSync(tmpdir()).filter((n) => n.startsWith("scratchrun-bench-"));

// Runs the benchmark's smoke mode for real (real servers, real sandboxes, real peers: the quick
// run's cells, one call each) and checks it produced a number for every system, never how fast
// they are. `npm run bench` (and `-- --quick`) keep their samples; what they cost is theirs.
test(
  "bench --smoke measures every system and writes json, markdown and svg",
  { timeout: 300_000 },
  () => {
    const out = mkdtempSync(join(tmpdir(), "bench-quick-out-"));
    const before = leftovers();
    try {
      const r = spawnSync(process.execPath, [RUN, "--smoke", "--out", out], {
        encoding: "utf8",
        maxBuffer: 16 << 20,
      });
      assert.equal(r.status, 0, `bench failed:\n${r.stderr.slice(-3000)}`);
      const files = readdirSync(out);
      const json = files.find((f) => f.endsWith("-smoke.json"));
      assert.ok(json, `no results json in ${files.join(", ")}`);
      assert.ok(files.includes("latest-smoke.md") && files.includes("latest-smoke.svg"));
      const results = JSON.parse(readFileSync(join(out, json), "utf8")) as BenchResults;
      assert.equal(results.mode, "smoke");
      const ids = results.systems.map((s) => s.id);
      for (const id of [
        "host",
        "bwrap",
        "namespace",
        "engine",
        "microvm",
        "microvm-empty",
        "microvm-nopool",
        "srt-cli",
        "srt-lib",
        "pyodide-node",
        "pyodide-deno",
      ])
        assert.ok(ids.includes(id), `system ${id} missing`);
      for (const id of ids) {
        const measured = results.latency.filter((l) => l.system === id && l.result?.summary);
        assert.ok(
          measured.length > 0,
          `no numbers for ${id}: ${JSON.stringify(results.latency.filter((l) => l.system === id))}`,
        );
        for (const m of measured) {
          assert.equal(m.result!.summary!.n, 1, `${id} ${m.runtime}: one call per cell`);
          assert.ok(m.result!.summary!.p50 > 0);
          assert.equal(
            m.result!.errors,
            0,
            `${id} ${m.runtime} ${m.workload}: ${m.result!.firstError}`,
          );
        }
      }
      assert.ok(results.cold.length > 0 && results.cold.every((c) => c.result.summary !== null));
      const tp = results.throughput.find((t) => t.system === "namespace")?.runs[0];
      assert.ok(tp && tp.ok > 0, "no throughput numbers for namespace");
      assert.ok(results.cost.idleVms, "idle VM cost not measured");
      for (const sys of ["namespace", "microvm"])
        assert.ok(
          Object.keys(results.cost.poolKinds[sys] ?? {}).some((k) => k.endsWith("/preimport")),
          `${sys}: no idle cost of its pre-imported pool`,
        );
      // The idle server: python3.13 and node24 pooled only when the operator names them.
      const idle = results.cost.idleServers ?? [];
      const byPooling = (p: string) =>
        idle.find((s) => s.backend === "namespace" && s.pooling === p);
      const plain = byPooling("default");
      const every = byPooling("every runtime");
      assert.ok(plain && every, `idle servers not measured: ${JSON.stringify(idle)}`);
      assert.deepEqual(plain.pooledRuntimes, ["python3.12", "python3.11", "node20", "bash"]);
      assert.deepEqual(every.pooledRuntimes, [
        ...["python3.12", "python3.11", "node20", "bash"],
        ...["python3.13", "node24"],
      ]);
      assert.ok(every.sandboxes > plain.sandboxes, JSON.stringify(idle));
      assert.ok(plain.pssMb > 0 && every.processes > plain.processes, JSON.stringify(idle));
      const loop = results.throughput.find((t) => t.system === "microvm")?.runs[0];
      assert.ok(loop && loop.concurrency === 1 && loop.ok > 0, "no back-to-back microVM numbers");
      const md = readFileSync(join(out, "latest-smoke.md"), "utf8");
      assert.match(md, /## Targets/);
      assert.match(readFileSync(join(out, "latest-smoke.svg"), "utf8"), /^<svg [^>]*>[\s\S]*<rect/);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
    assert.deepEqual(leftovers(), before, "the bench left work directories behind");
  },
);
