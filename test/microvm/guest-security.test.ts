import { skipOutsideCi } from "../helpers/ci.js";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { release as hostRelease } from "node:os";
import { after, before, describe, test } from "node:test";
import { findHostKernel } from "../../src/images/vm/build.js";
import { GUEST_UNAME_VERSION, guestRelease } from "../../src/images/vm/uname.js";
import { hostTscKhz } from "../../src/backends/microvm/accel.js";
import { createMicrovmBackend, type MicrovmBackend } from "../../src/backends/microvm/create.js";
import {
  canRunMicrovm,
  assertNoLeftovers,
  hostLeftovers,
  makeTinyRoot,
  shJob,
  text,
  type TinyRoot,
} from "./fixture.js";

const skip = skipOutsideCi(canRunMicrovm());
const signal = () => new AbortController().signal;

/** Parses `poke` output ("<what> ok" | "<what> <errno name>") into a map. */
function pokes(out: string): Record<string, string> {
  return Object.fromEntries(
    out
      .trim()
      .split("\n")
      .map((l) => l.split(" ") as [string, string]),
  );
}

// Security cases from inside the guest. One restore-mode backend for the file: the template is
// built once and every call runs in a fresh clone of it. `poke` (fixtures/poke.c) makes the
// attempts and prints the errno of each, so a refusal is visible as what it is (EPERM), not as
// an absence of effect.
describe("microvm guest security", { skip: skip ?? false, timeout: 300_000 }, () => {
  let root: TinyRoot;
  let backend: MicrovmBackend;
  let before0: Awaited<ReturnType<typeof hostLeftovers>>;

  before(async () => {
    root = makeTinyRoot({ programs: ["poke", "int80"] });
    before0 = await hostLeftovers();
    backend = await createMicrovmBackend({
      rootfsDir: root.rootfs,
      disk: root.disk,
      pool: { sizes: { bash: 1 }, mode: "restore" },
    });
    await backend.pool.whenFull();
  });
  after(async () => {
    await backend?.close();
    root.cleanup();
    await assertNoLeftovers(before0, "a VM or template left something behind");
  });

  const run = (code: string) => backend.run(shJob(code), { signal: signal() });

  test("SEC-VM-AGENT: the code (uid 1000) cannot signal, stop or ptrace the agent: EPERM", async () => {
    // $PPID of the code's shell is the agent (it forks and execs the code directly). The agent
    // keeps root; only the code's process dropped to uid 1000.
    const r = await run(
      "echo \"agent_uid $(awk '/^Uid/{print $2}' /proc/$PPID/status)\"; id -u; /bin/poke agent $PPID; echo alive",
    );
    assert.equal(r.agent.failure, null, "the call ended cleanly: the agent survived");
    assert.equal(r.agent.exit?.reason, "exited", JSON.stringify(r.agent.exit));
    const out = text(r.agent.stdout);
    const lines = out.trim().split("\n");
    assert.equal(lines[0], "agent_uid 0");
    assert.equal(lines[1], "1000");
    assert.equal(lines.at(-1), "alive");
    assert.deepEqual(pokes(lines.slice(2, -1).join("\n")), {
      signal0: "EPERM",
      sigstop: "EPERM",
      sigterm: "EPERM",
      sigkill: "EPERM",
      attach: "EPERM",
      seize: "EPERM",
      mem: "EACCES",
    });
  });

  test("SEC-VM-AGENT control: the same attempts on a process of the code's own uid succeed, but ptrace", async () => {
    // Proves poke can do what it tries, so the EPERMs above come from the agent's privileges.
    // ptrace is the exception: the code runs under the seccomp filter (guest/agent-seccomp.h),
    // which refuses it even on the code's own processes (before it, attach and seize were "ok").
    const r = await run(
      "grep '^Seccomp:' /proc/self/status; sleep 30 & /bin/poke agent $!; wait; echo waited",
    );
    const lines = text(r.agent.stdout).trim().split("\n");
    assert.equal(lines[0], "Seccomp:\t2");
    assert.deepEqual(pokes(lines.slice(1, -1).join("\n")), {
      signal0: "ok",
      sigstop: "ok",
      sigterm: "ok",
      sigkill: "ok",
      attach: "EPERM",
      seize: "EPERM",
      mem: "ok",
    });
  });

  test("request files are written and return files read as the code's uid, without groups", async () => {
    // The agent stays root but takes the code's filesystem identity: a root-only file (the
    // agent's own binary, 0500 root) is not returned, the request file belongs to uid 1000.
    const r = await backend.run(
      shJob("stat -c '%u:%g %a' /home/user/sub/in /home/user/sub; id -G", {
        files: [{ path: "/home/user/sub/in", mode: 0o600, content: Buffer.from("x") }],
        returnFiles: ["/run/scratchrun-agent", "/home/user/sub/in"],
      }),
      { signal: signal() },
    );
    assert.equal(r.agent.failure, null);
    assert.equal(text(r.agent.stdout), "1000:1000 600\n1000:1000 755\n1000\n");
    assert.deepEqual(
      r.agent.files.map((f) => [f.path, f.status]),
      [
        ["/run/scratchrun-agent", "error"],
        ["/home/user/sub/in", "ok"],
      ],
    );
  });

  test("SEC-VM-ASLR: user-space ASLR in the guest is on under KVM and off under TCG", async () => {
    // The trade-off is written in docs/SECURITY.md ("Guest ASLR under TCG"): 2 = full
    // randomisation (the kernel's default), 0 = none (the norandmaps boot parameter).
    const r = await run("cat /proc/sys/kernel/randomize_va_space");
    assert.equal(r.agent.failure, null);
    assert.equal(text(r.agent.stdout), backend.isolation === "microvm-kvm" ? "2\n" : "0\n");
  });

  test("SEC-VM-CLONES: clones of one template differ in boot id, getrandom() output and MAC", async () => {
    const code =
      "cat /proc/sys/kernel/random/boot_id; /bin/poke random -; cat /sys/class/net/eth0/address";
    const clonedBefore = backend.counters.clonedCalls;
    const results = await Promise.all([run(code), run(code), run(code)]);
    assert.equal(backend.counters.clonedCalls - clonedBefore, 3, "a call did not run in a clone");
    const seen = { boot: new Set<string>(), rnd: new Set<string>(), mac: new Set<string>() };
    for (const r of results) {
      assert.equal(r.agent.failure, null);
      const [boot, rnd, mac] = text(r.agent.stdout).trim().split("\n");
      assert.match(boot ?? "", /^[0-9a-f-]{36}$/);
      assert.match(rnd ?? "", /^[0-9a-f]{64}$/);
      assert.match(mac ?? "", /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
      // Locally administered unicast: never a vendor's address, never multicast.
      assert.equal(parseInt(mac!.slice(0, 2), 16) & 0x03, 0x02, mac);
      seen.boot.add(boot!);
      seen.rnd.add(rnd!);
      seen.mac.add(mac!);
    }
    assert.equal(seen.boot.size, 3, "two clones share a boot id");
    assert.equal(seen.rnd.size, 3, "two clones produced the same getrandom() bytes");
    assert.equal(seen.mac.size, 3, "two clones share a MAC");
  });

  test("SEC-VM-DEVICES (H22): the virtio-serial ports and the root disk are not in the code's /dev; the agent's copies are behind a root-only directory", async () => {
    // The agent's channel and the seed port are the host's control paths; /dev/vda is the
    // runtime disk under the overlay. The code's /dev is bwrap's minimal set (guest/init), so
    // neither is there (ENOENT), and the agent's port nodes sit in /run/scratchrun-private (0700
    // root): EACCES for uid 1000, before any device node's own mode is reached.
    const r = await run(
      'for p in /sys/class/virtio-ports/*; do n=${p##*/}; echo "port $(cat $p/name)"; ' +
        "/bin/poke open /dev/$n; /bin/poke open /run/scratchrun-private/$n | sed 's/^/private /'; " +
        "done; " +
        "echo disk; /bin/poke open /dev/vda; /bin/poke open /dev/mem; /bin/poke open /dev/kmsg",
    );
    assert.equal(r.agent.failure, null);
    const out = text(r.agent.stdout);
    assert.match(out, /port scratchrun\.0\n/, "the agent's port was tried");
    assert.match(out, /port scratchrun\.seed\n/, "the seed port was tried");
    const attempts = out.split("\n").filter((l) => /^(private )?(read|write) /.test(l));
    assert.equal(attempts.length, 14, out);
    assert.equal(attempts.filter((a) => a.startsWith("private ")).length, 4, out);
    for (const a of attempts)
      assert.match(a, a.startsWith("private ") ? / EACCES$/ : / ENOENT$/, out);
  });

  test("SEC-VM-HOSTINFO (H21): uname names the guest kernel; the TSC frequency given is whole MHz", async () => {
    const kernel = findHostKernel();
    assert.ok(kernel, "the guest kernel is found");
    const r = await run(
      "uname -r; uname -v; cat /proc/sys/kernel/osrelease; cat /proc/version; cat /proc/cmdline",
    );
    assert.equal(r.agent.failure, null);
    const [rel, ver, osrelease, version, cmdline] = text(r.agent.stdout).trim().split("\n");
    const khz = Number(/(?:^| )tsc_early_khz=(\d+)(?: |$)/.exec(cmdline ?? "")?.[1]);
    // Neither the Debian build the guest boots (on a Debian host, often the host's own kernel)
    // nor the host's running kernel is named; the host's calibration is rounded away
    // (src/backends/microvm/accel.ts hostTscKhz). One comparison: a failure shows every part.
    // "Debian 6.1.192-3" is the kernel package; /proc/version also names the compiler Debian
    // built it with ("gcc-12 (Debian 12.2.0-14…)"), which says nothing of the kernel's version.
    const series = /^\d+\.\d+\./.exec(kernel.release)?.[0] ?? kernel.release;
    const names = (s = "") =>
      s.includes(kernel.release) || s.includes(hostRelease()) || s.includes(`Debian ${series}`);
    assert.deepEqual(
      {
        rel,
        ver,
        osrelease,
        version: version?.startsWith(`Linux version ${rel} `),
        namesABuild: [rel, ver, version].some((s) => names(s)),
        khz,
        wholeMhz: khz % 1000 === 0,
      },
      {
        rel: guestRelease(kernel.release),
        ver: GUEST_UNAME_VERSION,
        osrelease: guestRelease(kernel.release),
        version: true,
        namesABuild: false,
        khz: hostTscKhz(),
        wholeMhz: true,
      },
      `${version}\n${cmdline}`,
    );
  });

  test("SEC-VM-IA32: a 32-bit syscall (int 0x80) kills the code, on a guest kernel that has the i386 entry", async () => {
    // The control: the kernel the guest boots is built with IA32 emulation, on by default, so
    // without the filter's arch rule int 0x80 would return getpid's result ("after N"). This is
    // the live proof of that rule: a host kernel without the entry cannot give one
    // (test/jail/seccomp-live.test.ts).
    const kernel = findHostKernel();
    assert.ok(kernel, "the guest kernel is found");
    const config = readFileSync(`/boot/config-${kernel.release}`, "utf8");
    assert.match(config, /^CONFIG_IA32_EMULATION=y$/m);
    assert.doesNotMatch(config, /^CONFIG_IA32_EMULATION_DEFAULT_DISABLED=y$/m);
    const r = await run('uname -r; /bin/int80; echo "status $?"');
    assert.equal(r.agent.failure, null);
    const lines = text(r.agent.stdout).trim().split("\n");
    assert.equal(lines[0], guestRelease(kernel.release), "the guest runs that kernel");
    // SIGSYS (31): the filter's kill, before the kernel ran the call.
    assert.deepEqual(lines.slice(1), ["before", `status ${128 + 31}`]);
  });
});
