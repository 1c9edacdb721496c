import { MicrovmBackend } from "../backends/microvm/backend.js";
import { createEngineFromEnv, templateStoreFromEnv } from "../compose/engine-factory.js";
import { setting } from "../schema/settings/read.js";

/** Longest the templates may take (a pre-imported Python's under TCG takes tens of seconds). */
const DEADLINE_MS = 15 * 60_000;

const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));

/**
 * `scratchrun templates` (setup runs it): starts the microVM backend as the server would from the
 * same settings, waits until every pool it keeps from the start is full, so every template those
 * pools clone is built (or was already kept), and until the ones it built are saved in the
 * template store; then stops. The server's next start loads them: a runtime's first call clones
 * its template instead of waiting for a cold boot (decision 0003, "Kept across restarts").
 * Progress and the result on stderr; 0 also when there is nothing to keep (namespace backend,
 * SCRATCHRUN_TEMPLATE_CACHE=off).
 */
export async function runTemplates(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const say = (m: string) => process.stderr.write(`scratchrun templates: ${m}\n`);
  if (argv.length > 0) {
    say(`takes no arguments (got ${argv.join(" ")}); the server's settings choose what it builds`);
    return 2;
  }
  if ((setting("SCRATCHRUN_ISOLATION", env) ?? "microvm") !== "microvm") {
    say("the namespace backend keeps no snapshot templates: nothing to do");
    return 0;
  }
  let store;
  try {
    store = templateStoreFromEnv(env);
  } catch (e) {
    say(errText(e));
    return 2;
  }
  if (!store) {
    say("SCRATCHRUN_TEMPLATE_CACHE=off: templates are not kept, nothing to do");
    return 0;
  }
  const t0 = Date.now();
  let engine;
  try {
    // No network: a template has none (its clones get theirs when pooled or called).
    engine = await createEngineFromEnv({ ...env, SCRATCHRUN_NETWORK: "none" });
  } catch (e) {
    say(`the microVM backend cannot start here: ${errText(e)}`);
    return 1;
  }
  const backend = engine.backend;
  if (!(backend instanceof MicrovmBackend)) {
    await engine.close();
    say("the configured backend is not the microVM: nothing to do");
    return 0;
  }
  // One watch: progress as the pools change, and the first failed build, which ends the wait (the
  // server would retry it with a back-off for as long as it runs; setup goes on, and the server
  // makes that template when it needs it).
  let said = "";
  let watch: NodeJS.Timeout | undefined;
  const failed = new Promise<"failed">((resolve) => {
    watch = setInterval(() => {
      if (backend.templateError !== null) resolve("failed");
      const kinds = backend.pools().kinds.filter((k) => k.state !== "off");
      const waiting = kinds.filter((k) => k.state !== "full").map((k) => k.kind);
      const line = `${kinds.length - waiting.length} of ${kinds.length} pools ready (${waiting.join(", ")})`;
      if (line !== said) say(`${line}, ${((Date.now() - t0) / 1000).toFixed(0)} s`);
      said = line;
    }, 200);
  });
  try {
    const deadline = new Promise<"late">((r) => setTimeout(r, DEADLINE_MS, "late").unref());
    const ended = await Promise.race([backend.whenPoolsFull(), deadline, failed]);
    if (ended === "failed") {
      say(`a template could not be made: ${errText(backend.templateError)}`);
      return 1;
    }
    if (ended === "late") {
      say(`not every pool was ready after ${DEADLINE_MS / 60_000} minutes (no error recorded)`);
      return 1;
    }
    const kept = await backend.templatesKept();
    for (const t of kept)
      say(
        `${t.slot}: ${t.loaded ? "already kept" : `built in ${(t.buildMs / 1000).toFixed(1)} s`}`,
      );
    const files = await store.list();
    const mb = Math.round(files.reduce((n, f) => n + f.diskBytes, 0) / 1e6);
    say(
      `ready in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${kept.length} template${kept.length === 1 ? "" : "s"}; ${store.dir} holds ${files.length} (${mb} MB on disk)`,
    );
    return 0;
  } finally {
    clearInterval(watch);
    await engine.close();
  }
}
