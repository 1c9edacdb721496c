import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type {
  Backend,
  BackendOutcome,
  SandboxJob,
  SessionSandbox,
} from "../../src/backends/types.js";
import { Engine } from "../../src/engine/engine.js";
import { isScratchRunError } from "../../src/errors.js";
import type { AgentRequest } from "../../src/protocol/types.js";
import type { SandboxPath } from "../../src/schema/exec.js";
import { parseExecRequest, requestToWire } from "../../src/schema/validate.js";

/**
 * The parse returns a request in its final form (issue 54): bytes decoded, the caller's named
 * fields recorded, the secrets' request rules applied, all of it on the object itself, so a copy
 * keeps it.
 */

const ok = (runtime = "bash"): BackendOutcome => ({
  agent: {
    exit: {
      reason: "exited",
      value: 0,
      stdoutTruncated: false,
      stderrTruncated: false,
      durationMs: 1,
      oomKills: 0,
      message: "",
    },
    stdout: new TextEncoder().encode(runtime),
    stderr: new Uint8Array(),
    shown: [],
    files: [],
    failure: null,
    startedAfterMs: 1,
    pid: 2,
  },
  isolation: "namespace",
  oomKilled: false,
  sandboxReadyMs: 0,
});

/** A backend whose sandboxes answer at once, recording what each session call was asked to run. */
class AnsweringBackend implements Backend {
  readonly name = "namespace" as const;
  readonly isolation = "namespace" as const;
  readonly codeIds = null;
  readonly sessionCalls: AgentRequest[] = [];
  async run(_job: SandboxJob): Promise<BackendOutcome> {
    return ok();
  }
  async openSession(): Promise<SessionSandbox> {
    return {
      broken: false,
      run: async (request) => {
        this.sessionCalls.push(request);
        return ok();
      },
      close: async () => {},
    };
  }
  onSandboxReady(): () => void {
    return () => {};
  }
  pooled() {
    return { ready: 0, target: 0 };
  }
  pools() {
    return { kinds: [], fullAfterMs: null };
  }
  async whenPoolsFull() {
    return null;
  }
  async close(): Promise<void> {}
}

const BINARY = Buffer.from([0, 0xff, 0x80, 10]);

describe("a parsed request is final: nothing about it lives beside it", () => {
  it("files are the decoded bytes, and the fields the caller named are on the request", () => {
    const req = parseExecRequest({
      runtime: "bash",
      code: ":",
      memory_mb: 256,
      files: { "a.bin": { base64: BINARY.toString("base64") }, "t.txt": "héllo" },
    });
    assert.deepEqual(req.files["/home/user/a.bin" as SandboxPath], BINARY);
    assert.deepEqual(req.files["/home/user/t.txt" as SandboxPath], Buffer.from("héllo"));
    assert.deepEqual([...req.named].sort(), ["code", "files", "memory_mb", "runtime"]);
    // A copy is the same request: the bytes and the named fields travel with it.
    const copy = { ...req };
    assert.deepEqual(copy.named, req.named);
    assert.equal(copy.files, req.files);
  });

  it("requestToWire gives input that parses back into the same request, bytes exact", () => {
    const req = parseExecRequest({
      runtime: "bash",
      code: ":",
      files: { "a.bin": { base64: BINARY.toString("base64") }, "t.txt": "héllo" },
      inputs: [{ files: { "b.bin": { base64: BINARY.toString("base64") } } }, {}],
    });
    const wire = JSON.parse(JSON.stringify(requestToWire(req))) as Record<string, unknown>;
    assert.deepEqual((wire.files as Record<string, unknown>)["/home/user/t.txt"], "héllo");
    assert.ok(!("named" in wire), "named is the parse's record, not input");
    const again = parseExecRequest(wire);
    assert.deepEqual(again.files, req.files);
    assert.deepEqual(again.inputs, req.inputs);
    assert.equal(again.memory_mb, req.memory_mb);
  });

  it("a session call's wire form names memory_mb and network only where its caller did", () => {
    const id = "A".repeat(22);
    const bare = requestToWire({
      ...parseExecRequest({ runtime: "bash", code: ":", session_id: id }),
    });
    assert.ok(!("memory_mb" in bare) && !("network" in bare), JSON.stringify(bare));
    const asked = requestToWire(
      parseExecRequest({ runtime: "bash", code: ":", session_id: id, memory_mb: 384 }),
    );
    assert.equal(asked.memory_mb, 384);
    assert.ok(!("network" in asked));
  });

  it("a copy of a parsed session call keeps what the session rules need", async () => {
    const backend = new AnsweringBackend();
    // No network here: the session's is "none", while a call's default is "public".
    const engine = new Engine(backend, { publicNetworkAvailable: false });
    const session = await engine.startSession({ runtime: "bash", memory_mb: 256 });
    assert.equal(session.network, "none");
    const call = parseExecRequest({ runtime: "bash", code: ":", session_id: session.session_id });
    // Defaults it did not name (memory_mb 512, network "public") are not held against the
    // session, in a copy as in the original.
    const out = await engine.execute({ ...call });
    assert.equal(out.result.exit_reason, "ok");
    assert.equal(backend.sessionCalls.length, 1);
    const named = { ...parseExecRequest({ ...callInput(session.session_id), memory_mb: 384 }) };
    await assert.rejects(engine.execute(named), (e: unknown) => {
      assert.ok(isScratchRunError(e) && e.code === "INVALID_INPUT", String(e));
      assert.match(e.message, /memory_mb: the session's sandbox has 256 MB/);
      return true;
    });
    await engine.endAllSessions();
  });

  it("the secrets' request rules are the parse's: refused before any engine sees the call", () => {
    const secret = { value: "s3cret-token-value", hosts: ["api.test"] };
    const refused = (input: Record<string, unknown>, message: RegExp) =>
      assert.throws(
        () => parseExecRequest({ runtime: "bash", code: ":", secrets: { T: secret }, ...input }),
        (e: unknown) => {
          assert.ok(isScratchRunError(e) && e.code === "INVALID_INPUT", String(e));
          assert.match(e.message, message);
          return true;
        },
      );
    refused({ network: "none" }, /network: secrets need network "public"/);
    refused({ session_id: "A".repeat(22) }, /secrets: not in a session's call/);
    refused({ env: { T: "x" } }, /secrets: T is also in env\. give each name once/);
    refused({ env: { SSL_CERT_FILE: "/x" } }, /env SSL_CERT_FILE: a call with secrets sets it/);
    // An input's env laid over the call's is held to the same rules, named by its index.
    refused({ inputs: [{}, { env: { T: "x" } }] }, /inputs\[1\]\.env: T is also in env/);
    assert.equal(
      parseExecRequest({ runtime: "bash", code: ":", secrets: { T: secret } }).network,
      "public",
    );
  });
});

const callInput = (session_id: string) => ({ runtime: "bash", code: ":", session_id });
