"""rocprof (v1)'s kernel CSV (``results.csv``), as a Trace.

rocprof v1 (ROCm's ``rocprofiler``, before rocprofv3) writes one row per kernel dispatch
when it records times (``rocprof --timestamp on``, ``--stats``, or a trace option such
as ``--hip-trace``): ``Index``, ``KernelName``, ``gpu-id``, ``queue-id``,
``queue-index``, ``pid``, ``tid``, ``grd``, ``wgr``, ``lds``, ``scr``, the register
counts (``vgpr``, or ``arch_vgpr`` and ``accum_vgpr``), ``sgpr``, ``fbar`` or
``wave_size``, ``sig``, ``obj``, ``DispatchNs``, ``BeginNs``, ``EndNs``, ``CompleteNs``
and ``DurationNs`` (the columns vary by version; counters named with ``-i`` follow).
The file is told by its header: ``Index``, ``KernelName`` first, ``BeginNs`` and
``EndNs`` in it. A header without the times is a counters-only file (``detect`` says so).

Each row is a kernel on ``/device:GPU:<gpu-id>`` (the index rocprof v1 gives the GPU,
the one its ``results.json`` names ``GPU<n>``), on a line per queue (``queue <id>``),
from ``BeginNs`` to ``EndNs`` (ns, as written). Stats: ``dispatch id`` (``Index``),
``stream`` (the queue), ``grid`` and ``block`` (``grd`` and ``wgr``: work-items, one
number each, as rocprof writes them), ``shared memory`` (``lds``), ``scratch memory``,
the register counts, and each counter column by its name. A row whose ``EndNs`` is
before its ``BeginNs`` (seen in real files) is a kernel of 0 ns, counted in a warning.
``DispatchNs`` and ``CompleteNs`` are not read: in some files they are on another
clock than ``BeginNs``/``EndNs``. The file has no host calls, so nothing is correlated.
"""

from __future__ import annotations

import csv
import io
import re
import logging
from pathlib import Path

import numpy as np

from ..errors import TraceFormatError, one_line
from ..trace import keys
from ..trace.core import Trace
from ..trace.sorting import unique, unique_inverse
from . import rocm_trace
from .parts import Part
from .safety import TIME_LIMIT_NS, check_events, guarded

log = logging.getLogger("polyprof")

#: the columns this reader takes by name (the others, when numbers, are counters)
KNOWN = frozenset(("Index", "KernelName", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr", "lds",
                   "scr", "vgpr", "arch_vgpr", "accum_vgpr", "sgpr", "fbar", "wave_size", "sig", "obj",
                   "DispatchNs", "BeginNs", "EndNs", "CompleteNs", "DurationNs"))
#: stat -> the columns it is read from (the first present)
STATS = ((keys.STREAM, ("queue-id",)), ("dispatch id", ("Index",)), ("shared memory", ("lds",)),
         ("scratch memory", ("scr",)), ("vgpr count", ("arch_vgpr", "vgpr")), ("accum vgpr count", ("accum_vgpr",)),
         ("sgpr count", ("sgpr",)), ("wave size", ("wave_size",)))
#: the columns that are integers (pyarrow is told: a cell that is not one is refused naming
#: its column; an empty one, by :func:`_ints`, naming its row)
INTS = frozenset(("Index", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr", "lds", "scr", "vgpr",
                  "arch_vgpr", "accum_vgpr", "sgpr", "fbar", "wave_size", "BeginNs", "EndNs"))
#: the largest row read (a kernel name of megabytes is refused)
BLOCK = 1 << 24


def header(head: bytes) -> list[str]:
    """The column names of a CSV file's first line ([] when it is not one)."""
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        return [c.strip() for c in next(csv.reader(io.StringIO(line.decode("utf-8", "replace"))), [])]
    except csv.Error:
        return []


def is_kernel_csv(cols: list[str]) -> bool:
    """Whether a CSV header is rocprof v1's per-dispatch file (with or without times)."""
    return cols[:2] == ["Index", "KernelName"] and "gpu-id" in cols


def sniff(head: bytes, path: Path) -> bool:
    """rocprof v1's kernel CSV with its times (``BeginNs``, ``EndNs``)."""
    if head.startswith(b"GZ"):
        return False
    cols = header(head)
    return is_kernel_csv(cols) and "BeginNs" in cols and "EndNs" in cols


def kernel_csvs(folder: Path) -> list[Path]:
    """The kernel CSVs with times (``results.csv``...) of a directory rocprof (v1) wrote
    its outputs into, told by their headers (a ``*.stats.csv`` has another, and stays out,
    as does a kernel CSV without times), in name order: for ``ranks/``, a rank each."""
    out = []
    for q in sorted(folder.iterdir()):
        if q.name.startswith(".") or not q.name.lower().endswith(".csv") or not q.is_file():
            continue
        try:
            with open(q, "rb") as f:
                head = f.read(1 << 16)
        except OSError:  # unreadable: not listed (a file named to polyprof says why)
            continue
        if sniff(head, q):
            out.append(q)
    return out


