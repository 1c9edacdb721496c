import assert from "node:assert/strict";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { jailReadableAgentDir, reachableByEveryone } from "../../src/compose/agent-dir.js";

// The namespace backend bind-mounts the agent's directory as the sandbox's unprivileged uid:
// under a private directory (npx's cache in /root) it must use a copy others can reach.
const tmp = mkdtempSync(join(tmpdir(), "scratchrun-agent-dir-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

function agentIn(dir: string, content: string): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "agent"), content, { mode: 0o755 });
  return dir;
}

describe("the agent's directory for jails", () => {
  chmodSync(tmp, 0o755);
  const cache = join(tmp, "cache");

  test("an agent every uid can reach is used where it is", () => {
    const open = agentIn(join(tmp, "open/build/guest"), "agent-v1");
    assert.equal(reachableByEveryone(open), true);
    assert.equal(jailReadableAgentDir(open, cache), open);
  });

  test("below a 0700 directory: a copy in the cache, 0755, same bytes, reused", () => {
    const priv = join(tmp, "private");
    const dir = agentIn(join(priv, "npx/build/guest"), "agent-v2");
    chmodSync(priv, 0o700);
    assert.equal(reachableByEveryone(dir), false);
    const staged = jailReadableAgentDir(dir, cache);
    assert.notEqual(staged, dir);
    assert.ok(staged.startsWith(cache));
    assert.equal(readFileSync(join(staged, "agent"), "utf8"), "agent-v2");
    assert.equal(statSync(join(staged, "agent")).mode & 0o777, 0o755);
    assert.equal(statSync(staged).mode & 0o777, 0o755);
    assert.equal(reachableByEveryone(staged), true);
    assert.equal(jailReadableAgentDir(dir, cache), staged, "the same build reuses its copy");
  });

  test("an agent others cannot read or run is copied too; a tampered copy is replaced", () => {
    const dir = agentIn(join(tmp, "closed"), "agent-v3");
    chmodSync(join(dir, "agent"), 0o700);
    assert.equal(reachableByEveryone(dir), false);
    const staged = jailReadableAgentDir(dir, cache);
    writeFileSync(join(staged, "agent"), "tampered");
    assert.equal(jailReadableAgentDir(dir, cache), staged);
    assert.equal(readFileSync(join(staged, "agent"), "utf8"), "agent-v3");
  });

  test("what jails use beside the agent is staged with it: the scripts, python/'s display modules", () => {
    const priv = join(tmp, "private3");
    const dir = agentIn(join(priv, "npx/build/guest"), "agent-v6");
    mkdirSync(join(dir, "python"));
    writeFileSync(join(dir, "prestart.py"), "pre", { mode: 0o444 });
    writeFileSync(join(dir, "python/scratchrun_mpl.py"), "backend", { mode: 0o444 });
    chmodSync(priv, 0o700);
    const staged = jailReadableAgentDir(dir, cache);
    assert.equal(readFileSync(join(staged, "prestart.py"), "utf8"), "pre");
    assert.equal(readFileSync(join(staged, "python/scratchrun_mpl.py"), "utf8"), "backend");
    assert.equal(statSync(join(staged, "python")).mode & 0o777, 0o755);
    assert.equal(statSync(join(staged, "python/scratchrun_mpl.py")).mode & 0o777, 0o444);
    // A module changed without a new agent is a new build too.
    chmodSync(priv, 0o755);
    chmodSync(join(dir, "python/scratchrun_mpl.py"), 0o644);
    writeFileSync(join(dir, "python/scratchrun_mpl.py"), "backend v2");
    chmodSync(priv, 0o700);
    const again = jailReadableAgentDir(dir, cache);
    assert.notEqual(again, staged);
    assert.equal(readFileSync(join(again, "python/scratchrun_mpl.py"), "utf8"), "backend v2");
  });

  test("a new build gets its own copy", () => {
    const priv = join(tmp, "private2");
    const dir = agentIn(join(priv, "g"), "agent-v4");
    chmodSync(priv, 0o700);
    const a = jailReadableAgentDir(dir, cache);
    writeFileSync(join(dir, "agent"), "agent-v5");
    const b = jailReadableAgentDir(dir, cache);
    assert.notEqual(a, b);
    assert.equal(readFileSync(join(b, "agent"), "utf8"), "agent-v5");
  });
});
