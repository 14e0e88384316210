"""Every trace format polyprof reads or writes, in one list.

``polyprof.load`` (formats/detect.py) reads with the entries that have a reader, trying
their sniffs in this order; ``polyprof export``, ``polyprof.export`` and ``--help`` write
with the entries that have a writer, and an output name ending in one of an entry's
suffixes picks it when no format is named. A new format is one module with
``load(path, **options) -> Trace`` and/or ``write(trace, path) -> Path`` plus one
:class:`Format` line below.

Another package adds one through an entry point of the ``polyprof.formats`` group
naming a :class:`Format` (or a callable returning one), found the first time a format
outside this list is asked for (:func:`extensions`): its sniff only sees files no
built-in format's sniff or claim took, its reader is guarded as the built-in ones are
(``formats/safety.py``: any failure is a TraceFormatError naming the file, the event
limit holds, it must give a Trace), and its writer's failures are PolyprofErrors
naming the output.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

from .. import entrypoints
from ..errors import PolyprofError, TraceFormatError

log = logging.getLogger("polyprof")

Sniff = Callable[[bytes, Path], bool]


class Format(NamedTuple):  # not a frozen dataclass: made at every start (docs/benchmarks.md, issue 35)
    """One format: its name, how it is recognised and read, and how it is written."""

    #: what ``-f`` takes and what :func:`polyprof.formats.detect.detect` answers
    name: str
    #: one line for ``--help`` and the docs
    summary: str
    #: ``"module:function"`` (or the function): ``(path, **options) -> Trace``
    reader: str | Callable[..., Any] | None = None
    #: ``(first bytes, path) -> bool`` (gzip files: ``b"GZ"`` + the first inflated bytes)
    sniff: Sniff | None = None
    #: a looser test tried only when no format's ``sniff`` answered (e.g. by the file's
    #: name), so a damaged file gets its reader's error instead of "unrecognised format"
    claim: Sniff | None = None
    #: ``"module:function"`` (or the function): ``(trace, path) -> Path | None``
    writer: str | Callable[..., Any] | None = None
    #: output names ending so are written in this format when none is named
    suffixes: tuple[str, ...] = ()
    #: the writer makes a directory (``writer(trace, path, force=)``; it writes each
    #: file through ``polyprof.outfile`` itself)
    directory: bool = False

    def read(self, path: Path, **options: Any) -> Any:
        return _resolve(self.reader)(path, **options)  # type: ignore[arg-type]

    def write(self, trace: Any, path: str | Path, force: bool = False) -> Path:
        """Write ``trace`` at ``path``: a file beside it renamed over it (a failure leaves
        any previous file intact; a symlink at ``path`` is refused unless ``force``), or,
        for a format that writes a directory (tensorboard), files renamed into it."""
        writer = _resolve(self.writer)  # type: ignore[arg-type]
        if self.directory:
            out = writer(trace, path, force=force)
            return Path(out) if out is not None else Path(path)
        from ..outfile import write_file  # only a writer's command writes

        write_file(path, lambda tmp: writer(trace, tmp), force)
        return Path(path)

    def write_here(self, trace: Any, path: str | Path) -> None:
        """Write ``trace`` straight into ``path`` (a file format's writer, on a temporary
        file its caller renames: collect/output.py's atomic save)."""
        _resolve(self.writer)(trace, path)  # type: ignore[arg-type]


def _resolve(target: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(target):
        return target
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)


def _is_zip(head: bytes, path: Path) -> bool:
    return head[:4] == b"PK\x03\x04"


def _named_xspace(head: bytes, path: Path) -> bool:
    from .xspace import sniff

    return sniff(head, path)


def _is_json(head: bytes, path: Path) -> bool:
    body = head[2:] if head.startswith(b"GZ") else head
    return body.lstrip()[:1] in (b"{", b"[")


def _is_sqlite(head: bytes, path: Path) -> bool:
    return head.startswith(b"SQLite format 3\x00")


def _is_sqlite_or_packed(head: bytes, path: Path) -> bool:
    """SQLite, or SQLite gzipped or xz-compressed (``GZ``: detect's mark of an inflated head),
    which the nvprof, Nsight Systems, rocpd and RPD readers read from a temporary copy."""
    return head.startswith((b"SQLite format 3\x00", b"GZSQLite format 3\x00"))


def _is_nsys(head: bytes, path: Path) -> bool:
    if not _is_sqlite_or_packed(head, path):
        return False
    from .nsys import sniff

    return sniff(head, path)


def _is_rocpd(head: bytes, path: Path) -> bool:
    if not _is_sqlite_or_packed(head, path):
        return False
    from .rocpd import sniff

    return sniff(head, path)


def _is_rpd(head: bytes, path: Path) -> bool:
    if not _is_sqlite_or_packed(head, path):
        return False
    from .rpd import sniff

    return sniff(head, path)


def _is_nvprof(head: bytes, path: Path) -> bool:
    if not _is_sqlite_or_packed(head, path):
        return False
    from .nvprof import sniff

    return sniff(head, path)


def _is_rocprof_json(head: bytes, path: Path) -> bool:
    if b'"rocprofiler-sdk-tool"' not in head:  # its first key (Kineto's JSON is an object too)
        return False
    from .rocprof_json import sniff

    return sniff(head, path)


def _is_rocprof_csv(head: bytes, path: Path) -> bool:
    if head[:1] != b'"':
        return False
    from .rocprof_csv import sniff

    return sniff(head, path)


def _named_rocprof_csv(head: bytes, path: Path) -> bool:
    from .rocprof_csv import claim

    return claim(head, path)


def _is_rocprof_v1_csv(head: bytes, path: Path) -> bool:
    if not head.lstrip(b'"').startswith(b"Index"):  # its first column
        return False
    from .rocprof_v1_csv import sniff

    return sniff(head, path)


def _is_nsys_csv(head: bytes, path: Path) -> bool:
    if b"," not in head and b"Processing [" not in head:  # a CSV header, or nsys stats naming its report
        return False
    text = head[2:] if head.startswith(b"GZ") else head  # (detect.py's mark of a gzip file's head)
    if text.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"["):  # JSON: no report starts so (its module unimported)
        return False
    from .nsys_csv import sniff

    return sniff(head, path)