def _table(path: Path, cols: list[str]) -> object:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    text = pa.dictionary(pa.int32(), pa.string())
    use = [c for c in dict.fromkeys(cols) if c not in ("sig", "obj", "DispatchNs", "CompleteNs", "DurationNs")]
    convert = pacsv.ConvertOptions(include_columns=use, column_types={"KernelName": text, **{c: pa.int64() for c in use if c in INTS}},
                                   strings_can_be_null=False, quoted_strings_can_be_null=False)
    # the names as header() read them (stripped), so pyarrow finds every column asked for
    read = pacsv.ReadOptions(block_size=BLOCK, column_names=cols, skip_rows=1)
    try:
        return pacsv.read_csv(path, read_options=read, convert_options=convert).unify_dictionaries()
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        text = one_line(e)
        m = re.search(r"In CSV column #(\d+)", text)  # pyarrow counts the columns from 0
        named = f"column {cols[int(m.group(1))]!r}: " if m and int(m.group(1)) < len(cols) else ""
        raise TraceFormatError(path, f"malformed CSV ({named}{text})") from None


def _ints(path: Path, table: object, name: str) -> np.ndarray:
    """An integer column (read as int64: pyarrow refused any other cell, :func:`_table`),
    refused naming its first empty row."""
    import pyarrow.compute as pc

    col = table.column(name).combine_chunks()  # type: ignore[attr-defined]
    if col.null_count:
        row = int(pc.index(pc.is_null(col), True).as_py())
        raise TraceFormatError(path, f"row {row + 2}: {name} is empty")
    return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _times(path: Path, table: object, name: str) -> np.ndarray:
    """A time column (ns), refused naming its first row beyond +-2**62 ns."""
    v = _ints(path, table, name)
    far = np.flatnonzero((v < -TIME_LIMIT_NS) | (v > TIME_LIMIT_NS))
    if len(far):
        raise TraceFormatError(path, f"row {int(far[0]) + 2}: {name} is {int(v[far[0]])}, beyond +-2**62 ns")
    return v


def _counters(table: object, cols: list[str]) -> dict[str, np.ndarray]:
    """The number columns rocprof adds for the counters asked for (``-i``), by name."""
    import pyarrow as pa

    out = {}
    for c in cols:
        if c in KNOWN or c in out:
            continue
        col = table.column(c).combine_chunks()  # type: ignore[attr-defined]
        if (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)) and not col.null_count:
            out[c] = col.to_numpy(zero_copy_only=False)
    return out


def read(path: Path) -> Trace:
    with open(path, "rb") as f:
        cols = header(f.read(1 << 16))
    if not (is_kernel_csv(cols) and "BeginNs" in cols and "EndNs" in cols):
        raise TraceFormatError(path, "not rocprof (v1)'s kernel CSV: its header is not Index, KernelName, gpu-id, "
                                     "..., BeginNs, EndNs")
    twice = next((c for i, c in enumerate(cols) if c in cols[:i]), None)
    if twice is not None:
        raise TraceFormatError(path, f"its header names the column {twice!r} twice")
    table = _table(path, cols)
    n = table.num_rows  # type: ignore[attr-defined]
    check_events(path, n)
    begin, end = _times(path, table, "BeginNs"), _times(path, table, "EndNs")
    gpu = _ints(path, table, "gpu-id")
    queue = _ints(path, table, "queue-id") if "queue-id" in cols else np.zeros(n, np.int64)
    pid = _ints(path, table, "pid") if "pid" in cols else np.zeros(n, np.int64)
    names = table.column("KernelName")  # type: ignore[attr-defined]
    chunks = [c for c in names.chunks if len(c)]
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks]).astype(np.int64) \
        if chunks else np.zeros(0, np.int64)
    values = [str(v) for v in chunks[0].dictionary.to_pylist()] if chunks else []
    stats: dict[str, object] = {}
    for stat, srcs in STATS:
        col = next((c for c in srcs if c in cols), None)
        if col is not None:
            stats[stat] = _ints(path, table, col)
    for stat, col in ((keys.GRID, "grd"), (keys.BLOCK, "wgr")):
        if col in cols:
            v = _ints(path, table, col)
            uniq, inv = unique_inverse(v)
            stats[stat] = np.array([str(int(x)) for x in uniq], object)[inv]
    stats.update(_counters(table, cols))
    backwards = int(np.count_nonzero(end < begin))
    ends = np.maximum(end, begin) if backwards else end  # said below in rocprof's words, not again by rocm_trace
    part = Part("results.csv", True, begin, ends, pid, queue, gpu, codes, values, np.zeros(n, np.int64),
                [keys.CAT_KERNEL], stats)
    processes = {int(p): rocm_trace.Process(pid=int(p)) for p in unique(pid).tolist()}
    agents = {(int(p), int(g)): rocm_trace.Agent(int(g)) for p, g in set(zip(pid.tolist(), gpu.tolist()))}
    queues = {(int(p), int(g), int(q)): f"queue {int(q)}"
              for p, g, q in set(zip(pid.tolist(), gpu.tolist(), queue.tolist()))}
    md: dict[str, object] = {"clock": "rocprof (v1) timestamps (ns)",
                             "rocprof": {"format": "rocprof v1 kernel csv", "columns": cols}}
    if backwards:
        msg = (f"rocprof: {backwards} of {n} dispatches end before they begin (EndNs < BeginNs, as rocprof "
               "wrote them): read as 0 ns")
        log.warning("%s: %s", path, msg)
        md["warnings"] = [msg]
    return rocm_trace.build([part], processes, agents, queues, md, path.name)


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read rocprof (v1)'s kernel CSV (``results.csv``)."""
    return read(Path(path))
