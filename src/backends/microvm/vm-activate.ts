/**
 * Call activation: the step that turns a parked microVM (a cold-booted guest waiting in the
 * agent's seed step, or a paused clone) into the one serving a call. The guest gets its seed
 * (fresh entropy, the wall clock, its MAC and, for "public", its address; guest/agent-seed.c
 * applies it before the agent says READY), and the agent's READY is awaited on the channel.
 * vm.ts decides when (once per VM); this file speaks the seed port.
 */
import { randomBytes } from "node:crypto";
import type { Socket } from "node:net";
import { waitForReady } from "../../protocol/session.js";
import { encodeSeed, guestConfigOf, SEED_PORT, type VmNetwork } from "./guest-net.js";
import type { Qmp } from "./qmp.js";

export interface Activation {
  /** The seed port, with the guest blocked reading it. */
  seed: Socket;
  /** A paused clone's QMP, to resume it; null for a booted guest, which is already running. */
  resume: Qmp | null;
  /** The agent's byte stream; left paused just after its READY frame. */
  channel: Socket;
  /** Settles when QEMU exits. */
  exited: Promise<void>;
  mac: string;
  /** The network the guest is told about (null: none, nothing configured behind the NIC). */
  net: VmNetwork | null;
  timeoutMs: number;
}

/** Resumes a paused clone, seeds the guest and waits for the agent's READY. */
export async function activateCall(a: Activation): Promise<void> {
  if (a.resume) await a.resume.execute("cont");
  a.seed.write(
    Buffer.concat([
      Buffer.of(SEED_PORT.seed),
      encodeSeed({
        entropy: randomBytes(64),
        nowMs: Date.now(),
        mac: a.mac,
        net: a.net ? guestConfigOf(a.net) : null,
      }),
    ]),
  );
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), a.timeoutMs);
  try {
    const ready = await Promise.race([
      waitForReady(a.channel, abort.signal),
      a.exited.then(() => ({ ok: false as const, failure: { detail: "QEMU exited" } })),
    ]);
    if (!ready.ok) throw new Error(`the guest did not become ready: ${ready.failure.detail}`);
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
}

/** Resolves when `byte` arrives on the seed port (anything else is a protocol error). */
export function readByte(s: Socket, byte: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const onData = (b: Buffer) => {
      s.removeListener("data", onData);
      s.pause();
      if (b.length === 1 && b[0] === byte) resolve();
      else reject(new Error("unexpected bytes on the seed port"));
    };
    s.on("data", onData);
    s.once("error", reject);
    s.once("close", () => reject(new Error("seed port closed")));
  });
}
