// INPUTS-KEY, INPUTS-REST, INPUTS-REMOTE: a call with `inputs` (issue 53) through the HTTP
// service on the namespace backend: never more of the key's sandboxes at once than its
// concurrency allows though the engine would run more (sampled on the engine itself while the
// call runs), each input a run of the key; POST /v1/exec answers one result per input in order
// and the summary; remote mode sends the call whole and renders the same outcomes; a bad input is
// refused 400 naming its index with no run recorded.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { RemoteEngine } from "../../src/remote/client.js";
import { parseExecRequest } from "../../src/schema/validate.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { startService, type ServiceHarness } from "./harness.js";

interface WireBatch {
  results: { stdout: string; exit_reason: string; exit_code: number | null; files: unknown[] }[];
  summary: { count: number; passed: number; failed: number; concurrency: number };
}

const KEY_CONCURRENCY = 2;
const NAP_CODE = 'sleep 0.6; echo "input $N"';

describe("inputs through the HTTP service [namespace]", () => {
  let h: ServiceHarness;
  let base: HostSnapshot;
  let key = "";

  before(async () => {
    base = snapshot();
    // The engine would run 8 sandboxes at once: only the key's concurrency holds a call to 2.
    h = await startService(
      { maxConcurrent: 8, maxQueued: 32, queueDeadlineMs: 30_000 },
      { keyLimits: { maxConcurrent: KEY_CONCURRENCY, ratePerMinute: 100_000, burst: 100_000 } },
    );
    key = (await h.keys.create("inputs")).key;
  });
  after(async () => {
    await h.close();
    await assertNoLeaks(base);
  });

  /** The most sandboxes the engine ran at once while `during` ran, sampled every 5 ms. */
  async function peakWhile<T>(during: () => Promise<T>): Promise<{ value: T; peak: number }> {
    let peak = 0;
    const sampler = setInterval(() => (peak = Math.max(peak, h.engine.admission.active)), 5);
    try {
      return { value: await during(), peak };
    } finally {
      clearInterval(sampler);
    }
  }

  test("INPUTS-KEY, INPUTS-REST: POST /v1/exec runs the inputs within the key's concurrency, in order", async () => {
    const runsBefore = h.runs.all().length;
    const inputs = Array.from({ length: 6 }, (_, i) => ({ env: { N: String(i) } }));
    const { value: res, peak } = await peakWhile(() =>
      h.post("/v1/exec", { runtime: "bash", code: NAP_CODE, inputs }, key),
    );
    assert.equal(res.status, 200);
    const body = (await res.json()) as WireBatch;
    assert.deepEqual(
      body.results.map((r) => r.stdout),
      inputs.map((_, i) => `input ${i}\n`),
    );
    const { count, passed, failed, concurrency } = body.summary;
    assert.deepEqual([count, passed, failed, concurrency], [6, 6, 0, KEY_CONCURRENCY]);
    assert.equal(peak, KEY_CONCURRENCY, "the key's concurrency, no more and no less");
    // Each input is a run of the key, recorded as a call is.
    const runs = h.runs.all().slice(runsBefore);
    assert.equal(runs.length, 6);
  });

  test("INPUTS-KEY: with a slot of the key taken by another call, every input still runs, none past the key's concurrency", async () => {
    // The other call holds one of the key's two slots for the whole of this one's first inputs.
    const other = h.post("/v1/exec", { runtime: "bash", code: "sleep 2; echo other" }, key);
    const deadline = Date.now() + 20_000;
    while (h.engine.admission.active < 1 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 5));
    const inputs = Array.from({ length: 4 }, (_, i) => ({ env: { N: String(i) } }));
    const { value: res, peak } = await peakWhile(() =>
      h.post("/v1/exec", { runtime: "bash", code: NAP_CODE, inputs }, key),
    );
    assert.equal(res.status, 200);
    const body = (await res.json()) as WireBatch;
    // Inputs asking at once were refused before any was admitted, and answered as not run.
    assert.deepEqual(
      body.results.map((r) => r.stdout),
      inputs.map((_, i) => `input ${i}\n`),
    );
    assert.deepEqual([body.summary.passed, body.summary.failed], [4, 0]);
    assert.ok(peak <= KEY_CONCURRENCY, `peak ${peak}`);
    assert.equal((await other).status, 200);
  });

  test("INPUTS-REST: a bad input is refused 400 naming its index, nothing recorded", async () => {
    const runsBefore = h.runs.all().length;
    const res = await h.post(
      "/v1/exec",
      { runtime: "bash", code: "true", inputs: [{}, { env: { "2X": "y" } }] },
      key,
    );
    assert.equal(res.status, 400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, "INVALID_INPUT");
    assert.match(body.error.message, /inputs\[1\]\.env: env name "2X"/);
    assert.equal(h.runs.all().length, runsBefore);
  });

  test("INPUTS-REMOTE: remote mode sends the call whole and gets each input's outcome", async () => {
    const remote = await RemoteEngine.connect({ url: h.api.url, apiKey: key });
    try {
      const req = parseExecRequest(
        {
          runtime: "bash",
          code: 'cat in.txt; echo "$N"; [ "$N" != 1 ]',
          files: { "in.txt": "call" },
          return_files: ["in.txt"],
          inputs: [{ env: { N: "0" } }, { env: { N: "1" }, files: { "in.txt": "own" } }],
        },
        remote.policy,
      );
      const { value: batch, peak } = await peakWhile(() => remote.executeBatch(req));
      assert.ok(peak <= KEY_CONCURRENCY);
      assert.deepEqual(
        batch.entries.map((e) => [e.result.stdout, e.result.exit_reason]),
        [
          ["call0\n", "ok"],
          ["own1\n", "error"],
        ],
      );
      assert.deepEqual(
        batch.entries.map((e) => e.files.map((f) => f.content.toString())),
        [["call"], ["own"]],
      );
      assert.deepEqual([batch.summary.passed, batch.summary.failed], [1, 1]);
    } finally {
      await remote.close();
    }
  });
});
