// A worker's front door on its own (no sandbox is started: every request here is answered before
// the engine is asked for anything): its refusals are the API's, a too-large body 413 included.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Engine } from "../../src/engine/engine.js";
import { createLogger } from "../../src/http/log.js";
import { hostCeiling } from "../../src/policy/host.js";
import { WORKER_PATHS } from "../../src/cluster/protocol.js";
import { startWorkerServer, type WorkerServer } from "../../src/cluster/worker-server.js";

const TOKEN = "worker-http-test-token-0123456789";
const CAP = 1024;

/** What starting a worker touches of its engine; a request that reaches more fails the test. */
const engine = {
  ceiling: hostCeiling(),
  onSessionEnd: () => () => {},
  backend: { isolation: "namespace" },
} as unknown as Engine;

describe("a worker's refusals are the API's", () => {
  let worker: WorkerServer;
  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${worker.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", ...headers },
      body,
    });

  before(async () => {
    worker = await startWorkerServer({
      engine,
      token: TOKEN,
      logger: createLogger("silent"),
      host: "127.0.0.1",
      port: 0,
      bodyCapBytes: CAP,
    });
  });
  after(() => worker.close());

  test("a body over the cap is 413 PAYLOAD_TOO_LARGE on a closing connection, exec and sessions alike", async () => {
    for (const path of [WORKER_PATHS.exec, WORKER_PATHS.sessions, WORKER_PATHS.sessionEnd]) {
      const res = await post(path, JSON.stringify({ pad: "x".repeat(CAP) }));
      assert.equal(res.status, 413, path);
      assert.equal(res.headers.get("connection"), "close", path);
      assert.equal(
        ((await res.json()) as { error: { code: string } }).error.code,
        "PAYLOAD_TOO_LARGE",
      );
    }
  });

  test("a body that is not JSON is 415 UNSUPPORTED_MEDIA_TYPE; malformed JSON is 400", async () => {
    const media = await post(WORKER_PATHS.exec, "{}", { "content-type": "text/plain" });
    assert.equal(media.status, 415);
    assert.equal(
      ((await media.json()) as { error: { code: string } }).error.code,
      "UNSUPPORTED_MEDIA_TYPE",
    );
    const bad = await post(WORKER_PATHS.exec, "{nope");
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: { code: string } }).error.code, "INVALID_INPUT");
  });

  test("no token is 401 and an unknown path 404, before any body is read", async () => {
    const anon = await fetch(`${worker.url}${WORKER_PATHS.exec}`, { method: "POST", body: "{}" });
    assert.equal(anon.status, 401);
    assert.equal((await fetch(`${worker.url}/v1/worker/nope`)).status, 404);
  });
});
