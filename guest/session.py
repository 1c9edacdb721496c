# ScratchRun's session interpreter for Python (docs/decisions/0013-sessions.md).
#
# The agent starts it at a session's first call, as the code's user with that call's environment,
# and keeps it between calls; each call's code file runs in it, in one `__main__` module that
# persists, notebook-style: variables and imports stay. The agent's side is
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
#
# And as a notebook's cell (docs/decisions/0017-outputs.md): the value of its last statement, when
# that is an expression that is not None (and does not end with `;`), is shown as its result;
# `display()` is a builtin; the figures it leaves open are shown at its end and closed, but those
# it saved (guest/python/scratchrun_display.py, which the kernel imports from PYTHONPATH).
import os
import sys


def _serve():
    import ast
    import builtins
    import struct
    import traceback
    import types

    try:
        import scratchrun_display as shows

        builtins.display = shows.display
    except ImportError:  # PYTHONPATH without it: the cells run, nothing is shown
        shows = None

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

    def compile_cell(source, path):
        """The cell's code, and its last expression's apart (None when it has none, or when it
        ends with `;`, which a notebook takes as "show nothing")."""
        tree = compile(source, path, "exec", ast.PyCF_ONLY_AST)
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            rest = source.splitlines()[last.end_lineno - 1][last.end_col_offset :]
            if rest.lstrip().startswith(b";"):
                last = None
        if last is None:
            return compile(tree, path, "exec"), None
        tree.body.pop()
        expression = compile(ast.Expression(last.value), path, "eval")
        return compile(tree, path, "exec"), expression

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
        if shows is not None:
            shows.begin()
        try:
            with open(path, "rb") as f:
                source = f.read()
            code, last = compile_cell(source, path)
            exec(code, main.__dict__)
            if last is not None:
                value = eval(last, main.__dict__)
                if value is not None and shows is not None:
                    shows.show(value, "result")
        except SystemExit as e:
            status = status_of(e.code)
        except BaseException:
            # Without this frame, as `python3 path` prints it.
            etype, value, tb = sys.exc_info()
            traceback.print_exception(etype, value, tb.tb_next if tb else None)
            status = 1
        if shows is not None:
            try:
                shows.flush()
            except BaseException:
                traceback.print_exc()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os.write(note, struct.pack("<i", status))


_serve()
