/**
 * The allowlist is a value per call, not a global: the engine takes a call's own allowlist
 * (ExecuteOptions.egressAllowlist, what a per-key policy will pass) over the server's, on the
 * namespace backend in-process, in the private test internet. An allowlisted server runs an open
 * call in an open network; an open server starts the proxy on first need for an allowlisted call.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Engine } from "../../src/engine/engine.js";
import { parseAllowlist } from "../../src/net/allowlist.js";
import { listSandboxNetworkResources } from "../../src/net/resources.js";
import { parseExecRequest } from "../../src/schema/validate.js";
import { createEngineFromEnv } from "../../src/compose/engine-factory.js";
import { assertNoLeaks, snapshot, type HostSnapshot } from "../helpers/leaks.js";
import { probeProgram, Topology, type Check, type ProbeResult } from "./topology.js";
import { TEST_ALLOWLIST, WebHosts } from "./web.js";

const CHECKS: Check[] = [
  { label: "allowed", kind: "https", host: "allowed.test" },
  { label: "refused", kind: "https", host: "refused.test" },
];

describe("egress policy per call (engine, namespace backend)", { timeout: 180_000 }, () => {
  let topo: Topology;
  let web: WebHosts;
  let base: HostSnapshot;
  const engines: Engine[] = [];

  const env = (allow: string | null): NodeJS.ProcessEnv => ({
    ...process.env,
    SCRATCHRUN_ISOLATION: "namespace",
    SCRATCHRUN_POOL_SIZE: "1",
    SCRATCHRUN_NETWORK: "public",
    ...topo.serverEnv(),
    ...(allow === null
      ? { SCRATCHRUN_EGRESS_ALLOW: undefined }
      : { SCRATCHRUN_EGRESS_ALLOW: allow }),
  });

  async function call(engine: Engine, egressAllowlist?: ReturnType<typeof parseAllowlist> | null) {
    const req = parseExecRequest({
      runtime: "python3.11",
      code: probeProgram(CHECKS, 3),
      timeout_ms: 20_000,
    });
    const out = await engine.execute(req, egressAllowlist === undefined ? {} : { egressAllowlist });
    assert.equal(out.result.exit_reason, "ok", out.result.stderr);
    return { res: JSON.parse(out.result.stdout) as ProbeResult, result: out.result };
  }

  before(async () => {
    base = snapshot();
    topo = await new Topology().build();
    web = await new WebHosts(topo).start();
  });

  after(async () => {
    for (const e of engines) await e.close();
    const left = await listSandboxNetworkResources(topo.uplink);
    await web?.stop();
    await topo?.destroy();
    assert.deepEqual(left, { netns: [], links: [], tables: [] });
    await assertNoLeaks(base);
  });

  it("an allowlisted server: its allowlist by default, an open call when the call says null", async () => {
    const engine = await createEngineFromEnv(env(TEST_ALLOWLIST), { maxConcurrent: 2 });
    engines.push(engine);
    const byDefault = await call(engine);
    assert.equal(byDefault.res.allowed?.ok, true, byDefault.res.allowed?.detail);
    assert.equal(byDefault.res.refused?.ok, false);
    assert.ok(byDefault.result.network_refused?.some((r) => r.host === "refused.test"));
    const open = await call(engine, null);
    assert.equal(open.res.refused?.ok, true, open.res.refused?.detail);
    assert.equal(open.result.network_refused, undefined, "an open call has no refusal report");
  });

  it("an open server: a call with its own allowlist gets it (the proxy starts on first need)", async () => {
    const engine = await createEngineFromEnv(env(null), { maxConcurrent: 2 });
    engines.push(engine);
    const open = await call(engine);
    assert.equal(open.res.refused?.ok, true, open.res.refused?.detail);
    const own = await call(engine, parseAllowlist("refused.test"));
    assert.equal(own.res.refused?.ok, true, own.res.refused?.detail);
    assert.equal(own.res.allowed?.ok, false, own.res.allowed?.detail);
    assert.ok(own.result.network_refused?.some((r) => r.host === "allowed.test"));
  });
});
