import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import type { AgentRequest } from "../../src/protocol/types.js";
import { AGENT, hostPidsWith, killLeftovers, request, runJailed, sh } from "./agent-harness.js";

after(() => {
  killLeftovers();
  assert.deepEqual(hostPidsWith(AGENT), [], "a jailed agent outlived its test");
});

const text = (s: string) => Buffer.from(s);
const file = (path: string, content = "x", mode = 0o644) => ({
  path,
  mode,
  content: text(content),
});
/** An absolute path of exactly 4000 bytes (the agent's limit) made of 200-byte components. */
const path4000 = (() => {
  let p = "/tmp";
  for (let i = 0; i < 19; i++) p += `/${String(i).padEnd(199, "d")}`;
  return `${p}/${"f".repeat(4000 - p.length - 1)}`;
})();

describe("agent: request validation (setup_failed, nothing runs)", () => {
  const long = `/tmp/${"a".repeat(4000)}`;
  const cases: [string, Partial<AgentRequest>][] = [
    ["relative argv[0]", { argv: ["bin/sh"] }],
    ["argv[0] with ..", { argv: ["/bin/../bin/sh"] }],
    ["empty argv", { argv: [] }],
    ["NUL in an argument", { argv: ["/bin/echo", "a\0b"] }],
    ["relative cwd", { cwd: "tmp" }],
    ["cwd with an empty component", { cwd: "/tmp//x" }],
    ["relative file path", { files: [file("tmp/a")] }],
    ["file path with ..", { files: [file("/tmp/../etc/x")] }],
    ["file path with .", { files: [file("/tmp/./x")] }],
    ["file path with //", { files: [file("/tmp//x")] }],
    ["file path with a trailing /", { files: [file("/tmp/x/")] }],
    ["file path /", { files: [file("/")] }],
    ["file path with NUL", { files: [file("/tmp/a\0b")] }],
    ["file path over 4000 bytes", { files: [file(long)] }],
    ["setuid file mode", { files: [file("/tmp/a", "x", 0o4755)] }],
    ["sticky file mode", { files: [file("/tmp/a", "x", 0o1644)] }],
    ["return path with ..", { returnFiles: ["/tmp/../etc/shadow"] }],
    ["empty return path", { returnFiles: [""] }],
    ["env without a name", { env: { "": "x" } }],
    ["env with NUL", { env: { A: "a\0b" } }],
    ["maxFileBytes over 16 MiB", { maxFileBytes: 16 * 1024 * 1024 + 1 }],
    ["timeout 0", { timeoutMs: 0 }],
  ];
  for (const [name, patch] of cases)
    it(`refuses ${name}`, async () => {
      const marker = "/tmp/ran";
      const r = await runJailed(
        request(["/bin/touch", marker], { returnFiles: [marker], ...patch }),
      );
      assert.equal(r.failure, null);
      assert.equal(r.exit?.reason, "setup_failed", r.exit?.message);
      assert.match(r.exit?.message ?? "", /request: /);
      assert.equal(r.startedAfterMs, null);
      assert.deepEqual(r.files, []);
    });

  it("accepts cwd / and a 4000-byte path (controls for the cases above)", async () => {
    const path = path4000;
    assert.equal(path.length, 4000);
    const r = await runJailed(
      request(["/bin/pwd"], { cwd: "/", files: [file(path)], returnFiles: [path] }),
    );
    assert.deepEqual([r.exit?.reason, r.text.stdout, r.files[0]?.status], ["exited", "/\n", "ok"]);
  });
});

