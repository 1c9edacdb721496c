// `scratchrun templates` (VM-TEMPLATE-PRIMED): setup runs it so that even a server's first start
// finds its pools' snapshot templates kept, and a runtime's first call clones one instead of
// waiting for a cold boot. Real QEMU (TCG here), the real runtime image, the product's engine.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { MicrovmBackend } from "../../src/backends/microvm/backend.js";
import { TemplateStore } from "../../src/backends/microvm/template-store.js";
import { createEngineFromEnv } from "../../src/compose/engine-factory.js";
import { locateRootfs } from "../../src/images/locate.js";
import { skipOutsideCi } from "../helpers/ci.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";
import { canRunMicrovm } from "../microvm/fixture.js";
import { settingsFrom } from "../../src/schema/settings/values.js";

const CLI = join(REPO_ROOT, "dist/src/bin/scratchrun.js");
const skip = skipOutsideCi(
  canRunMicrovm() ??
    (locateRootfs(settingsFrom(process.env).images) ? null : "no runtime image built"),
);

const templates = (env: Record<string, string>, ...args: string[]) =>
  spawnSync(process.execPath, [CLI, "templates", ...args], {
    env: { ...process.env, ...env },
    encoding: "utf8",
    timeout: 600_000,
  });

describe("scratchrun templates", { skip: skip ?? false, timeout: 900_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "sr-templates-cli-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  // One pool, bash's: one template to make (a pre-imported Python's takes tens of seconds).
  const env = {
    SCRATCHRUN_ISOLATION: "microvm",
    SCRATCHRUN_TEMPLATE_CACHE: dir,
    SCRATCHRUN_POOL_SIZE: "bash=1",
    SCRATCHRUN_NETWORK: "none",
  };

  test("keeps the template of every pool the settings keep; a server started after loads it, builds none, and its first call runs in a clone of it", async () => {
    const r = templates(env);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /^scratchrun templates: bash\/256\/plain: built in \d+\.\d s$/m);
    assert.match(r.stderr, /ready in [\d.]+ s: 1 template; .* holds 1 \(\d+ MB on disk\)/);
    assert.deepEqual(
      (await new TemplateStore(dir).list()).map((t) => t.slot),
      ["bash/256/plain"],
    );

    const engine = await createEngineFromEnv({ ...process.env, ...env });
    try {
      const out = await engine.executeInput({ runtime: "bash", code: "echo hi", network: "none" });
      assert.equal(out.result.stdout, "hi\n");
      const backend = engine.backend;
      assert.ok(backend instanceof MicrovmBackend);
      assert.equal(backend.counters.templatesLoaded, 1, "the kept template was loaded");
      assert.equal(backend.counters.templates, 1, "no other template was made");
      assert.equal(backend.counters.bootedCalls, 0, "the call did not cold-boot");
      assert.equal(backend.counters.clonedCalls, 1);
    } finally {
      await engine.close();
    }

    const again = templates(env);
    assert.equal(again.status, 0, again.stderr);
    assert.match(again.stderr, /^scratchrun templates: bash\/256\/plain: already kept$/m);
  });

  test("nothing to do for the namespace backend or with the store off; an argument is refused", () => {
    const ns = templates({ ...env, SCRATCHRUN_ISOLATION: "namespace" });
    assert.equal(ns.status, 0, ns.stderr);
    assert.match(ns.stderr, /the namespace backend keeps no snapshot templates: nothing to do/);
    const off = templates({ ...env, SCRATCHRUN_TEMPLATE_CACHE: "off" });
    assert.equal(off.status, 0, off.stderr);
    assert.match(off.stderr, /SCRATCHRUN_TEMPLATE_CACHE=off: templates are not kept/);
    const bad = templates({ ...env, SCRATCHRUN_TEMPLATE_CACHE: "relative/dir" });
    assert.equal(bad.status, 2, bad.stderr);
    assert.match(bad.stderr, /SCRATCHRUN_TEMPLATE_CACHE is on, off or an absolute directory/);
    const arg = templates(env, "--all");
    assert.equal(arg.status, 2, arg.stderr);
    assert.match(arg.stderr, /takes no arguments \(got --all\)/);
  });
});
