# ScratchRun's pre-started Python (microVM snapshot templates; docs/decisions/0003-microvm.md).
#
# The agent starts the interpreter with this file before the snapshot is taken, so every clone of
# the template resumes with Python already initialised and blocked here; a call then pays only for
# running its code. The agent hands over only requests whose interpreter start would have been the
# same (guest/agent-prestart.c decides); this file makes the rest look like `python3 main.py`:
#
#   fd 4: one byte "w" once the interpreter is up and waiting (closed when the call comes)
#   fd 3: the call, read to EOF: cwd NUL path NUL then NAME=VALUE NUL for each environment entry;
#         before it, "T" or "R" any number of times: rehearse the call's path (a pooled clone's
#         warm-up; "T" also runs the pre-imported modules' hot paths), answered by "w" on fd 4;
#         or instead of the call, "K" KERNEL NUL: become a session's kernel (below)
#
# It imports nothing the interpreter has not already imported at startup, replaces os.environ,
# re-reads TZ, changes directory, rebuilds __main__ as a script run would have it (globals, argv,
# orig_argv, sys.path[0]) and runs the file. Frames of this file are cut from the traceback of an
# exception the code does not catch. What stays from the pre-start, by design, is written in
# docs/SECURITY.md ("What clones share").
#
# With an argument (the agent's --preimport SPEC, guest/agent-preimport.h) it first imports the
# SPEC's modules and runs their hot paths once (docs/decisions/0011-preimport.md), leaves the
# writable areas as it found them; "T" runs the hot paths again. On the call it reseeds
# what the imports seeded from the kernel (random, numpy's legacy generator) and forgets what they
# cached from the pre-start (tempfile's directory and name generator, logging's start time, shown
# once warnings).
#
# "K" (docs/decisions/0013-sessions.md): a session whose first cell would have started its
# kernel exactly as this interpreter was started takes it as its kernel. The same reseeds and
# resets as a call's hand-over, the directories the imports made remade (as if the cell had
# imported every pre-imported module), then the kernel script (guest/session.py) runs in this
# interpreter with fds 3 and 4 kept, after "w" on fd 4: the agent sends it cells from then on.
import os
import sys
import time