describe("agent: request files", () => {
  it("writes files with exact modes and contents, creating parents 0755", async () => {
    const binary = new Uint8Array(256).map((_, i) => i);
    const r = await runJailed(
      sh(
        "stat -c '%n %a' /tmp/a /tmp/a/b /tmp/a/b/c; stat -c '%n %a %s' /tmp/a/b/c/run.sh /tmp/a/ro /tmp/a/none /tmp/empty",
        {
          files: [
            file("/tmp/a/b/c/run.sh", "#!/bin/sh\n", 0o755),
            file("/tmp/a/ro", "secret", 0o600),
            file("/tmp/a/none", "", 0o000),
            file("/tmp/empty", ""),
            { path: "/tmp/bin", mode: 0o644, content: binary },
          ],
          returnFiles: ["/tmp/bin", "/tmp/a/ro"],
        },
      ),
    );
    assert.equal(r.text.stderr, "");
    assert.equal(
      r.text.stdout,
      [
        "/tmp/a 755",
        "/tmp/a/b 755",
        "/tmp/a/b/c 755",
        "/tmp/a/b/c/run.sh 755 10",
        "/tmp/a/ro 600 6",
        "/tmp/a/none 0 0",
        "/tmp/empty 644 0",
        "",
      ].join("\n"),
    );
    assert.deepEqual(r.files[0]?.content, binary);
    assert.equal(Buffer.from(r.files[1]!.content).toString(), "secret");
  });

  it("runs a file it wrote (exec of a 0755 script)", async () => {
    const r = await runJailed(
      request(["/tmp/x/run.sh"], {
        files: [file("/tmp/x/run.sh", "#!/bin/sh\necho ran\n", 0o755)],
      }),
    );
    assert.equal(r.text.stdout, "ran\n");
  });

  it("refuses to overwrite: the same path twice (O_EXCL)", async () => {
    const r = await runJailed(
      request(["/bin/true"], { files: [file("/tmp/d", "1"), file("/tmp/d", "2")] }),
    );
    assert.equal(r.exit?.reason, "setup_failed");
    assert.match(r.exit?.message ?? "", /create \/tmp\/d: File exists/);
  });

  it("refuses to write over an existing directory or below a regular file", async () => {
    const a = await runJailed(request(["/bin/true"], { files: [file("/tmp")] }));
    assert.match(a.exit?.message ?? "", /create \/tmp: File exists/);
    assert.equal(a.exit?.reason, "setup_failed");
    const b = await runJailed(request(["/bin/true"], { files: [file("/etc/passwd/x")] }));
    assert.equal(b.exit?.reason, "setup_failed");
    assert.match(b.exit?.message ?? "", /Not a directory/);
  });

  it("never follows a symlink in a parent or the final component", async () => {
    const r = await runJailed(
      sh("ls /tmp/target 2>&1; ls /etc/scratchrun-x 2>&1", {
        files: [file("/tmp/etc-link/scratchrun-x")],
      }),
      { extra: ["--symlink", "/etc", "/tmp/etc-link"] },
    );
    assert.equal(r.exit?.reason, "setup_failed");
    assert.match(r.exit?.message ?? "", /parent of \/tmp\/etc-link\/scratchrun-x: Not a directory/);
    const s = await runJailed(
      sh("test -e /tmp/target && echo written || echo absent", { files: [file("/tmp/sl")] }),
      { extra: ["--symlink", "/tmp/target", "/tmp/sl"] },
    );
    assert.equal(s.exit?.reason, "setup_failed");
    assert.match(s.exit?.message ?? "", /create \/tmp\/sl: File exists/);
  });
});

