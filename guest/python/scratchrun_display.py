# ScratchRun's display channel for Python (docs/decisions/0017-outputs.md).
#
# What code shows beside its streams, the way a notebook shows it: `display(obj)`, every
# matplotlib figure plt.show() displays or the call (or a session's cell) leaves open, and a
# session cell's last expression. Each becomes one output on the agent's display socket
# (guest/agent-display.h), in order with what was printed around it; the host parses it
# (src/engine/outputs.ts) and answers with image blocks and text tables.
#
# Every Python of the sandbox finds this module (PYTHONPATH, src/runtimes/spec.ts BASE_ENV), and
# matplotlib's backend is scratchrun_mpl (MPLBACKEND=module://scratchrun_mpl): Agg, whose show()
# displays here. A fresh call imports this module only when it draws or displays something.
#
# One output on the socket: a JSON header line, then the bytes of its one binary form, if any:
#
#   {"type": "display" | "result", "data": {MIME: TEXT, ...}, "binary": MIME, "bytes": N}
#   {"type": "left_out", "count": N, "names": [NAME, ...]}
#
# Bounds (LIMITS.outputs in src/schema/limits.ts, which test/guest/display.unit.test.ts holds
# these to): at most MAX_COUNT outputs per call or cell, then one note naming what was left out;
# a figure past the count is never rendered. One output's forms together are at most MAX_BYTES
# (a larger image is dropped, its text kept), all outputs at most MAX_TOTAL_BYTES.
import sys

# The agent's abstract name, filling sun_path (guest/agent-display.h says why).
SOCKET = "\0" + "scratchrun-display".ljust(107, "_")
MAX_COUNT = 20
MAX_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 6 * 1024 * 1024
# Characters of one text form (the host shows less of it in the answer's text).
TEXT_CHARS = 64 * 1024
# Names a left-out note lists; it counts the rest.
NAMES_LISTED = 20
# Rows and columns of a table rendered from a DataFrame or Series (head and tail of each).
TABLE_ROWS = 20
TABLE_COLUMNS = 20

_count = 0
_bytes = 0
_left = []
_left_count = 0


def begin():
    """A new call's or cell's budget (a session's kernel calls this before each cell)."""
    global _count, _bytes, _left, _left_count
    _count, _bytes, _left, _left_count = 0, 0, [], 0


def _leave_out(name):
    global _left_count
    _left_count += 1
    if len(_left) < NAMES_LISTED:
        _left.append(name)


def _head(header):
    import json

    return json.dumps(header, ensure_ascii=False).encode("utf-8", "replace") + b"\n"