def _is_journal(head: bytes, path: Path) -> bool:
    return head.startswith(b"POLYPROF-JOURNAL ")  # any version: its reader says which it reads


#: the tags an XPlane may start with (formats/xspace/wire.py: _XPLANE_TAGS)
_XPLANE_FIRST = frozenset((0x08, 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A))


def _is_xspace(head: bytes, path: Path) -> bool:
    """A walk over XSpace's fields (before JSON: a plane of 91 bytes starts ``\\n[``)."""
    body = head[2:] if head.startswith(b"GZ") else head
    if len(body) < 3 or body[0] != 0x0A or (body[1] < 0x80 and body[2] not in _XPLANE_FIRST):
        # the walk's first tests fail (no plane tag, or a plane that does not start with an
        # XPlane field, as Kineto's "\n{" does): no need to import the XSpace reader
        return False
    from .xspace import is_protobuf_xspace

    if head.startswith(b"GZ"):
        return is_protobuf_xspace(head[2:], None)
    return is_protobuf_xspace(head, path.stat().st_size)


def _is_perfetto(head: bytes, path: Path) -> bool:
    """TracePackets by their field shapes (before XSpace: both start with field 1)."""
    from .perfetto_read import sniff

    return sniff(head, path)


def _is_parquet(head: bytes, path: Path) -> bool:
    return head[:4] == b"PAR1" and _tail(path, 4) == b"PAR1"  # Parquet's magic at both ends