describe("agent: return files", () => {
  const collect = (script: string, returnFiles: string[], over: Partial<AgentRequest> = {}) =>
    runJailed(sh(script, { returnFiles, ...over }));
  const statuses = (r: Awaited<ReturnType<typeof collect>>) =>
    r.files.map((f) => [f.path, f.status, f.size, Buffer.from(f.content).toString()]);

  it("returns a regular file and reports missing ones", async () => {
    const r = await collect("printf hello > /tmp/out.txt", [
      "/tmp/out.txt",
      "/tmp/nope",
      "/tmp/nodir/x",
    ]);
    assert.equal(r.failure, null);
    assert.deepEqual(statuses(r), [
      ["/tmp/out.txt", "ok", 5, "hello"],
      ["/tmp/nope", "missing", 0, ""],
      ["/tmp/nodir/x", "missing", 0, ""],
    ]);
  });

  it("refuses directories, FIFOs, devices and sockets without opening them (no hang)", async () => {
    const r = await collect(
      "mkdir /tmp/dir; mkfifo /tmp/fifo; /usr/bin/python3.11 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/tmp/sock')\"",
      ["/tmp/dir", "/tmp/fifo", "/dev/zero", "/dev/null", "/tmp/sock", "/dev/tty"],
    );
    assert.equal(r.text.stderr, "");
    assert.deepEqual(
      r.files.map((f) => f.status),
      ["not_regular", "not_regular", "not_regular", "not_regular", "not_regular", "not_regular"],
    );
  });

  it("does not follow a symlink as the final component", async () => {
    const r = await collect(
      "printf data > /tmp/real; ln -s /tmp/real /tmp/link; ln -s /etc/passwd /tmp/pw",
      ["/tmp/link", "/tmp/pw", "/tmp/real"],
    );
    assert.deepEqual(
      r.files.map((f) => f.status),
      ["not_regular", "not_regular", "ok"],
    );
  });

  it("refuses a symlink in an intermediate directory component, including /proc/self", async () => {
    const r = await collect(
      "mkdir /tmp/d; printf in > /tmp/d/f; ln -s /tmp/d /tmp/dl; ln -s /etc /tmp/etc",
      ["/tmp/dl/f", "/tmp/etc/passwd", "/proc/self/environ", "/tmp/d/f"],
    );
    assert.deepEqual(statuses(r), [
      ["/tmp/dl/f", "not_regular", 0, ""],
      ["/tmp/etc/passwd", "not_regular", 0, ""],
      ["/proc/self/environ", "not_regular", 0, ""],
      ["/tmp/d/f", "ok", 2, "in"],
    ]);
  });

  it("enforces the per-file cap: at the cap ok, one byte over too_large with its size", async () => {
    const r = await collect(
      "head -c 100 /dev/zero > /tmp/at; head -c 101 /dev/zero > /tmp/over; head -c 5000000 /dev/zero > /tmp/huge",
      ["/tmp/at", "/tmp/over", "/tmp/huge"],
      { maxFileBytes: 100, maxTotalFileBytes: 1000 },
    );
    assert.deepEqual(
      r.files.map((f) => [f.status, f.size, f.content.length]),
      [
        ["ok", 100, 100],
        ["too_large", 101, 0],
        ["too_large", 5000000, 0],
      ],
    );
  });

  it("enforces the total cap in request order; a later small file may still fit", async () => {
    const r = await collect(
      "head -c 100 /dev/zero > /tmp/a; head -c 100 /dev/zero > /tmp/b; head -c 50 /dev/zero > /tmp/c",
      ["/tmp/a", "/tmp/b", "/tmp/c", "/tmp/a"],
      { maxFileBytes: 100, maxTotalFileBytes: 150 },
    );
    assert.deepEqual(
      r.files.map((f) => [f.path, f.status, f.size]),
      [
        ["/tmp/a", "ok", 100],
        ["/tmp/b", "total_limit", 100],
        ["/tmp/c", "ok", 50],
        ["/tmp/a", "total_limit", 100],
      ],
    );
  });

  it("returns files after a timeout and after an output_limit", async () => {
    const t = await collect("printf x > /tmp/f; sleep 100", ["/tmp/f"], { timeoutMs: 300 });
    assert.deepEqual([t.exit?.reason, t.files[0]?.status], ["timeout", "ok"]);
    const o = await collect("printf x > /tmp/f; yes", ["/tmp/f"], { maxStdoutBytes: 10 });
    assert.deepEqual([o.exit?.reason, o.files[0]?.status], ["output_limit", "ok"]);
  });

  it("returns a file of exactly 16 MiB (the largest F frame)", async () => {
    const path = path4000;
    const dir = path.slice(0, path.lastIndexOf("/"));
    const r = await collect(`mkdir -p ${dir} && head -c 16777216 /dev/urandom > ${path}`, [path], {
      maxFileBytes: 16 * 1024 * 1024,
      maxTotalFileBytes: 16 * 1024 * 1024,
    });
    assert.equal(r.failure, null);
    assert.deepEqual([r.files[0]?.status, r.files[0]?.content.length], ["ok", 16 * 1024 * 1024]);
  });
});
