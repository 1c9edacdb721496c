/**
 * The agent's --seccomp PATH (guest/agent-seccomp.c): what a microVM guest uses instead of bwrap's
 * --seccomp. The real agent runs in a bubblewrap pid namespace as real root (as in a guest) with
 * the policy of src/jail/seccomp.ts rendered to a file; the code must run under the filter, the
 * agent must not (it sets the guest's clock and network, which the policy refuses).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { renderSeccompFilter } from "../../src/jail/seccomp.js";
import { killLeftovers, request, runJailed, sh, spawnJailedAgent } from "./agent-harness.js";

const FILTER_IN_JAIL = "/tmp/scratchrun-seccomp.bpf"; // bwrap mounts a fresh /tmp: room for it

/** As the code, in one python: its own and its parent's Seccomp mode, then three refused calls
 * made so that they succeed without the filter. */
const PROBE = [
  "import ctypes, os, socket, time",
  "libc = ctypes.CDLL(None, use_errno=True)",
  "mode = lambda pid: [l.split()[1] for l in open(f'/proc/{pid}/status') if l.startswith('Seccomp:')][0]",
  "print('code', mode('self'), 'agent', mode(os.getppid()))",
  "child = os.fork()",
  "if child == 0: time.sleep(30); os._exit(0)",
  "r = libc.syscall(101, 16, child, 0, 0)",
  "print('ptrace_attach_child', ctypes.get_errno() if r < 0 else 0)",
  "os.kill(child, 9); os.waitpid(child, 0)",
  "r = libc.syscall(135, 0x0040000)",
  "print('personality_no_aslr', ctypes.get_errno() if r < 0 else 0)",
  "try: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15); print('netlink_uevent', 0)",
  "except OSError as e: print('netlink_uevent', e.errno)",
].join("\n");

describe("agent: the code's seccomp filter (--seccomp)", () => {
  let dir: string;
  let filter: string;
  before(() => {
    dir = mkdtempSync("/var/tmp/sr-agent-seccomp-");
    filter = `${dir}/filter.bpf`;
    writeFileSync(filter, renderSeccompFilter());
  });
  after(() => {
    killLeftovers();
    rmSync(dir, { recursive: true, force: true });
  });
  const code = request(["/usr/bin/python3.11", "-c", PROBE], {
    uid: 65534,
    gid: 65534,
    env: { PATH: "/usr/bin:/bin" },
  });

  it("installs the program in the code's process only, after the drop to its uid", async () => {
    const r = await runJailed(code, {
      realRoot: true,
      extra: ["--ro-bind", filter, FILTER_IN_JAIL],
      agentArgs: ["--seccomp", FILTER_IN_JAIL],
    });
    assert.equal(r.failure, null, r.text.stderr);
    assert.equal(
      r.text.stdout,
      "code 2 agent 0\nptrace_attach_child 1\npersonality_no_aslr 1\nnetlink_uevent 93\n",
      r.text.stderr,
    );
  });

  it("control: without --seccomp the same calls succeed (the probe can tell)", async () => {
    const r = await runJailed(code, { realRoot: true });
    assert.equal(r.failure, null, r.text.stderr);
    assert.equal(
      r.text.stdout,
      "code 0 agent 0\nptrace_attach_child 0\npersonality_no_aslr 0\nnetlink_uevent 0\n",
    );
  });

  it("a missing or malformed program: the agent refuses to start instead of running unfiltered", async () => {
    writeFileSync(`${dir}/odd.bpf`, Buffer.alloc(13));
    for (const [path, why] of [
      ["/nonexistent/filter.bpf", /seccomp: open \/nonexistent\/filter\.bpf: No such file/],
      [FILTER_IN_JAIL, /seccomp: .* is 13 bytes, not whole instructions/],
    ] as const) {
      const { child, closed } = spawnJailedAgent({
        realRoot: true,
        extra: ["--ro-bind", `${dir}/odd.bpf`, FILTER_IN_JAIL],
        agentArgs: ["--seccomp", path],
      });
      let stderr = "";
      let stdout = "";
      child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
      child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
      child.stdin!.end();
      assert.equal(await closed, 2);
      assert.match(stderr, why);
      assert.equal(stdout, "", "no READY frame");
    }
  });

  it("the shell path works under the filter too (fork, exec, pipes)", async () => {
    const r = await runJailed(
      sh("echo a | tr a b; grep '^Seccomp:' /proc/self/status", { uid: 65534, gid: 65534 }),
      {
        realRoot: true,
        extra: ["--ro-bind", filter, FILTER_IN_JAIL],
        agentArgs: ["--seccomp", FILTER_IN_JAIL],
      },
    );
    assert.equal(r.failure, null);
    assert.equal(r.text.stdout, "b\nSeccomp:\t2\n");
  });
});
