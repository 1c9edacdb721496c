import { after, before } from "node:test";
import type { TestBackend } from "./backends.js";
import {
  assertNoLeaks,
  assertServerFdsBack,
  serverOwnFds,
  snapshot,
  type HostSnapshot,
} from "./leaks.js";
import { startServer, type McpHarness } from "./mcp-client.js";

export type SuiteServer = McpHarness & {
  /** The host's state before the server started: what every leak check compares with. */
  base(): HostSnapshot;
  /** Settles once the server is started and has made its first call. */
  started(): Promise<void>;
};

/**
 * The lifecycle every e2e suite shares, registered in the calling describe(): snapshot the host,
 * start the built server on `backend`, make one call so its fds settle; afterwards, check the
 * server's fds came back (namespace: a warm pool holds sockets of its own), stop it, and check
 * the host is as it was. Returns the harness, usable once the suite's tests run.
 * `sharedBase`: another backend's server runs beside this one, so the host is the caller's to
 * snapshot before both and check after both; this one neither snapshots nor checks it, and
 * `base()` is the caller's snapshot. Its hook then only begins the start, so the servers start
 * at once: the caller awaits `started()` of each in a hook of its own, registered after.
 */
export function serverForSuite(
  backend: TestBackend,
  env: Record<string, string> = {},
  options: { sharedBase?: () => HostSnapshot } = {},
): SuiteServer {
  let h: McpHarness | undefined;
  let base: HostSnapshot | undefined;
  let fds: string[] = [];
  let starting: Promise<void> | undefined;
  before(async () => {
    base = options.sharedBase ? options.sharedBase() : snapshot();
    starting = (async () => {
      h = await startServer({ SCRATCHRUN_ISOLATION: backend, ...env });
      await h.exec({ runtime: "bash", code: "true" });
      fds = serverOwnFds(h.serverPid());
    })();
    // A failed start is the caller's to see, through started(), not an unhandled rejection.
    starting.catch(() => {});
    if (!options.sharedBase) await starting;
  });
  after(async () => {
    if (!h || !base) return;
    const server = h;
    // A namespace server's jails hold the other ends of its pipes to them (its pools fill after
    // the baseline and keep an extra jail per kind during bursts): serverOwnFds sets those aside.
    // Closed whatever the fd check says: a server left running holds the test file open, and the
    // runner waits on it for good (CI's rehearsal of stop 60 hung so after a failed check).
    try {
      if (backend === "namespace")
        await assertServerFdsBack(() => serverOwnFds(server.serverPid()), fds);
    } finally {
      await server.close();
    }
    if (options.sharedBase) return;
    try {
      await assertNoLeaks(base);
    } catch (err) {
      // What the server said and how it ended: a leak after a clean exit is the server's bug; one
      // after the client's SIGKILL (a close slower than 4 s) is the close's.
      const tail = server.stderr().split("\n").slice(-40).join("\n");
      (err as Error).message +=
        `\nthe server exited ${server.closedAfterMs()} ms after the client's close; its stderr's end:\n${tail}`;
      throw err;
    }
  });
  const live = () => {
    if (!h) throw new Error("the suite's server is not started yet");
    return h;
  };
  return {
    get client() {
      return live().client;
    },
    call: (...args) => live().call(...args),
    exec: (args) => live().exec(args),
    stderr: () => live().stderr(),
    serverFds: () => live().serverFds(),
    serverChildren: () => live().serverChildren(),
    serverPid: () => live().serverPid(),
    close: () => live().close(),
    closedAfterMs: () => live().closedAfterMs(),
    base: () => {
      if (!base) throw new Error("the suite has not started");
      return base;
    },
    started: () => starting ?? Promise.reject(new Error("the suite has not started")),
  };
}
