"""The one exception family polyprof raises.

Everything polyprof raises on purpose derives from :class:`PolyprofError`, so callers
can catch one type. Plugin failures are never raised into the profiled program; they
are recorded in the trace's metadata (``trace.metadata["plugin_errors"]``) instead.
:func:`one_line` is how a message quotes another exception (a vendor's, pyarrow's, ...).
"""

from __future__ import annotations


class PolyprofError(Exception):
    """Base of every error polyprof raises on purpose."""


class TraceFormatError(PolyprofError):
    """A file could not be read as a trace; says which file and what is wrong."""

    def __init__(self, path: object, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self) -> tuple:  # picklable: it crosses process pools (per-rank work)
        return (type(self), (self.path, self.problem))


class OutputError(PolyprofError):
    """An output could not be written at the path asked for (names it; any previous file
    there is left as it was: ``polyprof/outfile.py``)."""


class TemporaryFileError(PolyprofError):
    """A temporary file polyprof needs (in ``TMPDIR``: a flow table spilled to disk, a
    compressed database inflated) could not be written or read back: names the
    directory and why, not the input."""


class TraceSchemaError(PolyprofError):
    """Data handed to the trace does not fit the schema (lengths, ids, types)."""


class PluginError(PolyprofError):
    """A plugin could not be found, loaded or driven."""


class PluginStateError(PluginError):
    """A plugin was driven out of its lifecycle order (e.g. started twice)."""


class SessionError(PolyprofError):
    """A profiling session was misused (e.g. two sessions active at once)."""


class ServeError(PolyprofError):
    """The capture server cannot start as configured (address, token, TLS), said why."""


class CaptureError(PolyprofError):
    """A capture from a profiler server failed: which server and why."""


class WindowError(PolyprofError):
    """An analysed window (``--steps``, ``--skip-first``) that the trace cannot give:
    says what was asked and which steps the trace has."""


class PeakError(PolyprofError):
    """A device peak given by hand (``--peak``, ``peaks=``) that cannot be read: says
    which part and what is expected."""


#: what :func:`one_line` marks a cut with
CUT = "..."


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is running out of memory: a MemoryError, or an ImportError of a
    shared library the loader could not map (under an address-space limit: NumPy's
    libgfortran, pyarrow's libarrow), NumPy's own wrapping it as its cause."""
    if isinstance(e, MemoryError):
        return True
    return isinstance(e, ImportError) and any("failed to map segment" in str(x) for x in (e, e.__cause__) if x)


def one_line(e: object, n: int | None = 200) -> str:
    """An exception's message (often another package's: pyarrow, DuckDB, sqlite3, an
    OSError, protobuf), or any text, as one line for a polyprof message: its white space,
    newlines included, folded to single spaces; cut to at most ``n`` characters, ``...``
    included, when longer (``n`` under 3: ``...`` alone; ``None``: never cut). The class
    name is the caller's to add."""
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - a vendor's __str__ that fails must not hide the error being reported
        text = f"<{type(e).__name__} whose message cannot be shown>"
    s = " ".join(text.split())
    if n is None or len(s) <= n:
        return s
    return s[:max(n - len(CUT), 0)] + CUT
