/**
 * A snapshot template's guest RAM: a memfd held by the small sealed-ram helper. The template QEMU
 * maps it shared and boots into it; then it is sealed (no write(), no shared writable mapping,
 * no resize) and every clone maps it private, copy on write. Nothing on a filesystem, so nothing
 * a jailed QEMU could replace or write.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync, constants as fsc } from "node:fs";
import { createInterface, type Interface } from "node:readline";

export class SealedRam {
  private roFd: number | null = null;
  private closed = false;

  private constructor(
    private readonly helper: ChildProcess,
    private readonly rl: Interface,
    private readonly lines: AsyncIterator<string>,
    private readonly memfd: number,
  ) {}

  /** Starts the helper holding a fresh `bytes`-sized memfd. */
  static async create(helperPath: string, bytes: number): Promise<SealedRam> {
    const helper = spawn(helperPath, [String(bytes)], { stdio: ["pipe", "pipe", "ignore"] });
    helper.on("error", () => {});
    const rl = createInterface({ input: helper.stdout! });
    const lines = rl[Symbol.asyncIterator]();
    const first = await lines.next();
    const m = /^ready (\d+)$/.exec(first.done ? "" : first.value);
    if (!m?.[1]) {
      helper.kill("SIGKILL");
      throw new Error(`sealed-ram helper failed: ${first.done ? "no output" : first.value}`);
    }
    return new SealedRam(helper, rl, lines, Number(m[1]));
  }

  private path(): string {
    return `/proc/${this.helper.pid}/fd/${this.memfd}`;
  }

  /**
   * A read-write fd of the memfd, before seal(): for the template QEMU (closed once it has
   * started), or for a kept template's copy (template-store.ts). The caller closes it.
   */
  openForTemplate(): number {
    return openSync(this.path(), fsc.O_RDWR);
  }

  /** Seals the memfd against any further change, then lets the helper exit. */
  async seal(): Promise<void> {
    this.helper.stdin!.write("seal\n");
    const r = await this.lines.next();
    if (r.done || r.value !== "sealed")
      throw new Error(`sealing the template RAM failed: ${r.done ? "helper exited" : r.value}`);
    this.roFd = openSync(this.path(), fsc.O_RDONLY);
    this.helper.stdin!.end();
    this.rl.close();
  }

  /** The sealed memfd (read-only description) that clones inherit; null before seal(). */
  get fd(): number | null {
    return this.roFd;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.rl.close();
    if (this.helper.exitCode === null) this.helper.kill("SIGKILL");
    if (this.roFd !== null) closeSync(this.roFd);
  }
}