def _scratchrun_preimport(spec, os=os, sys=sys, time=time):
    """Imports SPEC's modules; returns (warm, reset, remake): warm() runs their hot paths (again),
    reset() and remake(code), given the call's compiled code, are their part of the hand-over.
    Exits 3, so that the agent
    runs calls in fresh interpreters, when they cannot be handed over as a plain run would find
    them: an import or a hot path failed, wrote anything (a plain run would show it in the call's
    output), or left a file descriptor open."""
    fields = dict(f.partition("=")[::2] for f in spec.split(";"))
    modules = [m for m in fields.get("modules", "").split(",") if m]
    scratch = [p for p in fields.get("scratch", "").split(",") if p]
    gc = __import__("gc")
    io = sys.modules["io"]

    def tree():
        found = set()
        for root in scratch:
            for dirpath, dirnames, filenames in os.walk(root):
                found.update(os.path.join(dirpath, n) for n in dirnames + filenames)
        return found

    def warm():
        if "matplotlib.pyplot" in modules:
            mpl, plt = sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"]
            with mpl.rc_context():
                fig, ax = plt.subplots(figsize=(4, 3))
                ax.plot(range(50), [i * i % 17 for i in range(50)], label="warm")
                ax.set_title("warm")
                ax.legend()
                fig.savefig(io.BytesIO(), format="png", dpi=80)
            plt.close("all")
            # The fonts that figure opened stay open in this cache: a plain run has none open.
            sys.modules["matplotlib.font_manager"]._get_font.cache_clear()
        if "pandas" in modules:
            pd = sys.modules["pandas"]
            df = pd.read_csv(io.StringIO("k,v\na,1.5\nb,2\na,3\n"))
            df.groupby("k")["v"].agg(["sum", "mean"]).reset_index()
        gc.collect()
        # What exists now is never collected again, so the call's finalisation does not walk it.
        gc.freeze()

    fds = set(os.listdir("/proc/self/fd"))
    before = tree()
    seed_from, _, seed_to = fields.get("seed", "").partition(":")
    r, w = os.pipe()
    os.set_blocking(w, False)
    saved = os.dup(1), os.dup(2)
    os.dup2(w, 1)
    os.dup2(w, 2)
    failed = False
    # Directories each module's import made, which a plain run's import of it would make too.
    made = {}
    try:
        if seed_from and os.path.isdir(seed_from):
            os.makedirs(seed_to, exist_ok=True)
            for name in os.listdir(seed_from):
                with open(os.path.join(seed_from, name), "rb") as src:
                    with open(os.path.join(seed_to, name), "wb") as dest:
                        dest.write(src.read())
        for m in modules:
            had = tree()
            __import__(m)
            new = sorted(p for p in tree() - had if os.path.isdir(p))
            made.setdefault(m.partition(".")[0], []).extend(new)
        warm()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        failed = True
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    for fd in (*saved, w):
        os.close(fd)
    os.set_blocking(r, False)
    try:
        failed = failed or os.read(r, 1) != b""
    except BlockingIOError:
        pass
    os.close(r)
    for path in sorted(tree() - before, reverse=True):  # children before their directories
        try:
            os.rmdir(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        except OSError:
            failed = True
    if failed or set(os.listdir("/proc/self/fd")) != fds:
        os._exit(3)

    def imported(code, found):
        found.update(name.partition(".")[0] for name in code.co_names)
        for const in code.co_consts:
            if hasattr(const, "co_names"):
                imported(const, found)
        return found

    def reset():
        random = sys.modules.get("random")
        if random is not None:
            random.seed()
        mtrand = sys.modules.get("numpy.random.mtrand")
        if mtrand is not None:
            mtrand.seed()
        tempfile = sys.modules.get("tempfile")
        if tempfile is not None:
            tempfile.tempdir = None
            tempfile._name_sequence = None
        logging = sys.modules.get("logging")
        if logging is not None:
            logging._startTime = time.time()
        warnings = sys.modules["_warnings"]
        warnings._onceregistry.clear()
        warnings._filters_mutated()

    def remake(code):
        # What the imports the code names would have made (matplotlib's config and cache dirs);
        # every module's (a session's kernel: code None).
        names = imported(code, set()) if code is not None else made
        for top, dirs in made.items():
            if top in names:
                for d in dirs:
                    os.makedirs(d, exist_ok=True)

    return warm, reset, remake


def _scratchrun_rehearse(os=os, time=time):
    """The call's path through this file on a scratch call (a pooled clone's warm-up, "T"): under
    TCG its code is then translated in this clone before the call comes. It leaves the
    environment, the directory and the descriptors as they were and imports nothing."""
    r, w = os.pipe()
    os.write(w, b"/\0/dev/null\0SCRATCHRUN_REHEARSAL=1\0")
    os.close(w)
    fields = b"".join([os.read(r, 1 << 16)]).split(b"\0")
    os.close(r)
    for entry in fields[2:-1]:
        name, _, value = entry.partition(b"=")
        os.environb[name] = value
        del os.environb[name]
    time.tzset()
    os.chdir(os.fsdecode(fields[0]))
    code = compile("print(1, file=out)\n", os.fsdecode(fields[1]), "exec", dont_inherit=True)
    r, w = os.pipe()
    with open(w, "w") as out:
        exec(code, {"out": out})
    os.read(r, 16)
    os.close(r)
    # Enough containers for the collector to run, as the call's finalisation will.
    junk = [[i] for i in range(5000)]
    del junk


def _scratchrun_kernel(kernel, reset, remake, os=os, sys=sys):
    """Becomes a session's kernel ("K"): the hand-over's resets, then the kernel script in this
    interpreter, as `python3 KERNEL` would run it (its own globals, sys.argv and orig_argv)."""
    if reset is not None:
        reset()
        remake(None)
    with open(kernel, "rb") as f:
        code = compile(f.read(), kernel, "exec", dont_inherit=True)
    sys.argv[:] = [kernel]
    sys.orig_argv[1:] = [kernel]
    sys.path[0] = os.path.dirname(kernel)
    g = {"__name__": "__main__", "__file__": kernel, "__builtins__": __builtins__}
    os.write(4, b"w")
    exec(code, g)
    os._exit(0)


def _scratchrun_main(os=os, sys=sys, time=time, here=__file__, main=sys.modules["__main__"]):
    warm, reset, remake = (
        _scratchrun_preimport(sys.argv[1]) if len(sys.argv) > 1 else (None, None, None)
    )
    os.write(4, b"w")
    chunks = []
    while True:
        chunk = os.read(3, 1 << 16)
        if not chunks and chunk in (b"T", b"R"):
            _scratchrun_rehearse()
            if warm is not None and chunk == b"T":
                warm()
            os.write(4, b"w")
            continue
        if not chunks and chunk[:1] == b"K" and chunk[-1:] == b"\0":
            _scratchrun_kernel(os.fsdecode(chunk[1:-1]), reset, remake)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(3)
    os.close(4)
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
    if reset is not None:
        reset()

    builtins = main.__dict__["__builtins__"]
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    # The code's __main__ is a new module: this script's globals are older than gc.freeze(), and
    # a frozen dict in a cycle (the code's functions hold their globals) is never collected, so
    # the code's module-level objects would never be finalised (an unclosed file never flushed).
    main = type(main)("__main__")
    sys.modules["__main__"] = main
    g = main.__dict__
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
        if remake is not None:
            remake(code)
        exec(code, g)
    except SystemExit:
        raise
    except BaseException as e:
        # As the interpreter does when a script ends with an exception: its streams flushed
        # first (errors ignored), then the traceback.
        for stream in (sys.stderr, sys.stdout):
            try:
                stream.flush()
            except BaseException:
                pass
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
