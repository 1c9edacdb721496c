// The local socket, live (decision 0018): real unix sockets, real users made with useradd, each
// connection's uid the kernel's (SO_PEERCRED through build/host/scratchrun-peercred.node), and
// the listener's permissions: root and the group scratchrun may open it, nobody else; a stale
// socket goes, a live one, a file or a symlink at the path stays, and a directory another user
// could write is refused. The adversary is an ordinary user's process: it says what it likes.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { ensureServiceGroup } from "../../src/cli/service-state.js";
import { loadPeerCredentials, peerOf, type Peer } from "../../src/http/peer-cred.js";
import { listenUnix, SOCKET_MODE } from "../../src/http/unix-listener.js";
import { makeUser, nodeAs, type TestUser } from "../helpers/users.js";

let dir: string;
let member: TestUser;
let stranger: TestUser;
let gid: number;

before(() => {
  loadPeerCredentials();
  gid = ensureServiceGroup();
  member = makeUser("peer-in", ["scratchrun"]);
  stranger = makeUser("peer-out");
  dir = mkdtempSync("/run/sr-peer-test-");
  chmodSync(dir, 0o755);
});

after(() => {
  member?.remove();
  stranger?.remove();
  rmSync(dir, { recursive: true, force: true });
});

/** A server on `path` that records who the kernel says each connection is, and what it sent. */
async function recorder(path: string) {
  const seen: { peer: Peer | string; sent: string }[] = [];
  const server = createServer((c: Socket) => {
    let peer: Peer | string;
    try {
      peer = peerOf(c);
    } catch (e) {
      peer = (e as Error).message;
    }
    let sent = "";
    c.on("data", (d: Buffer) => (sent += d.toString()));
    c.on("end", () => {
      seen.push({ peer, sent });
      c.end();
    });
  });
  await listenUnix(server, { path, gid });
  return { server, seen };
}

/** A process of `user` that connects, says `claim`, and prints its own pid. */
const connectAs = (user: TestUser, path: string, claim: string) =>
  nodeAs(user, [
    "-e",
    `const s = require("node:net").connect(process.argv[1]);
s.on("connect", () => { s.end(process.argv[2]); console.log(process.pid); });
s.on("error", (e) => { console.log(e.code); });
s.resume();`,
    path,
    claim,
  ]);

const closed = (server: Server) => new Promise((r) => server.close(r));

/** listenUnix must refuse `path`; a listener that binds anyway is closed (the file fails, never hangs). */
async function refused(path: string, message: RegExp): Promise<void> {
  const server = createServer();
  try {
    await assert.rejects(listenUnix(server, { path, gid }), message);
  } finally {
    if (server.listening) await closed(server);
  }
}

describe("peer credentials: the kernel's uid, whatever the client says", () => {
  test("root, a member and a second member: each connection is its own process's uid and pid", async () => {
    const other = makeUser("peer-in2", ["scratchrun"]);
    const path = join(dir, "who.sock");
    const { server, seen } = await recorder(path);
    try {
      // Each claims to be someone else, in every form a client could put it.
      const a = await connectAs(member, path, `uid:0\nAuthorization: Bearer srk_x\n${other.uid}`);
      const b = await connectAs(other, path, `uid:${member.uid} SO_PEERCRED=0`);
      const c = connect(path);
      await new Promise((r) => c.once("connect", r));
      c.end("uid:65534");
      await new Promise((r) => setTimeout(r, 100));
      for (let i = 0; i < 100 && seen.length < 3; i++) await new Promise((r) => setTimeout(r, 20));
      const byPid = new Map(seen.map((s) => [(s.peer as Peer).pid, s]));
      assert.deepEqual(byPid.get(Number(a.stdout.trim()))?.peer, {
        pid: Number(a.stdout.trim()),
        uid: member.uid,
        gid: member.gid,
      });
      assert.deepEqual(byPid.get(Number(b.stdout.trim()))?.peer, {
        pid: Number(b.stdout.trim()),
        uid: other.uid,
        gid: other.gid,
      });
      assert.equal((byPid.get(process.pid)?.peer as Peer).uid, 0);
      assert.equal(seen.length, 3);
    } finally {
      other.remove();
      await closed(server);
    }
  });

  test("the credentials are the connector's even after it exits (they were taken at connect)", async () => {
    const path = join(dir, "late.sock");
    const peers: (Peer | string)[] = [];
    const server = createServer((c) => {
      // Read only once the client is gone.
      setTimeout(() => {
        try {
          peers.push(peerOf(c));
        } catch (e) {
          peers.push((e as Error).message);
        }
        c.destroy();
      }, 500);
    });
    await listenUnix(server, { path, gid });
    try {
      const r = await connectAs(member, path, "bye");
      for (let i = 0; i < 100 && peers.length < 1; i++) await new Promise((t) => setTimeout(t, 20));
      assert.equal((peers[0] as Peer).uid, member.uid, String(peers[0]));
      assert.equal((peers[0] as Peer).pid, Number(r.stdout.trim()));
    } finally {
      await closed(server);
    }
  });

  test("no caller from a TCP connection, a closed one, or a made-up descriptor", async () => {
    const tcp = createServer();
    const got = new Promise<Socket>((r) => tcp.once("connection", r));
    await new Promise<void>((r) => tcp.listen(0, "127.0.0.1", r));
    const client = connect((tcp.address() as { port: number }).port, "127.0.0.1");
    const conn = await got;
    assert.throws(() => peerOf(conn), /not a unix socket/);
    conn.destroy();
    client.destroy();
    await new Promise((r) => conn.once("close", r));
    assert.throws(() => peerOf(conn), /no descriptor/);
    await closed(tcp);
    // A descriptor that is no socket (a file), and one that is not open.
    const file = openSync("/proc/self/stat", "r");
    try {
      for (const fd of [file, 987_654])
        assert.throws(() => peerOf({ _handle: { fd } } as unknown as Socket), /not a unix socket/);
    } finally {
      closeSync(file);
    }
    const bogus = { _handle: { fd: "3" } } as unknown as Socket;
    assert.throws(() => peerOf(bogus), /no descriptor/);
  });
});

