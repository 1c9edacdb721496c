import { spawn } from "node:child_process";
import { IMAGE_ENV } from "../runtimes/in-image.js";

export interface Bind {
  /** Host path. */
  src: string;
  /** Path inside the rootfs. */
  dest: string;
  rw?: boolean;
}

export interface RootfsRunOptions {
  rootfs: string;
  argv: string[];
  /** Bind the rootfs read-write (build steps); read-only otherwise. */
  writable?: boolean;
  binds?: Bind[];
  /** Share the host network (only for a PyPI download at build time). */
  network?: boolean;
  env?: Record<string, string>;
  /** Working directory inside the rootfs (default: bwrap's, the caller's if it exists there). */
  cwd?: string;
  /** Stream the child's stderr lines here (progress) in addition to capturing them. */
  onStderr?: (chunk: string) => void;
}

export interface RootfsRunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * The bwrap command line that runs `argv` with `rootfs` as `/` in fresh namespaces. A build-time
 * tool, not the sandbox: it runs only our own interpreters to install and inspect the image.
 */
export function bwrapArgs(options: RootfsRunOptions): string[] {
  const args = [options.writable ? "--bind" : "--ro-bind", options.rootfs, "/"];
  args.push("--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-all");
  if (options.network) {
    args.push("--share-net", "--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf");
  }
  args.push("--die-with-parent", "--new-session", "--clearenv");
  for (const [k, v] of Object.entries({ ...IMAGE_ENV, ...options.env }))
    args.push("--setenv", k, v);
  for (const b of options.binds ?? []) args.push(b.rw ? "--bind" : "--ro-bind", b.src, b.dest);
  if (options.cwd) args.push("--chdir", options.cwd);
  args.push("--", ...options.argv);
  return args;
}

const MAX_CAPTURE = 4 * 1024 * 1024;

export function runInRootfs(options: RootfsRunOptions): Promise<RootfsRunResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn("bwrap", bwrapArgs(options), { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => {
      if (stdout.length < MAX_CAPTURE) stdout += s;
    });
    child.stderr.setEncoding("utf8").on("data", (s: string) => {
      if (stderr.length < MAX_CAPTURE) stderr += s;
      options.onStderr?.(s);
    });
    child.on("error", (e) =>
      reject(new Error(`cannot start bwrap (install bubblewrap): ${e.message}`)),
    );
    child.on("close", (code, signal) => resolvePromise({ code, signal, stdout, stderr }));
  });
}

/** Runs and returns stdout, or throws with the command and its stderr when it fails. */
export async function checkInRootfs(options: RootfsRunOptions): Promise<string> {
  const r = await runInRootfs(options);
  if (r.code !== 0)
    throw new Error(
      `in image ${options.rootfs}: '${options.argv.join(" ")}' failed (exit ${r.code ?? r.signal}):\n${r.stderr.trim()}`,
    );
  return r.stdout;
}
