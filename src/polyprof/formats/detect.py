"""Open any supported trace file, recognising the format from its first bytes."""

from __future__ import annotations

import errno
import os
import re
import stat
import zlib
from pathlib import Path

from ..errors import TraceFormatError
from ..trace.core import Trace
from ..trace.identity import identify
from .perfetto_read.shape import damaged_packets, varint
from .registry import by_name, readers
from .safety import BOM, XZ_MAGIC, reading

#: a compressed file cut within its first bytes (the readers' own words for one cut later)
TRUNCATED = "truncated {} data: the compressed stream ends early"


def _head(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` bytes (decompressed, after a ``GZ`` mark, for gzip files)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror or e})") from None
    if raw[:2] == b"\x1f\x8b":
        fast = _gunzip_head(raw, n)
        if fast is not None:
            return b"GZ" + fast
        import gzip  # a head the first compressed bytes do not hold: rare

        try:
            with gzip.open(path, "rb") as g:
                return b"GZ" + g.read(n)
        except EOFError:  # shorter than n once decompressed, and cut: the reader says so
            body = _partial_gunzip(raw)
            if not body.strip():  # (not "empty file": it was cut within its first bytes)
                raise TraceFormatError(path, TRUNCATED.format("gzip")) from None
            return b"GZ" + body
        except (OSError, zlib.error) as e:  # BadGzipFile is an OSError
            raise TraceFormatError(path, f"corrupt gzip data ({e})") from None
    return raw


def _unxz_head(path: Path, n: int) -> tuple[bytes, bool]:
    """The first ``n`` bytes of an xz file once decompressed (fewer: all there are), and
    whether the file ends before them and before its stream's end (cut); a corrupt file
    is refused naming it, one cut short gives what it holds (its reader says)."""
    import lzma  # only for an xz file

    d = lzma.LZMADecompressor(lzma.FORMAT_XZ)
    out = b""
    cut = False
    try:
        with open(path, "rb") as f:
            while len(out) < n and not d.eof:
                raw = f.read(_XZ_FEED) if d.needs_input else b""
                if d.needs_input and not raw:
                    cut = True
                    break
                out += d.decompress(raw, n - len(out))
    except lzma.LZMAError as e:
        raise TraceFormatError(path, f"corrupt xz data ({e})") from None
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror or e})") from None
    return out, cut


def _xz_format(path: Path) -> str:
    """The format of an xz-compressed file, when its reader streams xz (:data:`_XZ_READ`);
    any other is refused, saying to decompress it. A file cut within its first bytes is
    truncated (not empty, nor of a format read only decompressed: its head is missing)."""
    body, cut = _unxz_head(path, 4096)
    if not body.strip() and len(body) < 4096:
        raise TraceFormatError(path, TRUNCATED.format("xz") if cut else "empty file (xz-compressed)")
    head = b"GZ" + body  # the sniffs' mark of a decompressed head
    fmt = next((f for f in readers() if f.sniff is not None and f.sniff(head, path)), None)
    if fmt is not None and fmt.name in _XZ_READ:
        return fmt.name
    if cut:
        raise TraceFormatError(path, TRUNCATED.format("xz"))
    if fmt is None and _damaged_perfetto(head, path):
        return "perfetto"
    tar = _tar_problem(body, path, "xz")
    if tar:
        raise TraceFormatError(path, tar)
    what = f" ({fmt.name})" if fmt is not None else ""
    raise TraceFormatError(path, f"xz-compressed{what}: polyprof reads xz only of Chrome/Kineto JSON, Perfetto, "
                                 f"XSpace and nvprof/Nsight/rocpd/RPD databases, so decompress it first (xz -dk {path.name})")


def _gunzip_head(raw: bytes, n: int) -> bytes | None:
    """The first ``n`` decompressed bytes, when the first compressed bytes ``raw`` hold
    them (one zlib call, cheaper than opening the file with ``gzip`` the first time in a
    process); None otherwise, for ``gzip`` to read (and word any error)."""
    try:
        out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, n)
    except zlib.error:
        return None
    return out if len(out) == n else None


def _partial_gunzip(raw: bytes) -> bytes:
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw)
    except zlib.error:
        return b""


#: files of other tools' own formats polyprof does not read, by name, and what to do instead
#: (said only when no reader took the file; ``{name}``: the file's)
_NOT_READ = {
    ".nsys-rep": "an Nsight Systems report: polyprof reads its SQLite export (nsys export --type sqlite {name})",
    ".qdrep": "an Nsight Systems report (.qdrep): polyprof reads its SQLite export (nsys export --type sqlite {name})",
    ".ncu-rep": "an Nsight Compute report (per-kernel metrics, no timeline): profile with Nsight Systems and "
                "give polyprof its SQLite export",
}

#: how an NVIDIA Visual Profiler session file begins (XML: the timeline's layout, the
#: command profiled), which NVVP saves as ``.nvvp`` too, beside nvprof's SQLite ``.nvvp``
_NVVP_SESSION = re.compile(rb'\s*(?:<\?xml[^>]*\?>\s*)?<session\s+version="')
_NVVP_SESSION_IS = ("an NVIDIA Visual Profiler session (XML: its timeline's layout and the command it profiled), "
                    "not the profile data polyprof reads: give it the file nvprof writes (nvprof -o FILE.nvvp "
                    "PROGRAM: an SQLite database)")

#: the header of rocprof (v1)'s statistics CSV files (its ``tblextr.py``)
_ROCPROF_V1_STATS = b'"Name","Calls","TotalDurationNs","AverageNs","Percentage"'
#: what polyprof reads of rocprof (v1)'s outputs, said of the others
_ROCPROF_V1_READ = ("polyprof reads its results.csv (a row per kernel dispatch) and the results.json it writes "
                    "with --hip-trace, --hsa-trace or --sys-trace")
#: rocprof (v1)'s statistics files -> the file beside each that holds what it sums up
_ROCPROF_V1_SUMS = {".stats.csv": (".csv", "the kernel dispatches"),
                    ".hip_stats.csv": (".json", "the HIP calls (rocprof --hip-trace)"),
                    ".hsa_stats.csv": (".json", "the HSA calls (rocprof --hsa-trace)"),
                    ".copy_stats.csv": (".json", "the copies (rocprof --hip-trace or --sys-trace)")}


def _rocprofv3_csv(head: bytes, path: Path) -> str | None:
    """What a CSV file named as rocprofv3's that holds no events is (counters, statistics,
    agents), None for any other file."""
    if not path.name.endswith(".csv"):
        return None
    from .rocprof_csv import not_a_trace  # its reader knows rocprofv3's file kinds; loaded only for a CSV refused

    return not_a_trace(head, path)


def _rocprof_compute(head: bytes, path: Path) -> str | None:
    """What a rocprof-compute (Omniperf) workload CSV or a rocprofv3 thread-trace CSV is
    (by its header), None for any other file."""
    from .rocprof_compute import not_a_trace  # loaded only for a file no reader took

    return not_a_trace(head, path)


def _rocprof_v1_csv(head: bytes, path: Path) -> str | None:
    """What a rocprof (v1) CSV file polyprof does not read is, from its header (None for
    any other file): a statistics table, or a kernel CSV without times."""
    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    if first == _ROCPROF_V1_STATS:  # (rocprofv3's add MinNs, MaxNs, StdDev)
        what = "rocprof (v1)'s statistics (a *stats.csv file: totals per name), not a trace; "
        for kind, (ext, events) in _ROCPROF_V1_SUMS.items():
            if path.name.endswith(kind):
                return what + f"give polyprof {path.name[: -len(kind)]}{ext} beside it instead: {events} it sums up"
        return what + _ROCPROF_V1_READ
    from .rocprof_v1_csv import header, is_kernel_csv  # (a CSV file no reader took: whose it is)

    cols = header(first)
    if is_kernel_csv(cols) and not {"BeginNs", "EndNs"} <= set(cols):
        return ("rocprof (v1)'s kernel CSV without times (its counters per dispatch, no BeginNs/EndNs): not a "
                "trace; run rocprof with --timestamp on (or --stats, --hip-trace) to record the dispatches' times")
    return None


#: magic bytes of compressions polyprof does not read -> (name, the command that undoes it);
#: xz is read for the formats in :data:`_XZ_READ` (inflated by ``formats/inflate.py``)
_OTHER_COMPRESSION = {XZ_MAGIC: ("xz", "xz -dk"), b"BZh": ("bzip2", "bunzip2 -k"),
                      b"\x28\xb5\x2f\xfd": ("zstd", "zstd -d"), b"\x04\x22\x4d\x18": ("lz4", "lz4 -d")}
#: the formats whose reader reads xz-compressed files within the inflation limits, as it
#: reads gzipped ones: Chrome/Kineto JSON and Perfetto streamed (``.json.xz``,
#: ``.pftrace.xz``), XSpace inflated whole (``.xplane.pb.xz``, ``xspace/wire.py``), the
#: SQLite databases of nvprof, Nsight Systems, rocpd and RPD inflated into a temporary file
#: (``.nvvp.xz``, ``sqlite_db.inflated``)
_XZ_READ = frozenset(("chrome-json", "perfetto", "xspace", "nvprof", "nsys", "rocpd", "rpd"))
#: compressed bytes read at a time for an xz file's head
_XZ_FEED = 1 << 16

#: where a tar archive's header holds its magic (POSIX ``ustar\0``, GNU ``ustar  \0``)
_TAR_MAGIC_AT = 257


def _tar_problem(body: bytes, path: Path, packed: str = "") -> str | None:
    """What to do with a tar archive (``body``: its first bytes, decompressed), None for
    any other file; ``packed``: the compression it came in."""
    if body[_TAR_MAGIC_AT:_TAR_MAGIC_AT + 5] != b"ustar":
        return None
    return (f"a tar archive{f' ({packed}-compressed)' if packed else ''}, not a trace: extract it first "
            f"(tar xf {path.name}) and give polyprof the trace files in it, or their directory")


#: magic bytes of formats read in place (random access), which a gzipped copy hides
_READ_IN_PLACE = {b"SQLite format 3\x00": "SQLite database", b"PK\x03\x04": "zip archive (a .polyprof file?)",
                  b"PAR1": "Parquet file"}


#: how a Git LFS pointer file begins (a repository's trace not fetched from LFS storage)
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"


#: pprof's Profile message (google/pprof, proto/profile.proto) and the messages in it:
#: field number -> the wire types it is written with (0 varint, 2 length-delimited; 13,
#: ``comment``, and Sample's ids and values are repeated int64s, packed or not)
_PPROF = {1: (2,), 2: (2,), 3: (2,), 4: (2,), 5: (2,), 6: (2,), 7: (0,), 8: (0,), 9: (0,), 10: (0,), 11: (2,),
          12: (0,), 13: (0, 2), 14: (0,), 15: (0,)}
_PPROF_PARTS: dict[int, dict[int, tuple[int, ...]]] = {
    1: {1: (0,), 2: (0,)},  # sample_type: ValueType (type, unit: string table indices)
    11: {1: (0,), 2: (0,)},  # period_type: ValueType
    2: {1: (0, 2), 2: (0, 2), 3: (2,)},  # sample: location ids, values, labels
    3: {f: (0,) for f in range(1, 11)},  # mapping: ids, addresses, string indices, flags
    4: {1: (0,), 2: (0,), 3: (0,), 4: (2,), 5: (0,)},  # location: id, mapping, address, lines, folded
    5: {f: (0,) for f in range(1, 6)},  # function: id, name, system name, file, start line
}
#: the most top-level fields read for the message about a pprof file (its string table
#: comes last; 64 MB of one-byte fields took 9-14 s): past them, no hint for JAX's
_PPROF_FIELDS = 1 << 20
#: what a pprof profile is, said when one is given as a trace
_PPROF_IS = "a pprof profile (sampled stacks or a memory snapshot), not a trace"


def _varint(b: bytes, i: int) -> tuple[int, int]:
    """The varint at ``b[i]`` and where it ends (``perfetto_read.shape.varint``: sniffing
    has it loaded): IndexError where the end of ``b`` cuts it, ValueError past 10 bytes."""
    value, end = varint(b, i)
    if value is None:
        raise ValueError("varint longer than 10 bytes") if end - i >= 10 else IndexError(i)
    return value, end


def _pb_fields(b: bytes, wires: dict[int, tuple[int, ...]],
               limit: int = 1 << 62) -> list[tuple[int, int | bytes, bool]] | None:
    """The fields of the protobuf message ``b`` as (number, value: an int, or the bytes of
    a length-delimited one, whole or not), None where a field is not one of ``wires`` with
    its wire type. The end of ``b`` may cut the last field (a file's head): it is left out
    if its value is not there at all. At most ``limit`` fields are read."""
    out: list[tuple[int, int | bytes, bool]] = []
    i = 0
    try:
        while i < len(b) and len(out) < limit:
            tag, i = _varint(b, i)
            if tag & 7 not in wires.get(tag >> 3, ()):
                return None
            if tag & 7 == 0:
                v, i = _varint(b, i)
                out.append((tag >> 3, v, True))
                continue
            size, i = _varint(b, i)
            out.append((tag >> 3, b[i:i + size], i + size <= len(b)))
            i += size
    except IndexError:
        pass  # cut by the head's end
    except ValueError:
        return None
    return out


def _is_pprof(head: bytes) -> bool:
    """Whether a file's head (``_head``) is a pprof Profile, gzipped or not: its fields and
    those of the messages in it as pprof writes them, starting with a ``sample_type`` and
    with some other field (an XSpace starts with field 1 too: its first plane, which
    holds a name, so is no ValueType)."""
    body = head[2:] if head.startswith(b"GZ") else head
    if body[:1] != b"\n":
        return False
    fields = _pb_fields(body, _PPROF)
    if not fields or fields[0][0] != 1 or all(f == 1 for f, _, _ in fields):
        return False
    for f, v, whole in fields:
        if not whole or type(v) is not bytes:
            continue
        if f == 6:
            try:
                v.decode()
            except UnicodeDecodeError:
                return False
        elif f in _PPROF_PARTS:
            got = _pb_fields(v, _PPROF_PARTS[f])
            if got is None or not all(w for _, _, w in got):
                return False
    return True


def _pprof_problem(path: Path) -> str:
    """What a pprof file is and, for JAX's device memory profile (its sample types
    ``allocations``/``count`` and ``space``/``bytes``, labels ``kind``), what to give
    polyprof instead."""
    import gzip  # only here, for the message: the whole profile, up to 64 MB

    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gz else open(path, "rb") as file:
            body = file.read(1 << 26)
    except (OSError, EOFError, zlib.error):
        body = b""
    fields = _pb_fields(body, _PPROF, _PPROF_FIELDS) or []
    strings = [v for f, v, _ in fields if f == 6]
    types = []
    for f, v, _ in fields:
        parts = _pb_fields(v, _PPROF_PARTS[1]) if f == 1 and type(v) is bytes else None
        if parts is not None:
            named = {k: strings[x] for k, x, _ in parts if type(x) is int and x < len(strings)}
            types.append((named.get(1), named.get(2)))
    if types[:2] == [(b"allocations", b"count"), (b"space", b"bytes")] and b"kind" in strings:
        return (f"{_PPROF_IS}: JAX's device memory profile (the buffers live at one moment); a trace from "
                "jax.profiler.trace holds the allocations polyprof reads (on GPU and TPU; XLA's CPU runtime "
                "records none)")
    return _PPROF_IS


#: what a file whose content is told by its first bytes and read again (or in place) may
#: not be, by ``stat``: a pipe's bytes are gone once sniffed, and opening one without a
#: writer waits for ever
_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _checked_stat(path: Path) -> os.stat_result:
    """``path``'s stat, or the TraceFormatError that says why there is none (no such
    file, a symbolic link loop or one to nothing, no permission)."""
    try:
        return os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise TraceFormatError(path, "a symbolic link loop (its links lead back to themselves, never to a "
                                         "file)") from None
        if e.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise TraceFormatError(path, f"cannot be read ({e.strerror or e})") from None
    if path.is_symlink():
        raise TraceFormatError(path, f"a symbolic link to {os.readlink(path)}, which does not exist")
    partial = Path(str(path) + ".partial")
    if partial.exists():
        raise TraceFormatError(path, f"no such file, but {partial} is there: the profiled program "
                                     "was killed before the trace was written; load that file instead")
    raise TraceFormatError(path, "no such file")


def detect(path: str | Path) -> str:
    path = Path(path)
    mode = _checked_stat(path).st_mode
    what = next((w for test, w in _NOT_REGULAR if test(mode)), None)
    if what:  # refused before it is opened
        raise TraceFormatError(path, f"is {what}, not a trace file: polyprof reads a file's first bytes to "
                                     "tell its format and then reads it again, so save the data to a file first")
    if stat.S_ISDIR(mode):
        from .rocprof_csv import is_output_dir  # the one format that is a directory of files

        if is_output_dir(path):
            return "rocprofv3-csv"
        from .nsys_csv import is_output_dir as nsys_reports  # nsys stats -o PREFIX's CSV files

        if nsys_reports(path):
            return "nsys-stats-csv"
        raise TraceFormatError(path, "is a directory, not a trace file (polyprof.load_ranks reads its traces as a "
                                     "job's ranks; the polyprof commands read a directory of one trace as that trace)")
    head = _head(path)
    if head.startswith((BOM, b"GZ" + BOM)):  # a UTF-8 byte-order mark before a JSON file's text
        head = head[:head.index(BOM)] + head[head.index(BOM) + len(BOM):]
    if head.startswith(XZ_MAGIC):
        return _xz_format(path)
    if _is_blank(path, head):
        raise TraceFormatError(path, "empty file")
    if _is_pprof(head):  # before the sniffs: XSpace's would take it (both start with field 1)
        raise TraceFormatError(path, _pprof_problem(path))
    for fmt in readers():
        if fmt.sniff is not None and fmt.sniff(head, path):
            return fmt.name
    for fmt in readers():
        if fmt.claim is not None and fmt.claim(head, path):
            return fmt.name
    if head.startswith(_LFS_POINTER):
        size = next((w[1] for w in (ln.split() for ln in head.splitlines()) if len(w) == 2 and w[0] == b"size"),
                    b"")
        of = f" of {int(size):,} bytes" if size.isdigit() else ""
        raise TraceFormatError(path, f"a Git LFS pointer, not the trace: the file{of} is in LFS storage; "
                                     "fetch it first (git lfs pull)")
    hint = next((h.format(name=path.name) for suffix, h in _NOT_READ.items() if path.name.lower().endswith(suffix)),
                None) or _rocprof_v1_csv(head, path) or _rocprofv3_csv(head, path) or _rocprof_compute(head, path) \
        or (_NVVP_SESSION_IS if _NVVP_SESSION.match(head) else None)
    if hint:
        raise TraceFormatError(path, hint)
    if head.startswith(b"PAR1"):  # (the reader's sniff wants the magic at both ends)
        raise TraceFormatError(path, "a Parquet file cut short: it does not end with its footer (the magic PAR1 "
                                     "after its metadata); it was not written to the end or was truncated since")
    tar = _tar_problem(head[2:], path, "gzip") if head.startswith(b"GZ") else _tar_problem(head, path)
    if tar:
        raise TraceFormatError(path, tar)
    inner = next((what for magic, what in _READ_IN_PLACE.items() if head.startswith(b"GZ" + magic)), None)
    if inner:  # as raptor's tests keep RPD files
        why = (", of no format polyprof reads compressed (nvprof, Nsight Systems, rocpd and RPD files are) or "
               "damaged:" if inner == "SQLite database" else ": it is read in place, not as a stream, so")
        raise TraceFormatError(path, f"a gzipped {inner}{why} decompress it first (gunzip -k {path.name})")
    packer = next((c for magic, c in _OTHER_COMPRESSION.items() if head.startswith(magic)), None)
    if packer:
        raise TraceFormatError(path, f"{packer[0]}-compressed: polyprof reads plain files, gzipped ones and the "
                                     "xz-compressed ones of some formats (Chrome/Kineto JSON, Perfetto, XSpace, "
                                     f"nvprof/Nsight/rocpd/RPD databases), so decompress it first ({packer[1]} "
                                     f"{path.name})")
    if _damaged_perfetto(head, path):
        return "perfetto"
    raise TraceFormatError(path, "unrecognised format: none of those polyprof reads ("
                           + ", ".join(f.name for f in readers()) + "; `polyprof summary --help` says what each is)")


#: the names Perfetto's tools give their traces (gzip and xz forms too)
_PERFETTO_NAMES = tuple(s + c for s in (".pftrace", ".perfetto-trace") for c in ("", ".gz", ".xz"))


def _damaged_perfetto(head: bytes, path: Path) -> bool:
    """True for a file no reader took that is a damaged Perfetto trace, for its reader to
    say where and what is wrong (the byte offset; docs/formats.md), not "unrecognised
    format": one whose first packet's length runs past the file (a trace cut inside its
    first packet, or its length damaged), or, named as Perfetto's tools name their
    traces, one that starts with a packet (``shape.damaged_packets``). A file of other
    bytes so named is still "unrecognised" (and is not replaced as an output)."""
    body = head[2:] if head.startswith(b"GZ") else head
    if head.startswith(b"GZ"):  # a head shorter than asked for is all the inflated file
        total = len(body) if len(body) < 4096 else None
    else:
        total = path.stat().st_size
    return damaged_packets(body, total, path.name.lower().endswith(_PERFETTO_NAMES))


#: keys only a Chrome / Kineto trace's JSON has (the object's ``traceEvents`` and what
#: Kineto writes before it; an event's ``ph`` in the array format)
_TRACE_KEYS = re.compile(rb'"(?:traceEvents|systemTraceEvents|schemaVersion|deviceProperties|distributedInfo|'
                         rb'displayTimeUnit|ph)"\s*:')
#: how much of a JSON file is looked at for those keys (Kineto's ``traceEvents`` follows
#: the devices' properties: 3.4 kB for 8 GPUs)
_JSON_HEAD = 1 << 16


def why_not_a_trace(path: Path) -> str:
    """Why ``path`` is no trace of a format polyprof reads ("": it is one, or may be a
    damaged one: its reader says)."""
    try:
        if path.stat().st_size == 0:
            return "empty"
        head = _head(path)
    except (OSError, TraceFormatError):
        return ""  # unreadable, or gzip data that is not: the rank fails saying so
    if head.startswith(XZ_MAGIC):
        return _why_not_xz(path)
    if _is_blank(path, head):
        return "empty"
    if _is_pprof(head):
        return _PPROF_IS
    if _rocprof_v1_db(head, path):  # beside its results.json in rocprof's output directory
        return "rocprof (v1)'s results.db; its results.json and results.csv hold its events"
    try:
        fmt = next((f for f in readers() if f.sniff is not None and f.sniff(head, path)), None)
    except TraceFormatError:  # a compressed database damaged or past the limits: its rank fails saying so
        return ""
    if fmt is not None:
        return "" if fmt.name != "chrome-json" or _json_trace(path, head) else _other_json(head, path)
    if any(f.claim is not None and f.claim(head, path) for f in readers()):
        return ""
    body = head[2:] if head.startswith(b"GZ") else head
    if head.startswith(_LFS_POINTER) or body.startswith(b"SQLite format 3\x00") \
            or any(head.startswith(m) for m in _OTHER_COMPRESSION):
        return ""  # a trace polyprof cannot read as it is: the rank fails saying what to do
    return "not a format polyprof reads"


def _other_json(head: bytes, path: Path) -> str:
    """:func:`why_not_a_trace` of a JSON file that is no Chrome/Kineto trace: whose it is
    where its name or first keys say (rocprofv3 --att's viewer files), else that."""
    from .rocprof_compute import is_thread_trace_head  # (a JSON file no reader takes: whose it is)

    return ("rocprofv3 thread trace (--att) output, for ROCprof Compute Viewer" if is_thread_trace_head(head, path)
            else "JSON, not a Chrome/Kineto trace")


def _why_not_xz(path: Path) -> str:
    """:func:`why_not_a_trace` of an xz-compressed file: "empty", or JSON that is no
    Chrome/Kineto trace; "" for any other (a trace, or one its rank fails on, saying why)."""
    try:
        body, cut = _unxz_head(path, _JSON_HEAD)
    except TraceFormatError:
        return ""
    if not body.strip() and len(body) < _JSON_HEAD:
        return "" if cut else "empty"  # (cut: truncated, which its rank says)
    if body.lstrip()[:1] in (b"{", b"[") and not _TRACE_KEYS.search(body):
        return "JSON, not a Chrome/Kineto trace"
    return ""


def _rocprof_v1_db(head: bytes, path: Path) -> bool:
    """Whether ``path`` is rocprof (v1)'s results.db (``nsys.is_rocprof_v1_db``)."""
    if not head.startswith(b"SQLite format 3\x00"):
        return False
    from . import sqlite_db  # (an SQLite file in a directory's listing: whose it is)
    from .nsys import is_rocprof_v1_db  # (the same)

    return sqlite_db.sniff(head, path, is_rocprof_v1_db)


def _json_trace(path: Path, head: bytes) -> bool:
    """Whether a JSON file is a Chrome / Kineto trace: one of its keys in its first
    :data:`_JSON_HEAD` bytes."""
    if _TRACE_KEYS.search(head):
        return True
    try:
        return bool(_TRACE_KEYS.search(_head(path, _JSON_HEAD)))
    except (OSError, TraceFormatError):
        return True


def _is_blank(path: Path, head: bytes, n: int = 4096) -> bool:
    """The whole file (decompressed) is empty or whitespace."""
    gz = head.startswith(b"GZ")
    body = head[2:] if gz else head
    if body.strip():
        return False
    return len(body) < n if gz else path.stat().st_size == len(body)


def load(path: str | Path, **options) -> Trace:
    """Load a trace of any supported format."""
    path = Path(path)
    read = by_name(detect(path)).read
    with reading(path):  # the readers guard themselves too; a plugin-registered one may not
        trace = read(path, **options)
        return identify(trace, label=path.name)
