# ScratchRun's pre-started Python (microVM snapshot templates; docs/decisions/0003-microvm.md).
#
# The agent starts the interpreter with this file before the snapshot is taken, so every clone of
# the template resumes with Python already initialised and blocked here; a call then pays only for
# running its code. The agent hands over only requests whose interpreter start would have been the
# same (guest/agent-prestart.c decides); this file makes the rest look like `python3 main.py`:
#
#   fd 4: one byte "w" once the interpreter is up and waiting (then closed)
#   fd 3: the call, read to EOF: cwd NUL path NUL then NAME=VALUE NUL for each environment entry
#
# It imports nothing the interpreter has not already imported at startup, replaces os.environ,
# re-reads TZ, changes directory, rebuilds __main__ as a script run would have it (globals, argv,
# orig_argv, sys.path[0]) and runs the file. Frames of this file are cut from the traceback of an
# exception the code does not catch. What stays from the pre-start, by design, is written in
# docs/SECURITY.md ("What clones share").
import os
import sys
import time


def _scratchrun_main(os=os, sys=sys, time=time, here=__file__, main=sys.modules["__main__"]):
    os.write(4, b"w")
    os.close(4)
    chunks = []
    while True:
        chunk = os.read(3, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(3)
    fields = b"".join(chunks).split(b"\0")
    del chunks
    if len(fields) < 3 or fields[-1] != b"":
        os.write(2, b"scratchrun: malformed pre-start message\n")
        os._exit(127)
    cwd, path = os.fsdecode(fields[0]), os.fsdecode(fields[1])
    os.environ.clear()
    for entry in fields[2:-1]:
        name, _, value = entry.partition(b"=")
        os.environb[name] = value
    del fields
    time.tzset()
    os.chdir(cwd)

    g = main.__dict__
    builtins = g["__builtins__"]
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    g.clear()
    g.update(
        __name__="__main__",
        __doc__=None,
        __package__=None,
        __loader__=loader,
        __spec__=None,
        __annotations__={},
        __builtins__=builtins,
        __file__=path,
        __cached__=None,
    )
    sys.argv[:] = [path]
    sys.orig_argv[1:] = [path]
    sys.path[0] = os.path.dirname(path)
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        exec(code, g)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == here:
            tb = tb.tb_next
        e.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        if sys.version_info >= (3, 12):
            sys.last_exc = e
        sys.excepthook(type(e), e, tb)
        if isinstance(e, KeyboardInterrupt):
            # As the interpreter does for an unhandled KeyboardInterrupt: die of SIGINT.
            signal = sys.modules["_signal"]
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(1) from None


_scratchrun_main()