describe("the listener: root and the group scratchrun may open it, nobody else", () => {
  test("root:scratchrun 0660, its directory opened to be passed through; a member connects, a stranger is refused", async () => {
    const closedDir = join(dir, "closed");
    mkdirSync(closedDir, { mode: 0o700 });
    const path = join(closedDir, "s.sock");
    const { server } = await recorder(path);
    try {
      const st = statSync(path);
      assert.ok(lstatSync(path).isSocket());
      assert.equal(st.mode & 0o7777, SOCKET_MODE);
      assert.equal(st.uid, 0);
      assert.equal(st.gid, gid);
      assert.equal(statSync(closedDir).mode & 0o7777, 0o711, "opened to 0711, not to listing");
      const inGroup = await connectAs(member, path, "hello");
      assert.match(inGroup.stdout.trim(), /^\d+$/, inGroup.stdout + inGroup.stderr);
      const outside = await connectAs(stranger, path, "hello");
      assert.equal(outside.stdout.trim(), "EACCES");
    } finally {
      await closed(server);
    }
    assert.equal(existsSync(path), false, "closing the listener removes the socket");
  });

  test("a stale socket (its listener killed with -9) is removed and the next listener starts", async () => {
    const path = join(dir, "stale.sock");
    const child = spawn(process.execPath, [
      "-e",
      `require("node:net").createServer().listen(process.argv[1], () => console.log("up"))`,
      path,
    ]);
    await new Promise<void>((r) => child.stdout.once("data", () => r()));
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    assert.ok(lstatSync(path).isSocket(), "the killed listener left its socket");
    const { server } = await recorder(path);
    try {
      const r = await connectAs(member, path, "x");
      assert.match(r.stdout.trim(), /^\d+$/);
    } finally {
      await closed(server);
    }
  });

  test("a live socket is never taken over: the second listener refuses, the first keeps answering", async () => {
    const path = join(dir, "live.sock");
    const { server, seen } = await recorder(path);
    try {
      await refused(path, /a service already answers at .*live\.sock/);
      await connectAs(member, path, "still");
      for (let i = 0; i < 100 && seen.length < 1; i++) await new Promise((r) => setTimeout(r, 20));
      assert.equal(seen.at(-1)?.sent, "still");
    } finally {
      await closed(server);
    }
  });

  test("a file or a symlink at the path is refused and left as it was", async () => {
    const file = join(dir, "file.sock");
    writeFileSync(file, "mine");
    await refused(file, /is not a socket/);
    assert.equal(readFileSync(file, "utf8"), "mine");
    const target = join(dir, "target");
    writeFileSync(target, "theirs");
    const link = join(dir, "link.sock");
    symlinkSync(target, link);
    await refused(link, /is not a socket/);
    assert.ok(lstatSync(link).isSymbolicLink());
    assert.equal(readFileSync(target, "utf8"), "theirs");
  });

  test("a directory another user owns or may write is refused: they could put their own socket there", async () => {
    const theirs = join(dir, "theirs");
    mkdirSync(theirs, { mode: 0o755 });
    chownSync(theirs, stranger.uid, stranger.gid);
    await refused(join(theirs, "s.sock"), new RegExp(`belongs to uid ${stranger.uid}`));
    const shared = join(dir, "shared");
    mkdirSync(shared);
    chmodSync(shared, 0o1777);
    await refused(join(shared, "s.sock"), /writable by others/);
    assert.equal(existsSync(join(shared, "s.sock")), false);
  });
});
