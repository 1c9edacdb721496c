import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";

/** An ordinary user of this machine, made by the test with useradd and removed after. */
export interface TestUser {
  name: string;
  uid: number;
  gid: number;
  remove(): void;
}

/**
 * useradd: a system user with no home and no shell, in `groups` (e.g. ["scratchrun"]) besides its
 * own. Names start with `sr-` and a random tail, so a run never meets a user it did not make.
 */
export function makeUser(tag: string, groups: string[] = []): TestUser {
  const name = `sr-${tag}-${randomBytes(3).toString("hex")}`.slice(0, 32);
  const made = spawnSync("useradd", [
    "--system",
    "--no-create-home",
    "--shell",
    "/bin/false",
    ...(groups.length ? ["--groups", groups.join(",")] : []),
    name,
  ]);
  assert.equal(made.status, 0, made.stderr.toString());
  const id = (flag: string) => Number(spawnSync("id", [flag, name]).stdout.toString().trim());
  const uid = id("-u");
  const gid = id("-g");
  assert.ok(uid > 0 && gid > 0, `${name} has a uid and a gid`);
  return { name, uid, gid, remove: () => void spawnSync("userdel", [name]) };
}

/**
 * The argv that runs `command` as `user` with the groups /etc/group gives it (a login's view:
 * what `setpriv --init-groups` reads, which is what a user who logged in again has).
 */
export function asUserArgv(user: TestUser, command: string, args: string[]): string[] {
  return [
    "setpriv",
    `--reuid=${user.uid}`,
    `--regid=${user.gid}`,
    "--init-groups",
    command,
    ...args,
  ];
}

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
  seconds: number;
}

/** Runs node with `args` as `user` (its groups from /etc/group), with exactly `env`. */
export function nodeAs(
  user: TestUser,
  args: string[],
  env: Record<string, string> = { PATH: "/usr/bin:/bin", HOME: "/nonexistent" },
  input = "",
): Promise<Ran> {
  const [command, ...rest] = asUserArgv(user, process.execPath, args);
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const child = spawn(command!, rest, { env, cwd: "/", stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("error", reject);
    child.on("close", (code) =>
      resolve({ code, stdout, stderr, seconds: Number(process.hrtime.bigint() - started) / 1e9 }),
    );
    child.stdin.end(input);
  });
}

/**
 * One HTTP request over the unix socket at `socket`, sent by a process of `user`: its status and
 * JSON body (null when the connection itself failed: `error` is the errno code then).
 */
export async function requestAs(
  user: TestUser,
  socket: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: unknown; error?: string }> {
  const script = `
const http = require("node:http");
const [socket, method, path, body, headers] = JSON.parse(process.argv[1]);
const payload = body === null ? undefined : Buffer.from(JSON.stringify(body));
const req = http.request({ socketPath: socket, method, path, headers: {
  ...(payload ? { "Content-Type": "application/json", "Content-Length": payload.length } : {}),
  ...headers } }, (res) => {
  let text = ""; res.on("data", (c) => (text += c)); res.on("end", () => {
    let parsed = null; try { parsed = JSON.parse(text); } catch {}
    process.stdout.write(JSON.stringify({ status: res.statusCode, body: parsed }));
  });
});
req.on("error", (e) => process.stdout.write(JSON.stringify({ status: 0, body: null, error: e.code })));
req.end(payload);`;
  const r = await nodeAs(user, [
    "-e",
    script,
    JSON.stringify([socket, method, path, body ?? null, headers]),
  ]);
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as { status: number; body: unknown; error?: string };
}
