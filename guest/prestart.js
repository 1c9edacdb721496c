// ScratchRun's pre-started node (microVM snapshot templates; docs/decisions/0003-microvm.md).
//
// The agent starts node with this file before the snapshot, so every clone of the template
// resumes with node bootstrapped and blocked here; a call then pays only for running its code.
// The agent hands over only requests whose node start would have been the same
// (guest/agent-prestart.c decides); this file makes the rest look like `node main.js`:
//
//   fd 4: one byte "w" once node is up and waiting (then closed)
//   fd 3: the call, read to EOF: cwd NUL path NUL then NAME=VALUE NUL for each environment entry
//
// On the call it first reseeds OpenSSL's DRBG and V8's random generator (guest/node-reseed.c:
// clones must not draw the same numbers), then replaces process.env, changes directory, sets
// process.argv[1], forgets this module and runs the file as the main module through node's own
// entry point (Module.runMain), from the next tick so that no frame of this file is on its
// stack. Before the snapshot it loads only what a script's first console.log loads (the stdout
// and stderr streams). What stays from the pre-start, by design, is written in docs/SECURITY.md
// ("What clones of one snapshot share").
"use strict";

((fs, Module, self) => {
  const addon = { exports: {} };
  process.dlopen(addon, `${__dirname}/scratchrun-reseed.node`, 2 /* RTLD_NOW */);
  const reseed = addon.exports.reseed;

  // fds 1 and 2 are already the call's output pipes: create the streams on them now, as a
  // script's first console.log would, and run console.log's formatting and the pipe's write path
  // once (an empty write reaches the reader as nothing; the formatting writes to a sink). Under
  // TCG this bootstrap code is ~350 ms of a call; the snapshot keeps it compiled and done.
  void process.stdout;
  void process.stderr;
  process.stdout.write("");
  const sink = new (require("stream").Writable)({ write: (chunk, encoding, done) => done() });
  new console.Console(sink).log("%s", 1, "a", { b: [2] });
  fs.writeSync(4, "w");
  fs.closeSync(4);
  const chunks = [];
  const buf = Buffer.alloc(1 << 16);
  for (let n; (n = fs.readSync(3, buf, 0, buf.length, null)) > 0;)
    chunks.push(Buffer.from(buf.subarray(0, n)));
  fs.closeSync(3);
  const fields = Buffer.concat(chunks).toString("utf8").split("\0");
  if (fields.length < 3 || fields[fields.length - 1] !== "") {
    fs.writeSync(2, "scratchrun: malformed pre-start message\n");
    process.exit(127);
  }
  reseed();

  const [cwd, path] = fields;
  for (const name of Object.keys(process.env)) delete process.env[name];
  for (const entry of fields.slice(2, -1)) {
    const eq = entry.indexOf("=");
    if (eq > 0) process.env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  process.chdir(cwd);
  process.argv[1] = path;
  delete Module._cache[self.filename];
  process.nextTick(Function.prototype.call.bind(Module.runMain, Module), path);
})(require("fs"), module.constructor, module);
