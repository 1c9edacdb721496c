// ScratchRun's session interpreter for node (docs/decisions/0013-sessions.md).
//
// The agent starts it at a session's first call, as the code's user with that call's environment,
// and keeps it between calls; each call's code file runs in it as a script of one global scope
// that persists, as in node's REPL: top-level `var`, `let`, `const`, functions and classes stay,
// and so does what `require` loaded. The agent's side is guest/agent-run.c (run_cell):
//
//   fd 3: one cell at a time: its length (4 bytes, little-endian), then cwd NUL path NUL and
//         NAME=VALUE NUL for each environment entry
//   fd 4: the cell's status (4 bytes, little-endian int32), once the cell is over
//
// A cell is over, as `node path` would be, when its code has run and nothing it started keeps the
// event loop alive (timers, sockets, child processes; a promise it evaluates to is awaited). An
// uncaught exception, thrown or in a callback, or an unhandled rejection prints and makes the
// status 1; `process.exitCode` is the status otherwise. `process.exit()` ends the interpreter, and
// the agent starts a fresh one for the next call (in the same files).
//
// As in node's REPL, the cell's completion value (what its last statement evaluates to, awaited
// when a promise) is shown when it is not undefined: as its result, util.inspect's text, on the
// agent's display socket (guest/agent-display.h; docs/decisions/0017-outputs.md), after what the
// cell printed; printed instead where there is no socket.
"use strict";

((fs, vm, Module) => {
  // guest/python/scratchrun_display.py's bound on one text form; the agent's abstract socket name,
  // which fills sun_path (guest/agent-display.h says why).
  const TEXT_CHARS = 64 * 1024;
  const SOCKET = `\0${"scratchrun-display".padEnd(107, "_")}`;
  const showResult = (value) =>
    new Promise((resolve) => {
      let text = require("util").inspect(value, { depth: 4, maxArrayLength: 100 });
      if (text.length > TEXT_CHARS)
        text = `${text.slice(0, TEXT_CHARS)}\n… (${text.length - TEXT_CHARS} more characters)`;
      const head = JSON.stringify({ type: "result", data: { "text/plain": text } });
      const socket = require("net").createConnection(SOCKET);
      let placed = false;
      socket.on("connect", () => {
        placed = true;
        socket.end(`${head}\n`);
      });
      socket.on("error", () => {
        if (!placed) fs.writeSync(1, `${text}\n`);
        placed = true;
      });
      socket.on("close", () => resolve());
      socket.resume(); // the agent closes it once the result is placed
    });

  let failed = false;
  const report = (err) => {
    failed = true;
    const text = err && err.stack ? err.stack : `Uncaught ${require("util").inspect(err)}`;
    try {
      fs.writeSync(2, `${text}\n`);
    } catch {
      // stderr gone: the agent ends the cell anyway
    }
  };
  process.on("uncaughtException", report);
  process.on("unhandledRejection", report);

  const readExact = (n) => {
    const buf = Buffer.alloc(n);
    for (let off = 0; off < n;) {
      const got = fs.readSync(3, buf, off, n - off, null);
      if (got === 0) process.exit(0); // the agent went away: the session is over
      off += got;
    }
    return buf;
  };

  // What keeps the loop alive with no cell running: the stdout and stderr pipes (created now, as
  // a first console.log would). A cell is over when nothing beyond these is left.
  void process.stdout;
  void process.stderr;
  const tally = () => {
    const counts = new Map();
    for (const r of process.getActiveResourcesInfo()) counts.set(r, (counts.get(r) ?? 0) + 1);
    return counts;
  };
  const idle = tally();
  const quiet = () => [...tally()].every(([r, n]) => n <= (idle.get(r) ?? 0));

  // Until nothing of the cell keeps the event loop alive: a few turns at once (most cells), then
  // every 5 ms.
  const settle = async () => {
    for (let turn = 0; ; turn++) {
      await new Promise((resolve) => (turn < 20 ? setImmediate(resolve) : setTimeout(resolve, 5)));
      if (quiet()) return;
    }
  };

  const runCell = async () => {
    const fields = readExact(readExact(4).readUInt32LE(0)).toString("utf8").split("\0");
    if (fields.length < 3 || fields[fields.length - 1] !== "") {
      fs.writeSync(2, "scratchrun: malformed session cell\n");
      process.exit(127);
    }
    const [cwd, path] = fields;
    for (const name of Object.keys(process.env)) delete process.env[name];
    for (const entry of fields.slice(2, -1)) {
      const eq = entry.indexOf("=");
      if (eq > 0) process.env[entry.slice(0, eq)] = entry.slice(eq + 1);
    }
    process.chdir(cwd);
    process.argv[1] = path;
    process.exitCode = undefined;
    failed = false;
    const cellModule = new Module(path, null);
    cellModule.filename = path;
    cellModule.paths = Module._nodeModulePaths(require("path").dirname(path));
    Object.assign(globalThis, {
      require: Module.createRequire(path),
      module: cellModule,
      exports: cellModule.exports,
      __filename: path,
      __dirname: require("path").dirname(path),
    });
    try {
      let value = vm.runInThisContext(fs.readFileSync(path, "utf8"), { filename: path });
      if (value && typeof value.then === "function") value = await value;
      if (value !== undefined) await showResult(value);
    } catch (err) {
      report(err);
    }
    await settle();
    const status = failed ? 1 : Number(process.exitCode ?? 0) & 0xff;
    const note = Buffer.alloc(4);
    note.writeInt32LE(status, 0);
    fs.writeSync(4, note);
  };

  const serve = () =>
    runCell().then(serve, (err) => {
      report(err);
      process.exit(70);
    });
  serve();
})(require("fs"), require("vm"), require("module"));