def _send(data):
    """One output on the socket, after what the streams hold; True once the agent placed it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    import _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        s.connect(SOCKET)
        s.sendall(data)
        s.shutdown(_socket.SHUT_WR)
        s.recv(1)  # the agent closes the connection once the output is placed
        return True
    except OSError:
        return False
    finally:
        s.close()


def _text(value):
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    if len(value) > TEXT_CHARS:
        value = value[:TEXT_CHARS] + f"\n… ({len(value) - TEXT_CHARS} more characters)"
    return value


def _plain(obj):
    try:
        return _text(repr(obj))
    except Exception as e:
        return f"<{type(obj).__name__} object; its repr() raised {type(e).__name__}>"


def _warn(obj, method, error):
    try:
        sys.stderr.write(
            f"scratchrun: {method} of {type(obj).__name__} raised {type(error).__name__}: "
            f"{error} (that form is left out)\n"
        )
    except Exception:
        pass


def _figure_png(fig):
    import io

    buf = io.BytesIO()
    # Our own rendering is not the code's savefig (scratchrun_mpl marks those). Drawn once, as
    # savefig draws by default (a tight bounding box draws twice: a quarter more under TCG).
    fig._scratchrun_rendering = True
    try:
        fig.savefig(buf, format="png")
    finally:
        fig._scratchrun_rendering = False
    return buf.getvalue()


def _is_figure(obj):
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)


def _is_pil_image(obj):
    image = sys.modules.get("PIL.Image")
    return image is not None and isinstance(obj, image.Image)


def _cell(value):
    if isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(obj):
    """A bounded Markdown table of a pandas DataFrame or Series, or None."""
    pd = sys.modules.get("pandas")
    if pd is None or not isinstance(obj, (pd.DataFrame, pd.Series)):
        return None
    frame = obj.to_frame() if isinstance(obj, pd.Series) else obj
    rows, cols = frame.shape
    half_r, half_c = TABLE_ROWS // 2, TABLE_COLUMNS // 2
    row_at = list(range(rows)) if rows <= TABLE_ROWS else [*range(half_r), None, *range(rows - half_r, rows)]
    col_at = list(range(cols)) if cols <= TABLE_COLUMNS else [*range(half_c), None, *range(cols - half_c, cols)]

    def name(label):
        return " / ".join(map(str, label)) if isinstance(label, tuple) else str(label)

    index_name = name(frame.index.name) if frame.index.name is not None else ""
    head = [index_name] + ["…" if c is None else name(frame.columns[c]) for c in col_at]
    lines = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    for r in row_at:
        if r is None:
            lines.append("| " + " | ".join("…" for _ in head) + " |")
            continue
        row = [name(frame.index[r])]
        row += ["…" if c is None else _cell(frame.iat[r, c]) for c in col_at]
        lines.append("| " + " | ".join(_cell(v) if i == 0 else v for i, v in enumerate(row)) + " |")
    if rows > TABLE_ROWS or cols > TABLE_COLUMNS:
        lines.append(f"\n[{rows} rows x {cols} columns]")
    return _text("\n".join(lines))


# The rich forms a notebook asks an object for, and their MIME types (text forms first found win).
_REPRS = (
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_html_", "text/html"),
)
_BINARY = ("image/png", "image/jpeg")


def _call_repr(obj, method):
    fn = getattr(type(obj), method, None)
    if fn is None or isinstance(obj, type):
        return None
    try:
        value = getattr(obj, method)()
    except Exception as e:
        _warn(obj, method, e)
        return None
    if isinstance(value, tuple) and len(value) == 2:  # (data, metadata)
        value = value[0]
    return value


def _forms(obj):
    """{MIME: text} and (binary MIME, bytes) of obj, text/plain always among them."""
    data, binary = {}, None
    if _is_figure(obj):
        # A figure with nothing drawn in it is its text, as in a notebook: no blank image.
        if len(obj.get_children()) > 1:
            binary = ("image/png", _figure_png(obj))
    elif _is_pil_image(obj):
        import io

        buf = io.BytesIO()
        try:
            obj.save(buf, format="PNG")
            binary = ("image/png", buf.getvalue())
        except Exception as e:
            _warn(obj, "save(format='PNG')", e)
    else:
        table = _table(obj)
        if table is not None:
            data["text/markdown"] = table
        bundle = _call_repr(obj, "_repr_mimebundle_")
        if isinstance(bundle, dict):
            for mime, value in bundle.items():
                if mime in _BINARY and binary is None:
                    raw = _bytes_of(value)
                    if raw is not None:
                        binary = (mime, raw)
                elif isinstance(mime, str) and mime not in data and mime not in _BINARY:
                    text = _text(value) if mime != "application/json" else _json(value)
                    if text is not None:
                        data[mime] = text
        for method, mime in _REPRS:
            if mime in data or (mime in _BINARY and binary is not None):
                continue
            if mime == "text/html" and (binary is not None or "text/markdown" in data):
                continue  # a form a model reads better is there: no HTML to compute
            value = _call_repr(obj, method)
            if value is None:
                continue
            if mime in _BINARY:
                raw = _bytes_of(value)
                if raw is not None:
                    binary = (mime, raw)
            else:
                text = _json(value) if mime == "application/json" else _text(value)
                if text is not None:
                    data[mime] = text
    data.setdefault("text/plain", _plain(obj))
    return data, binary


def _bytes_of(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        import binascii

        try:
            return binascii.a2b_base64(value)
        except Exception:
            return None
    return None


def _json(value):
    import json

    try:
        return _text(value if isinstance(value, str) else json.dumps(value, default=str, indent=1))
    except Exception:
        return None


def _name(obj):
    if _is_figure(obj):
        label = obj.get_label()
        return label if label else f"Figure {getattr(obj, 'number', '')}".rstrip()
    return type(obj).__name__


def show(obj, kind="display"):
    """Shows obj as one output ("display", or a session cell's "result"); False when it was left
    out (past the count or the bytes, named in the note) or the channel is not there (then its
    text was printed instead)."""
    global _count, _bytes
    if _count >= MAX_COUNT:
        _leave_out(_name(obj))  # never rendered
        return False
    data, binary = _forms(obj)
    out = b""
    if binary is not None:
        out = _head({"type": kind, "data": data, "binary": binary[0], "bytes": len(binary[1])})
        out = out + binary[1] if len(out) + len(binary[1]) <= MAX_BYTES else b""
    if not out:  # no image, or one over MAX_BYTES: its text stays, its size is said
        dropped = {"dropped": {binary[0]: len(binary[1])}} if binary is not None else {}
        out = _head({"type": kind, "data": data, **dropped})
    if len(out) > MAX_BYTES or _bytes + len(out) > MAX_TOTAL_BYTES:
        _leave_out(_name(obj))
        return False
    if not _send(out):
        print(data["text/plain"])
        return False
    _count += 1
    _bytes += len(out)
    return True


def display(*objs):
    """Shows each object as an output, in order with what is printed around it, as a notebook's
    display() does: images as images, tables as tables, anything else as its richest text."""
    for obj in objs:
        show(obj)


def saved(fig):
    """scratchrun_mpl: the code saved fig (savefig), so it is not shown again at the end (a saved
    and returned figure is not sent twice); plt.show() or display(fig) still show it."""
    if not getattr(fig, "_scratchrun_rendering", False):
        fig._scratchrun_saved = True


def _open_figures():
    """pyplot's open figures drawn by scratchrun_mpl (none after matplotlib.use("Agg"))."""
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    if helpers is None:
        return []
    managers = helpers.Gcf.get_all_fig_managers()
    return [m.canvas.figure for m in managers if getattr(m.canvas, "scratchrun", False)]


def show_figures(figures=None):
    """plt.show(): every open figure (or those given) as an output, then closed, as a notebook's
    inline backend does."""
    for fig in _open_figures() if figures is None else figures:
        show(fig)
        _close(fig)


def _close(fig):
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close(fig)


def flush():
    """The end of a call or a cell: every figure still open is shown and closed, but those the code
    saved (they stay open); then the note naming what was left out."""
    for fig in _open_figures():
        if getattr(fig, "_scratchrun_saved", False):
            continue
        show(fig)
        _close(fig)
    if _left_count:
        _send(_head({"type": "left_out", "count": _left_count, "names": _left}))
    begin()
