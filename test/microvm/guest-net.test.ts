import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  encodeSeed,
  isLocalUnicastMac,
  randomMac,
  SEED_HEADER_BYTES,
} from "../../src/backends/microvm/guest-net.js";
import { renderJailArgs } from "../../src/backends/microvm/jail-args.js";
import {
  kernelCommandLine,
  nicArgs,
  renderQemuArgs,
  type QemuSpec,
} from "../../src/backends/microvm/qemu-args.js";

const entropy = Buffer.alloc(64, 0xab);
const net = {
  address: "10.250.0.6",
  prefixLength: 30,
  gateway: "10.250.0.5",
  resolvConf: "nameserver 198.51.100.53\n",
};

describe("seed message (guest/agent-seed.c reads it)", () => {
  test("layout: entropy, clock, MAC, mode, address, prefix, gateway, resolv.conf", () => {
    const m = encodeSeed({ entropy, nowMs: 0x0102030405, mac: "02:11:22:33:44:55", net });
    assert.equal(m.length, SEED_HEADER_BYTES + net.resolvConf.length);
    assert.deepEqual(m.subarray(0, 64), entropy);
    assert.deepEqual([...m.subarray(64, 72)], [0, 0, 0, 1, 2, 3, 4, 5]);
    assert.deepEqual([...m.subarray(72, 78)], [0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    assert.equal(m[78], 1);
    assert.deepEqual([...m.subarray(79, 83)], [10, 250, 0, 6]);
    assert.equal(m[83], 30);
    assert.deepEqual([...m.subarray(84, 88)], [10, 250, 0, 5]);
    assert.equal(m.readUInt16BE(88), net.resolvConf.length);
    assert.equal(m.subarray(90).toString(), net.resolvConf);
  });

  test("network none: mode 0, no address, no resolv.conf", () => {
    const m = encodeSeed({ entropy, nowMs: 1, mac: "06:00:00:00:00:01", net: null });
    assert.equal(m.length, SEED_HEADER_BYTES);
    assert.deepEqual([...m.subarray(78, 90)], new Array(12).fill(0));
  });

  test("refuses what the agent would refuse or misread", () => {
    const ok = { entropy, nowMs: 1, mac: "02:00:00:00:00:01", net };
    const bad: [string, Parameters<typeof encodeSeed>[0]][] = [
      ["short entropy", { ...ok, entropy: Buffer.alloc(63) }],
      ["negative clock", { ...ok, nowMs: -1 }],
      ["fractional clock", { ...ok, nowMs: 1.5 }],
      ["multicast MAC", { ...ok, mac: "03:00:00:00:00:01" }],
      ["global MAC", { ...ok, mac: "00:16:3e:00:00:01" }],
      ["upper-case MAC", { ...ok, mac: "02:AA:00:00:00:01" }],
      ["short MAC", { ...ok, mac: "02:00:00:00:01" }],
      ["IPv6 address", { ...ok, net: { ...net, address: "fd00::2" } }],
      ["shorthand address", { ...ok, net: { ...net, address: "10.250.6" } }],
      ["bad gateway", { ...ok, net: { ...net, gateway: "10.250.0.256" } }],
      ["prefix 0", { ...ok, net: { ...net, prefixLength: 0 } }],
      ["prefix 31", { ...ok, net: { ...net, prefixLength: 31 } }],
      ["huge resolv.conf", { ...ok, net: { ...net, resolvConf: "x".repeat(1025) } }],
      ["NUL in resolv.conf", { ...ok, net: { ...net, resolvConf: "nameserver 1.1.1.1\0" } }],
    ];
    for (const [what, opts] of bad) assert.throws(() => encodeSeed(opts), TypeError, what);
  });

  test("every random MAC is a locally administered unicast address; 1000 are distinct", () => {
    const seen = new Set<string>();
    for (let i = 0; i < 1000; i++) {
      const mac = randomMac();
      assert.ok(isLocalUnicastMac(mac), mac);
      seen.add(mac);
    }
    assert.equal(seen.size, 1000);
    assert.equal(randomMac(Buffer.from([0xff, 0, 0, 0, 0, 1])), "fe:00:00:00:00:01");
    assert.equal(randomMac(Buffer.from([0x01, 0, 0, 0, 0, 1])), "02:00:00:00:00:01");
  });
});

describe("the NIC and the jail around it", () => {
  const spec = (nic: QemuSpec["nic"]): QemuSpec => ({
    accel: "tcg",
    guestMb: 320,
    memoryMb: 256,
    tscKhz: null,
    scratchMb: 128,
    tcgCacheMb: 64,
    nic,
  });
  const jail = (net: "tap" | "none") =>
    renderJailArgs(
      { kernel: "/k", initramfs: "/i", disk: "/d", runDir: "/r", kvm: false, net, seccompFd: 4 },
      ["-x"],
    );

  test("a tap without vnet headers, or a hub port with nothing behind it; same device", () => {
    const tap = nicArgs({ mac: "02:00:00:00:00:01", backend: { kind: "tap", ifname: "tap0" } });
    const none = nicArgs({ mac: "02:00:00:00:00:01", backend: { kind: "none" } });
    assert.deepEqual(tap, [
      "-netdev",
      "tap,id=n0,ifname=tap0,script=no,downscript=no,vnet_hdr=off",
      "-device",
      "virtio-net-device,netdev=n0,mac=02:00:00:00:00:01",
    ]);
    assert.deepEqual(none.slice(0, 2), ["-netdev", "hubport,id=n0,hubid=0"]);
    assert.equal(tap[3], none[3], "templates and clones must have the same device");
  });

  test("nothing from a MAC or tap name can add a QEMU option", () => {
    for (const mac of ["02:00:00:00:00:01,romfile=/x", "02:00:00:00:00:0", ""])
      assert.throws(() => nicArgs({ mac, backend: { kind: "none" } }));
    for (const ifname of ["tap0,script=/bin/sh", "a".repeat(16), "", "tap 0"])
      assert.throws(() => nicArgs({ mac: "02:00:00:00:00:01", backend: { kind: "tap", ifname } }));
  });

  test("every VM has the NIC and the seed port, whatever its mode", () => {
    for (const s of [spec({ mac: "02:00:00:00:00:01", backend: { kind: "none" } })]) {
      const args = renderQemuArgs(s).join(" ");
      assert.match(args, /virtio-net-device,netdev=n0/);
      assert.match(args, /virtserialport,chardev=seed,name=scratchrun\.seed/);
    }
  });

  test("the guest kernel runs without user-space ASLR under TCG only (norandmaps)", () => {
    const s = spec({ mac: "02:00:00:00:00:01", backend: { kind: "none" } });
    const words = (accel: QemuSpec["accel"]) => kernelCommandLine({ ...s, accel }).split(" ");
    assert.ok(words("tcg").includes("norandmaps"));
    assert.ok(!words("kvm").includes("norandmaps"));
    assert.ok(renderQemuArgs(s).join(" ").includes(" norandmaps"));
  });

  test("a TCG guest trusts its TSC (tsc=reliable); a KVM guest keeps the kernel's choice", () => {
    const s = spec({ mac: "02:00:00:00:00:01", backend: { kind: "none" } });
    const words = (accel: QemuSpec["accel"]) => kernelCommandLine({ ...s, accel }).split(" ");
    assert.ok(words("tcg").includes("tsc=reliable"));
    assert.ok(!words("kvm").some((w) => w.startsWith("tsc=")));
  });

  test("only a tap VM keeps its network namespace and sees /dev/net/tun", () => {
    const t = jail("tap");
    const n = jail("none");
    assert.ok(t.includes("--share-net") && t.includes("/dev/net/tun"));
    assert.ok(!n.includes("--share-net") && !n.includes("/dev/net/tun"));
    assert.ok(n.includes("--unshare-all"));
  });
});
