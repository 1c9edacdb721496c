import { after, before } from "node:test";
import type { TestBackend } from "./backends.js";
import { assertNoLeaks, assertServerFdsBack, snapshot, type HostSnapshot } from "./leaks.js";
import { startServer, type McpHarness } from "./mcp-client.js";

/** fds a namespace server holds per jail it runs (the agent's stdio pipes; as in suite.ts). */
const JAIL_FDS = 3;

interface Served {
  h: McpHarness;
  fds: number;
  jails: number;
}

export type SideBySideServer = Pick<McpHarness, "client" | "call" | "exec" | "stderr">;

/**
 * serverForSuite's lifecycle for a file whose backends' suites run side by side (an outer
 * describe with concurrency true around one describe per backend): registered at the file's top
 * level, it snapshots the host before any server starts and, after every suite (the sequential
 * ones after them too), checks each namespace server's fds, stops every server and checks the
 * host once for leaks. `start(backend)` goes in the backend's suite's before(): it starts that
 * backend's server and makes one call so its fds settle. Host-wide checks must not run inside a
 * suite while the other backend's runs.
 */
export function serversSideBySide(env: Record<string, string> = {}) {
  const served = new Map<TestBackend, Served>();
  let base: HostSnapshot;
  before(() => {
    base = snapshot();
  });
  after(async () => {
    const ends = await Promise.allSettled(
      [...served].map(async ([backend, { h, fds, jails }]) => {
        // Closed whatever the fd check says: a server left running holds the test file open.
        try {
          if (backend === "namespace")
            await assertServerFdsBack(
              () => h.serverFds() - JAIL_FDS * (h.serverChildren() - jails),
              fds,
            );
        } finally {
          await h.close();
        }
      }),
    );
    try {
      await assertNoLeaks(base);
    } catch (err) {
      for (const [backend, { h }] of served)
        (err as Error).message +=
          `\nthe ${backend} server exited ${h.closedAfterMs()} ms after the client's close; its stderr's end:\n` +
          h.stderr().split("\n").slice(-40).join("\n");
      throw err;
    }
    for (const end of ends) if (end.status === "rejected") throw end.reason;
  });
  const live = (backend: TestBackend) => {
    const s = served.get(backend);
    if (!s) throw new Error(`the ${backend} server is not started yet`);
    return s.h;
  };
  return {
    /** Starts the backend's server: call it in that backend's suite's before(). */
    async start(backend: TestBackend): Promise<void> {
      const h = await startServer({ SCRATCHRUN_ISOLATION: backend, ...env });
      // Stopped in after() even if its first call fails (its fds then never counted).
      served.set(backend, { h, fds: Infinity, jails: 0 });
      await h.exec({ runtime: "bash", code: "true" });
      served.set(backend, { h, fds: h.serverFds(), jails: h.serverChildren() });
    },
    /** The backend's server, usable once started. */
    server(backend: TestBackend): SideBySideServer {
      return {
        get client() {
          return live(backend).client;
        },
        call: (...args) => live(backend).call(...args),
        exec: (args) => live(backend).exec(args),
        stderr: () => live(backend).stderr(),
      };
    },
  };
}
