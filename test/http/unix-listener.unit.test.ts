// The local socket's two decisions, pure (decision 0018): which directory may hold it, and what
// to do with what is already at its path. The live side (real sockets, real users) is
// test/http/local-socket.test.ts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { planSocketPath, socketDirProblem } from "../../src/http/unix-listener.js";

const DIR = 0o040000;
const FILE = 0o100000;
const LINK = 0o120000;

describe("socketDirProblem: only a directory root alone may write holds the socket", () => {
  test("root's 0755, 0711 and 0700 directories are fine (0700 is opened to 0711 by the listener)", () => {
    for (const mode of [0o755, 0o711, 0o700, 0o750, 0o1755])
      assert.equal(socketDirProblem("/run/scratchrun", { uid: 0, mode: DIR | mode }), null);
  });

  test("another user's directory is refused, whatever its mode: they could swap the socket", () => {
    for (const uid of [1, 1000, 65534, 4294967294])
      assert.match(
        socketDirProblem("/run/x", { uid, mode: DIR | 0o755 }) ?? "",
        new RegExp(`belongs to uid ${uid}`),
      );
  });

  test("a directory its group or everyone may write is refused (a sticky /tmp too)", () => {
    for (const mode of [0o775, 0o757, 0o777, 0o1777, 0o770, 0o722, 0o702])
      assert.match(
        socketDirProblem("/tmp", { uid: 0, mode: DIR | mode }) ?? "",
        /writable by others/,
        mode.toString(8),
      );
  });

  test("something that is not a directory (a file, a symlink) is refused", () => {
    assert.match(socketDirProblem("/x", { uid: 0, mode: FILE | 0o755 }) ?? "", /not a directory/);
    assert.match(socketDirProblem("/x", { uid: 0, mode: LINK | 0o777 }) ?? "", /not a directory/);
  });
});

describe("planSocketPath: a stale socket goes, a live one and anything else stay", () => {
  test("nothing there: listen", () => assert.equal(planSocketPath("none", false), "free"));
  test("a socket nobody answers on (a service killed with -9): remove it", () =>
    assert.equal(planSocketPath("socket", false), "stale"));
  test("a socket that answers: another service; never taken over", () =>
    assert.equal(planSocketPath("socket", true), "busy"));
  test("a file, a directory or a symlink: not ours to remove, answered or not", () => {
    assert.equal(planSocketPath("other", false), "foreign");
    assert.equal(planSocketPath("other", true), "foreign");
  });
});
