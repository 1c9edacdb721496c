/**
 * The package tests' npm registry: a child process (fixtures/npm-registry-server.ts) serving the
 * packed tarball as the package it names and passing every other request to the public registry.
 * `npm_config_registry` pointed at `url` makes `npx -y NAME …` install exactly what a user would
 * get once NAME is published, and never someone else's package of that name.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const SERVER = fileURLToPath(new URL("./fixtures/npm-registry-server.js", import.meta.url));

export class LocalRegistry {
  url = "";
  private child: ChildProcess | null = null;

  constructor(
    private readonly tarball: string,
    private readonly logFile: string,
  ) {}

  async start(): Promise<this> {
    writeFileSync(this.logFile, "");
    const child = spawn(process.execPath, [SERVER, this.tarball, this.logFile], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    this.child = child;
    this.url = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /^url (\S+)$/m.exec(out);
        if (m?.[1]) resolve(m[1]);
      });
      child.once("exit", (code) => reject(new Error(`the registry stand-in exited (${code})`)));
    });
    return this;
  }

  /** Every path asked for so far, in order. */
  asked(): string[] {
    return readFileSync(this.logFile, "utf8").split("\n").filter(Boolean);
  }

  /** Whether `name`'s packument and a tarball of it were fetched from here. */
  served(name: string): boolean {
    const asked = this.asked();
    return (
      asked.some((p) => decodeURIComponent(p) === `/${name}`) &&
      asked.some((p) => p.startsWith(`/${name}/-/`))
    );
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
  }
}
