# ScratchRun's session interpreter for Python (docs/decisions/0013-sessions.md).
#
# The agent starts it at a session's first call, as the code's user with that call's environment,
# and keeps it between calls; each call's code file runs in it, in one `__main__` module that
# persists, notebook-style: variables, imports and open figures stay. The agent's side is
# guest/agent-run.c (run_cell):
#
#   fd 3: one cell at a time: its length (4 bytes, little-endian), then cwd NUL path NUL and
#         NAME=VALUE NUL for each environment entry
#   fd 4: the cell's status (4 bytes, little-endian int32), written after its output is flushed
#
# A cell behaves as `python3 path` would, except that the interpreter outlives it: an uncaught
# exception prints its traceback and the status is 1; `sys.exit(n)` ends the cell with status n.
# The environment, cwd and sys.argv are the cell's own. What ends the interpreter (os._exit, a
# crash, the timeout) ends the cell, and the agent starts a fresh interpreter for the next one.
import os
import sys


def _serve():
    import struct
    import traceback
    import types

    ctl = os.fdopen(3, "rb", buffering=0)
    note = 4
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main

    def read_exact(n):
        data = bytearray()
        while len(data) < n:
            chunk = ctl.read(n - len(data))
            if not chunk:
                os._exit(0)  # the agent went away: the session is over
            data += chunk
        return bytes(data)

    def status_of(code):
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        print(code, file=sys.stderr)
        return 1

    while True:
        (length,) = struct.unpack("<I", read_exact(4))
        fields = read_exact(length).split(b"\0")
        if len(fields) < 3 or fields[-1] != b"":
            os.write(2, b"scratchrun: malformed session cell\n")
            os._exit(127)
        cwd, path = os.fsdecode(fields[0]), os.fsdecode(fields[1])
        env = {}
        for entry in fields[2:-1]:
            name, eq, value = entry.partition(b"=")
            if eq:
                env[os.fsdecode(name)] = os.fsdecode(value)
        os.environ.clear()
        os.environ.update(env)
        if "TZ" in env:
            import time

            time.tzset()
        os.chdir(cwd)
        sys.argv = [path]
        sys.path[0] = os.path.dirname(path)  # it was this script's directory
        main.__dict__["__file__"] = path
        status = 0
        try:
            with open(path, "rb") as f:
                source = f.read()
            exec(compile(source, path, "exec"), main.__dict__)
        except SystemExit as e:
            status = status_of(e.code)
        except BaseException:
            # Without this frame, as `python3 path` prints it.
            etype, value, tb = sys.exc_info()
            traceback.print_exception(etype, value, tb.tb_next if tb else None)
            status = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os.write(note, struct.pack("<i", status))


_serve()