def _tail(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(-n, 2)
            return f.read(n)
    except OSError:
        return b""


def _is_memory_timeline(head: bytes, path: Path) -> bool:
    if (head[2:] if head.startswith(b"GZ") else head).lstrip()[:1] != b"[":  # an array, unlike Kineto's
        return False
    from .torch_memory_timeline import sniff

    return sniff(head, path)


def _is_memory_snapshot(head: bytes, path: Path) -> bool:
    if head[:1] != b"\x80":  # a pickle's PROTO opcode
        return False
    from .torch_memory_snapshot import sniff

    return sniff(head, path)


#: in sniffing order (XSpace, checked by walking its fields, before JSON)
FORMATS: tuple[Format, ...] = (
    Format("polyprof", "polyprof's own archive: Arrow tables in a zip (what `run` writes)",
           reader="polyprof.formats.native:load", sniff=_is_zip,
           writer="polyprof.trace.native_write:save", suffixes=(".polyprof",)),
    Format("rocpd", "rocpd SQLite database, as rocprofv3 writes it (rocprofiler-sdk)",
           reader="polyprof.formats.rocpd:load", sniff=_is_rocpd),
    Format("rpd", "RPD SQLite database, as ROCm's rocmProfileData tracer (rpd_tracer) writes it",
           reader="polyprof.formats.rpd:load", sniff=_is_rpd),
    Format("nvprof", "nvprof's output file (nvprof -o FILE.nvvp or .nvprof: an SQLite database, CUDA 11 and earlier)",
           reader="polyprof.formats.nvprof:load", sniff=_is_nvprof),
    Format("nsys", "Nsight Systems SQLite export (nsys export --type sqlite)",
           reader="polyprof.formats.nsys:load", sniff=_is_nsys, claim=_is_sqlite),
    Format("perfetto", "Perfetto protobuf (.pftrace), streamed (no 2 GB JSON limit)",
           reader="polyprof.formats.perfetto_read:load", sniff=_is_perfetto,
           writer="polyprof.writers.perfetto:write", suffixes=(".perfetto-trace", ".pftrace")),
    Format("xspace", "XSpace protobuf (.xplane.pb), as JAX, TensorFlow and XProf write it",
           reader="polyprof.formats.xspace:load", sniff=_is_xspace, claim=_named_xspace,
           writer="polyprof.writers.xspace:write", suffixes=(".xplane.pb", ".xplane.pb.gz")),
    Format("rocprofv3-json", "rocprofv3's JSON output (results.json, rocprofiler-sdk)",
           reader="polyprof.formats.rocprof_json:load", sniff=_is_rocprof_json),
    Format("rocprofv3-csv", "rocprofv3's CSV output (<pid>_kernel_trace.csv and siblings, or their directory)",
           reader="polyprof.formats.rocprof_csv:load", sniff=_is_rocprof_csv, claim=_named_rocprof_csv),
    Format("rocprof-v1-csv", "rocprof (v1)'s kernel CSV (results.csv: a row per dispatch, with its times)",
           reader="polyprof.formats.rocprof_v1_csv:load", sniff=_is_rocprof_v1_csv),
    Format("nsys-stats-csv", "Nsight Systems' nsys stats CSV trace reports (cuda_gpu_trace, cuda_api_trace, "
           "nvtx_pushpop_trace: a file, nsys stats' printed output, or -o PREFIX's files)",
           reader="polyprof.formats.nsys_csv:load", sniff=_is_nsys_csv),
    Format("torch-memory-snapshot", "torch's CUDA memory snapshot pickle (torch.cuda.memory._dump_snapshot: "
           "what memory_viz opens), read without running any code it names",
           reader="polyprof.formats.torch_memory_snapshot:load", sniff=_is_memory_snapshot),
    Format("torch-memory-timeline", "torch.profiler's export_memory_timeline JSON (plot points or raw events)",
           reader="polyprof.formats.torch_memory_timeline:load", sniff=_is_memory_timeline),
    Format("chrome-json", "Chrome trace-event JSON, as torch.profiler/Kineto and others write it",
           reader="polyprof.formats.kineto:load", sniff=_is_json),
    Format("polyprof-journal", "the crash journal of a killed run (OUTPUT.partial)",
           reader="polyprof.formats.journal:load", sniff=_is_journal),
    Format("chrome", "Chrome JSON for Perfetto and chrome://tracing (.gz: gzipped)",
           writer="polyprof.formats.chrome:write", suffixes=(".json", ".json.gz")),
    Format("kineto", "Kineto JSON, where torch traces open (HTA, TensorBoard's torch plugin)",
           writer="polyprof.writers.kineto:write", suffixes=(".pt.trace.json", ".pt.trace.json.gz")),
    Format("tensorboard", "a TensorBoard / XProf log directory (-o names the directory)",
           writer="polyprof.writers.xspace:write_logdir", directory=True),
    Format("parquet", "the event table as Parquet, for DuckDB, pandas, polars",
           reader="polyprof.formats.parquet:load", sniff=_is_parquet,
           writer="polyprof.formats.parquet:write", suffixes=(".parquet",)),
)


def by_name(name: str) -> Format:
    for f in FORMATS:
        if f.name == name:
            return f
    for f in extensions():  # another package's (looked for only when no built-in one is named so)
        if f.name == name:
            return f
    raise PolyprofError(f"unknown format {name!r}; known: {', '.join(f.name for f in all_formats())}")


def all_formats() -> tuple[Format, ...]:
    """The built-in formats, then those of other packages (``polyprof.formats``)."""
    return FORMATS + extensions()


def readers() -> Iterator[Format]:
    """The formats with a reader, in sniffing order: another package's only after every
    built-in one, and looked for only if the built-in ones are all asked (a Kineto file's
    sniff stops at its own format: no search of the installed packages)."""
    yield from (f for f in FORMATS if f.reader)
    yield from (f for f in extensions() if f.reader)


def writers() -> list[Format]:
    return [f for f in all_formats() if f.writer]


def for_output(path: str | Path) -> Format | None:
    """The writer an output name asks for by its ending (the longest suffix that matches)."""
    name = str(path).lower()
    hits = [(len(s), f) for f in writers() for s in f.suffixes if name.endswith(s)]
    return max(hits, key=lambda h: h[0])[1] if hits else None


def write(trace: Any, path: str | Path, format: str | None = None, force: bool = False) -> Path:
    """Write ``trace`` to ``path`` in ``format``, or in the format its name ends with."""
    fmt = by_name(format) if format else for_output(path)
    if fmt is None:
        endings = ", ".join(s for f in writers() for s in f.suffixes)
        raise PolyprofError(f"{path}: cannot tell the format from the name (known endings: {endings}); "
                            "name one (format=...)")
    if not fmt.writer:
        raise PolyprofError(f"polyprof reads {fmt.name} but does not write it; writable: "
                            + ", ".join(f.name for f in writers()))
    return fmt.write(trace, path, force)


# ------------------------------------------------------------------ formats of other packages
GROUP = "polyprof.formats"
_extensions: tuple[Format, ...] | None = None


def extensions() -> tuple[Format, ...]:
    """The formats other packages declare in the ``polyprof.formats`` entry-point group,
    checked and guarded; found on first use, once per process (``polyprof/entrypoints.py``)."""
    global _extensions
    if _extensions is None:
        taken = {f.name for f in FORMATS}
        _extensions = tuple(f for _, f in entrypoints.load(GROUP, _format_of, lambda ep, f: f.name, taken))
    return _extensions


def _format_of(obj: object, ep: entrypoints.EntryPoint) -> Format:
    """The :class:`Format` an entry point names (or its callable returns), its reader,
    writer and sniffs wrapped in polyprof's guards."""
    fmt = obj if isinstance(obj, Format) or not callable(obj) else obj()
    if not isinstance(fmt, Format):
        raise entrypoints.ExtensionError(f"it gives {entrypoints.a_type(fmt)}, not a polyprof.formats.registry.Format")
    if not isinstance(fmt.name, str) or not fmt.name.strip():
        raise entrypoints.ExtensionError("its Format has no name")
    if not fmt.reader and not fmt.writer:
        raise entrypoints.ExtensionError(f"its Format {fmt.name!r} has neither a reader nor a writer")
    for what in ("reader", "writer"):
        target = getattr(fmt, what)
        if target is not None and not callable(target) and not (isinstance(target, str) and ":" in target):
            raise entrypoints.ExtensionError(f"its {what} is neither 'module:function' nor a function")
    for what in ("sniff", "claim"):
        if getattr(fmt, what) is not None and not callable(getattr(fmt, what)):
            raise entrypoints.ExtensionError(f"its {what} is not a function")
    if not isinstance(fmt.suffixes, tuple) or not all(isinstance(s, str) and s for s in fmt.suffixes):
        raise entrypoints.ExtensionError("its suffixes are not a tuple of strings")
    where = ep.describe(GROUP)
    return fmt._replace(reader=_Reader(fmt.name, fmt.reader, where) if fmt.reader else None,
                        writer=_Writer(fmt.writer) if fmt.writer else None,
                        sniff=_Sniff(fmt.sniff, where, "sniff", after_builtins=True) if fmt.sniff else None,
                        claim=_Sniff(fmt.claim, where, "claim") if fmt.claim else None,
                        suffixes=tuple(s.lower() for s in fmt.suffixes))


def _target_name(target: str | Callable[..., Any]) -> str:
    if isinstance(target, str):
        return target
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"


class _Reader:
    """Another package's reader, held to what the built-in readers promise: whatever goes
    wrong is a TraceFormatError naming the file (``formats/safety.py``), it gives a
    consistent Trace within the event limit, its metadata cleaned as theirs is."""

    def __init__(self, name: str, target: str | Callable[..., Any], where: str):
        self.name, self.target, self.where = name, target, where

    def __str__(self) -> str:
        return _target_name(self.target)

    def __call__(self, path: str | Path, **options: Any) -> Any:
        from . import safety  # the readers' guard: only once another package's reader reads
        from ..trace.core import Trace  # what it must give

        whose = f"the reader of format {self.name!r} ({self.where})"
        try:
            read = _resolve(self.target)
        except Exception as e:  # noqa: BLE001 - the installation, said as polyprof's error
            raise TraceFormatError(path, f"{whose} cannot be imported: {type(e).__name__}: {e}") from None
        with safety.reading(path), entrypoints.quiet():
            try:
                trace = read(path, **options)
            except ImportError as e:  # a module it needs: said, not a traceback
                raise TraceFormatError(path, f"{whose} needs what is not installed: {e}") from None
            if not isinstance(trace, Trace):
                raise TraceFormatError(path, f"{whose} gave a {type(trace).__name__}, not a polyprof Trace")
            safety.check_events(path, trace.n_events)
            trace.validate()
            safety.clean_metadata(trace.metadata)
        return trace


class _Writer:
    """Another package's writer, imported when it writes (inside ``outfile.replacing``:
    a failure, its import's included, is an OutputError naming the output)."""

    def __init__(self, target: str | Callable[..., Any]):
        self.target = target

    def __str__(self) -> str:
        return _target_name(self.target)

    def __call__(self, trace: Any, path: str | Path, **options: Any) -> Any:
        with entrypoints.quiet():
            return _resolve(self.target)(trace, path, **options)


class _Sniff:
    """Another package's sniff or claim: an exception is "no" (and one warning); a
    sniff is asked only about files no built-in format's claim takes (``detect`` asks
    every sniff before any claim)."""

    def __init__(self, test: Sniff, where: str, what: str, after_builtins: bool = False):
        self.test, self.where, self.what, self.after = test, where, what, after_builtins
        self.warned = False

    def __call__(self, head: bytes, path: Path) -> bool:
        if self.after and any(f.claim is not None and f.claim(head, path) for f in FORMATS if f.reader):
            return False
        try:
            with entrypoints.quiet():
                return bool(self.test(head, path))
        except Exception as e:  # noqa: BLE001 - a broken sniff must not stop the load of any file
            if not self.warned:
                self.warned = True
                log.warning("%s: its %s raised %s (%s) on %s; taken as not its file", self.where, self.what,
                            type(e).__name__, e, path)
            return False
