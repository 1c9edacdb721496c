/**
 * The guest's network, as the host hands it over: what a network provider gives a VM (a tap in a
 * sandbox network namespace, src/net), a MAC per VM, and the seed message that carries both into
 * the guest after restore. Pure, except randomMac().
 *
 * Every VM has exactly one NIC (virtio-net-device), whatever its network mode, so a snapshot
 * template and all its clones have the same devices (docs/decisions/0003-microvm.md, "Guest
 * network"). What differs per VM is on the host (a tap in a netns with the egress filter, or a
 * hub port with nothing else on it) and in the seed message (MAC, address, gateway, resolv.conf).
 */
import { randomBytes } from "node:crypto";
import { isIPv4 } from "node:net";
import type { DomainAllowlist } from "../../net/allowlist.js";
import type { NetworkEgress } from "../types.js";

/** A "public" sandbox network whose guest side is a tap QEMU opens from inside `netnsPath`. */
export interface VmNetwork extends NetworkEgress {
  netnsPath: string;
  tapName: string;
  /** The guest's address, its prefix length and gateway (src/net: one /30 per sandbox). */
  sandboxV4: string;
  prefixV4: number;
  gatewayV4: string;
  /** Text of the guest's /etc/resolv.conf. */
  resolvConf: string;
  /** Removes link, rules and namespace name. Idempotent. */
  teardown(): Promise<void>;
}

/** Creates "public" networks for VMs: src/compose/network.ts adapts src/net to this. */
export interface VmNetworkProvider {
  /** The allowlist pooled VMs' networks are made for: the server's (null: unrestricted). */
  readonly defaultAllowlist: DomainAllowlist | null;
  /**
   * A fresh network `id` whose sandbox side is a persistent tap `name` that `uid` may open;
   * unrestricted, or (allowlist given) through the egress proxy.
   */
  createTap(
    id: string,
    tap: { name: string; uid: number },
    allowlist: DomainAllowlist | null,
  ): Promise<VmNetwork>;
}

/** What the guest configures on eth0 after the seed; null: link stays down, no address. */
export interface GuestNetConfig {
  address: string;
  prefixLength: number;
  gateway: string;
  resolvConf: string;
}

export const SEED_ENTROPY_BYTES = 64;
/** Fixed part of the seed message (see guest/agent-seed.c); resolv.conf text follows it. */
export const SEED_HEADER_BYTES = 90;
export const MAX_RESOLV_CONF_BYTES = 1024;

const MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;

/** A random unicast, locally administered MAC (x2:, x6:, xa:, xe:), lower-case. */
export function randomMac(bytes: Uint8Array = randomBytes(6)): string {
  if (bytes.length !== 6) throw new RangeError("a MAC is 6 bytes");
  const b = Uint8Array.from(bytes);
  b[0] = ((b[0] ?? 0) & 0xfc) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, "0")).join(":");
}

export function isLocalUnicastMac(mac: string): boolean {
  if (!MAC.test(mac)) return false;
  const first = parseInt(mac.slice(0, 2), 16);
  return (first & 0x03) === 0x02;
}

function ipv4Bytes(addr: string, what: string): number[] {
  if (!isIPv4(addr)) throw new TypeError(`${what}: not an IPv4 address: ${addr}`);
  return addr.split(".").map(Number);
}

/**
 * Bytes on the seed port (guest/agent-seed.c). The guest writes `waiting` whenever it waits there;
 * the host answers `warmUp` (a clone about to be pooled: run what a call runs, then wait again),
 * `rehearse` (the same, cheaper: for a clone made while calls run) or `seed` followed by the seed
 * message.
 */
export const SEED_PORT = {
  waiting: 0x57,
  warmUp: 0x54,
  rehearse: 0x52,
  /** Followed by one byte: the number of the template's warm-also interpreter to run. */
  warmAlso: 0x55,
  seed: 0x53,
} as const;

/**
 * The seed message guest/agent-seed.c reads after a restore (or a cold boot), big-endian:
 *   64 bytes host entropy | u64 wall clock ms | 6 bytes MAC | u8 mode (0 none, 1 public) |
 *   4 bytes IPv4 address | u8 prefix length | 4 bytes gateway | u16 n | n bytes resolv.conf
 * With mode none the address fields are zero and n is 0. Throws TypeError on malformed input.
 */
export function encodeSeed(opts: {
  entropy: Uint8Array;
  nowMs: number;
  mac: string;
  net: GuestNetConfig | null;
}): Buffer {
  if (opts.entropy.length !== SEED_ENTROPY_BYTES) throw new TypeError("seed entropy: 64 bytes");
  if (!Number.isSafeInteger(opts.nowMs) || opts.nowMs < 0) throw new TypeError("seed clock");
  if (!isLocalUnicastMac(opts.mac)) throw new TypeError(`not a local unicast MAC: ${opts.mac}`);
  const resolv = Buffer.from(opts.net?.resolvConf ?? "", "utf8");
  if (resolv.length > MAX_RESOLV_CONF_BYTES) throw new TypeError("resolv.conf too long");
  if (resolv.includes(0)) throw new TypeError("resolv.conf contains NUL");
  const msg = Buffer.alloc(SEED_HEADER_BYTES + resolv.length);
  Buffer.from(opts.entropy).copy(msg, 0);
  msg.writeBigUInt64BE(BigInt(opts.nowMs), 64);
  Buffer.from(opts.mac.split(":").map((h) => parseInt(h, 16))).copy(msg, 72);
  if (opts.net) {
    const { prefixLength } = opts.net;
    if (!Number.isInteger(prefixLength) || prefixLength < 1 || prefixLength > 30)
      throw new TypeError(`prefix length ${prefixLength}`);
    msg[78] = 1;
    Buffer.from(ipv4Bytes(opts.net.address, "address")).copy(msg, 79);
    msg[83] = prefixLength;
    Buffer.from(ipv4Bytes(opts.net.gateway, "gateway")).copy(msg, 84);
  }
  msg.writeUInt16BE(resolv.length, 88);
  resolv.copy(msg, SEED_HEADER_BYTES);
  return msg;
}

/** The guest-side view of a VM network, for the seed message. */
export function guestConfigOf(net: VmNetwork): GuestNetConfig {
  return {
    address: net.sandboxV4,
    prefixLength: net.prefixV4,
    gateway: net.gatewayV4,
    resolvConf: net.resolvConf,
  };
}
