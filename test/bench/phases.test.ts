import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { REPO_ROOT } from "../../bench/peers.js";
import type { BenchResults, BurstResult, SessionsBackend, TtiRow } from "../../bench/results.js";
import { TTI_COMMANDS } from "../../bench/workloads.js";

const RUN = join(REPO_ROOT, "dist/bench/run.js");

// Runs the benchmark's phases for real, as a smoke (real servers on both backends, real
// peers; one call per system and command in sequence, a burst of two): time to interactive,
// the sessions workload and the burst phase (issue 57). Checks that every system measured both
// commands, that every burst call is accounted for, that the session's cells did their work
// with the data sent once, and that each burst server (network none and public, both backends)
// and raw bubblewrap answered every call with its own marker; never how fast anything was (the
// targets are in the report).
test(
  "bench --only tti,sessions,burst accounts for every call of the phases on both backends",
  { timeout: 900_000 },
  () => {
    const out = mkdtempSync(join(tmpdir(), "bench-phases-out-"));
    const burstN = 2;
    try {
      const r = spawnSync(
        process.execPath,
        [
          RUN,
          "--smoke",
          "--only",
          "tti,sessions,burst",
          "--tti-n",
          "1",
          "--tti-burst",
          String(burstN),
          "--burst-n",
          String(burstN),
          "--sessions-mb",
          "1",
          "--out",
          out,
        ],
        { encoding: "utf8", maxBuffer: 16 << 20 },
      );
      assert.equal(r.status, 0, `bench failed:\n${r.stderr.slice(-3000)}`);
      const json = readdirSync(out).find((f) => f.endsWith("-smoke.json"));
      assert.ok(json);
      const results = JSON.parse(readFileSync(join(out, json), "utf8")) as BenchResults;

      const tti = results.tti;
      assert.ok(tti, "no time-to-interactive results");
      for (const system of ["host", "bwrap", "srt-lib", "srt-cli", "namespace", "microvm"])
        for (const command of TTI_COMMANDS) {
          const row: TtiRow | undefined = tti.rows.find(
            (x) => x.system === system && x.command === command,
          );
          assert.ok(row?.sequential, `${system} ${command}: ${JSON.stringify(row)}`);
          assert.equal(
            row.sequential.errors,
            0,
            `${system} ${command}: ${row.sequential.firstError}`,
          );
          assert.equal(row.sequential.summary?.n, 1);
          const b: BurstResult | undefined = row.burst;
          assert.ok(b, `${system} ${command}: no burst`);
          const others: number = Object.values(b.otherStatus).reduce((a, n) => a + n, 0);
          assert.equal(
            b.answered + b.wrong + b.refused + others + b.lost,
            burstN,
            JSON.stringify(b),
          );
          assert.equal(b.via, system === "namespace" || system === "microvm" ? "rest" : "process");
          assert.equal(b.wrong, 0, `${system} ${command}: ${b.firstError}`);
          assert.ok(b.answered > 0, `${system} ${command}: nothing answered`);
        }

      const sessions = results.sessions;
      assert.ok(sessions, "no sessions results");
      for (const backend of ["namespace", "microvm"]) {
        const b: SessionsBackend | undefined = sessions.backends.find((x) => x.backend === backend);
        assert.ok(b?.fresh && b.session, `${backend}: ${JSON.stringify(b)}`);
        assert.equal(b.fresh.errors, 0, `${backend} fresh: ${b.fresh.firstError}`);
        assert.equal(b.session.errors, 0, `${backend} session: ${b.session.firstError}`);
        assert.equal(b.fresh.calls, sessions.steps + 1);
        assert.equal(b.session.calls, sessions.steps + 3, "start, load, the steps, end");
        // The data went once into the session, and with every fresh call: its cells drew their
        // figures from the DataFrame the session kept.
        const data = Math.ceil(sessions.gzipBytes / 3) * 4;
        assert.ok(b.fresh.bytesSent > (sessions.steps + 1) * data, `${backend} fresh sent`);
        assert.ok(b.session.bytesSent < 2 * data, `${backend} session sent`);
        assert.ok(b.freshPrint && b.sessionPrint, `${backend}: print(1) not measured`);
      }

      const burst = results.burst;
      assert.ok(burst, "no burst phase results");
      const systems = burst.rows.map((r) => `${r.system}/${r.network}`).sort();
      assert.deepEqual(systems, [
        "bwrap/none",
        "microvm-none/none",
        "microvm-public/public",
        "namespace-none/none",
        "namespace-public/public",
      ]);
      for (const row of burst.rows) {
        assert.equal(row.burst.n, burstN);
        assert.equal(row.burst.answered, burstN, `${row.system}: ${row.burst.firstError}`);
        assert.equal(row.burst.wrong + row.burst.lost + row.burst.refused, 0);
        assert.ok(row.burst.p95 !== undefined, `${row.system}: no p95`);
      }
      assert.deepEqual(Object.keys(burst.ratios).sort(), ["microvm", "namespace"]);
      assert.ok(
        readdirSync(out).some((f) => f.endsWith("-burst-smoke.md")),
        "no burst table",
      );
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  },
);
