/**
 * The snapshot commands a microVM's QMP socket takes: restore a clone from a template's device
 * state, warm a restored clone up before it is parked, and save a template's state. Each is one
 * step of MicroVm's life (vm.ts decides when; this file only speaks QMP and the seed port).
 * Templates and clones share guest RAM through a sealed memfd, so migration carries device
 * state only (`x-ignore-shared`): a few tens of KB (docs/decisions/0003-microvm.md).
 */
import { chownSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { SEED_PORT } from "./guest-net.js";
import { readByte } from "./vm-activate.js";
import type { Qmp } from "./qmp.js";

const MiB = 1024 * 1024;
/** The largest device state a template may send (it is a few tens of KB; QEMU is untrusted). */
const MAX_STATE_BYTES = 64 * MiB;
/** Where QEMU, inside its jail, finds the migration socket (the VM's directory is /run/vm). */
const STATE_URI = "unix:/run/vm/state.sock";

const IGNORE_SHARED = { capabilities: [{ capability: "x-ignore-shared", state: true }] };

/**
 * Clone: feeds the template's device state to QEMU's incoming migration over the state socket
 * (`connectState` opens it once QEMU listens); the VM stays paused.
 */
export async function restoreClone(
  qmp: Qmp,
  state: Buffer,
  connectState: () => Promise<Socket>,
): Promise<void> {
  await qmp.execute("migrate-set-capabilities", IGNORE_SHARED);
  await qmp.execute("migrate-incoming", { uri: STATE_URI });
  const s = await connectState();
  try {
    await new Promise<void>((resolve, reject) => {
      s.once("error", reject);
      s.end(state, () => resolve());
    });
    await waitStatus(qmp, (st) => st === "paused", "incoming migration");
  } finally {
    s.destroy();
  }
}

/**
 * A restored clone about to be pooled runs what a call will run and is paused again. Under TCG
 * each QEMU process translates guest code afresh: a clone's first call paid for translating the
 * kernel's, the agent's and the interpreter's paths; after this the call finds them translated.
 * "full": a second pre-started Python or node runs an empty call and exits, bash runs on
 * /dev/null, the agent writes and removes a file in the code directory; "rehearse": a Python only
 * runs the call's path in the kept interpreter, node and bash only the agent's own steps. `also`:
 * then each of these template warm-also interpreters runs on /dev/null (a shell's clone: those its
 * recent calls started). All of it before the seed: nothing of it is the call's
 * (docs/decisions/0003-microvm.md).
 */
export async function warmUpClone(
  qmp: Qmp,
  seed: Socket,
  kind: "full" | "rehearse",
  also: readonly number[] = [],
): Promise<void> {
  let waiting = readByte(seed, SEED_PORT.waiting);
  seed.resume();
  await qmp.execute("cont");
  seed.write(Buffer.of(kind === "full" ? SEED_PORT.warmUp : SEED_PORT.rehearse));
  await waiting;
  for (const n of also) {
    waiting = readByte(seed, SEED_PORT.waiting);
    seed.resume();
    seed.write(Buffer.of(SEED_PORT.warmAlso, n));
    await waiting;
  }
  await qmp.execute("stop");
  await waitStatus(qmp, (st) => st === "paused", "pausing after the warm-up");
}

/**
 * Template: stops the guest (blocked in the agent's seed step) and receives its device state on
 * a socket at `path`, which QEMU (as `owner`) connects to.
 */
export async function saveTemplateState(
  qmp: Qmp,
  path: string,
  owner: { uid: number; gid: number },
): Promise<Buffer> {
  const srv = createServer();
  await new Promise<void>((resolve, reject) => {
    srv.once("error", reject);
    srv.listen(path, () => resolve());
  });
  try {
    chownSync(path, owner.uid, owner.gid);
    const received = new Promise<Buffer>((resolve, reject) => {
      srv.once("connection", (c: Socket) => {
        const chunks: Buffer[] = [];
        let size = 0;
        c.on("data", (b: Buffer) => {
          size += b.length;
          if (size > MAX_STATE_BYTES) return reject(new Error("migration state too large"));
          chunks.push(b);
        });
        c.once("end", () => resolve(Buffer.concat(chunks)));
        c.once("error", reject);
      });
    });
    await qmp.execute("stop");
    await qmp.execute("migrate-set-capabilities", IGNORE_SHARED);
    await qmp.execute("migrate", { uri: STATE_URI });
    const state = await received;
    for (;;) {
      const r = (await qmp.execute("query-migrate")) as { status?: string };
      if (r.status === "completed") return state;
      if (r.status === "failed" || r.status === "cancelled")
        throw new Error(`template migration ${r.status}`);
      await sleep(5);
    }
  } finally {
    srv.close();
  }
}

/** Polls QEMU's run state until `ok` holds; a VM that crashed or shut down fails the wait. */
async function waitStatus(qmp: Qmp, ok: (s: string) => boolean, what: string): Promise<void> {
  for (;;) {
    const r = (await qmp.execute("query-status")) as { status?: string };
    if (r.status && ok(r.status)) return;
    if (r.status === "internal-error" || r.status === "shutdown")
      throw new Error(`${what}: VM status ${r.status}`);
    await sleep(5);
  }
}
