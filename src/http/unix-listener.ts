/**
 * The local service's listener (decision 0018): a unix socket that one group may open, root's
 * and that group's, mode 0660, in a directory only root may write, as dockerd's and libvirtd's
 * are. Who connected is the kernel's answer (peer-cred.ts), so the socket's permissions decide
 * who may ask at all, and the directory's decide that nobody else can put a socket of their own
 * in its place.
 */
import { chmodSync, chownSync, lstatSync, mkdirSync, unlinkSync } from "node:fs";
import { connect, type Server } from "node:net";
import { dirname } from "node:path";

export interface UnixSocketSpec {
  path: string;
  /** The group that may connect (the socket is root:gid, 0660). */
  gid: number;
}

export const SOCKET_MODE = 0o660;

/** What a directory must be to hold the socket (pure): root's, writable by root alone. */
export function socketDirProblem(dir: string, st: { uid: number; mode: number }): string | null {
  if ((st.mode & 0o170000) !== 0o040000) return `${dir} is not a directory`;
  if (st.uid !== 0) return `${dir} belongs to uid ${st.uid}, not root`;
  if ((st.mode & 0o022) !== 0)
    return `${dir} is writable by others (mode ${(st.mode & 0o7777).toString(8)})`;
  return null;
}

/**
 * What to do with the socket's path before listening (pure): nothing there, a socket that no
 * process answers (a service killed outright left it: remove it), one that answers (another
 * service: refuse), or something that is not a socket (refuse; it is not ours to remove).
 */
export type PathPlan = "free" | "stale" | "busy" | "foreign";
export function planSocketPath(at: "none" | "socket" | "other", answers: boolean): PathPlan {
  if (at === "none") return "free";
  if (at === "other") return "foreign";
  return answers ? "busy" : "stale";
}

/** Whether a process accepts connections on the socket at `path` (within 2 s). */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(path);
    const done = (v: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(true), 2000);
    s.once("connect", () => done(true));
    s.once("error", () => done(false));
  });
}

/**
 * Readies `path` for a listener, or throws saying why not: makes its directory (0755) if
 * missing, lets everyone through the directory (it may be 0700), refuses one another user could
 * write, removes a stale socket and refuses a live one or anything that is not a socket. The
 * local service calls it before it starts its engine, so a second start stops before it makes
 * a sandbox, and `listenUnix` again right before it binds.
 */
export async function prepareSocketPath(path: string): Promise<void> {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const st = lstatSync(dir);
  const problem = socketDirProblem(dir, st);
  if (problem) throw new Error(`cannot listen in ${dir}: ${problem}`);
  if ((st.mode & 0o011) !== 0o011) chmodSync(dir, (st.mode & 0o7777) | 0o011);

  let at: "none" | "socket" | "other" = "none";
  try {
    at = lstatSync(path).isSocket() ? "socket" : "other";
  } catch {
    at = "none";
  }
  const plan = planSocketPath(at, at === "socket" && (await answers(path)));
  if (plan === "busy")
    throw new Error(`a service already answers at ${path}; stop it first, or pick --socket`);
  if (plan === "foreign")
    throw new Error(`${path} exists and is not a socket; remove it if nothing uses it`);
  if (plan === "stale") unlinkSync(path);
}

/**
 * Listens on `spec.path` (readied by prepareSocketPath), binding with a umask that leaves the
 * socket root's alone until it is given to the group at 0660.
 */
export async function listenUnix(server: Server, spec: UnixSocketSpec): Promise<void> {
  await prepareSocketPath(spec.path);

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    const umask = process.umask(0o177);
    try {
      server.listen(spec.path, () => {
        server.off("error", reject);
        resolve();
      });
    } finally {
      process.umask(umask);
    }
  });
  chownSync(spec.path, 0, spec.gid);
  chmodSync(spec.path, SOCKET_MODE);
}
