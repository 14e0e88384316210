"""The reports in ``nsys stats`` CSV text: where each table is, and its columns.

A file holds one report (``nsys stats -f csv -o PREFIX`` writes ``PREFIX_<report>.csv``)
or several, one after the other, as ``nsys stats`` prints them (``Processing [x.sqlite]
with [.../cuda_gpu_trace.py]...`` before each, NOTICE and SKIPPED lines, blank lines
between). A table starts at a header line this module knows (by its column names, any
nsys version's: units in parentheses, ``CorrId`` / ``CorrID``, ``Pid`` / ``PID``) and
ends at the next blank line or ``Processing [`` line. Summaries (``*_sum``: ``Time (%)``,
``Avg``, ``Med``...) are found too, so that the reader can name them when it refuses
them. The file is mapped, not read: boundaries are found with ``find`` over its bytes,
each table is parsed by pyarrow's streaming CSV reader, batch by batch, each batch
counted against the event limit (``safety.check_events``) before the next is read.
"""

from __future__ import annotations

import csv
import io
import mmap
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import TraceFormatError, one_line
from ..safety import TIME_LIMIT_NS, check_events

#: the longest line looked at as a possible header (a report's header is < 300 bytes)
HEADER_MAX = 4096
#: lines that are no table looked at one by one (``nsys stats``'s preamble, a program's
#: output before it); past them the scan jumps to the next ``Processing [`` line
PREAMBLE_LINES = 10_000

#: report -> the columns (normalised: :func:`column`) that tell its header
TRACE_REPORTS = {
    "cuda_gpu_trace": ("start", "duration", "corrid", "grdx", "strm", "name"),
    "cuda_api_trace": ("start", "duration", "name", "corrid", "pid", "tid"),
    "nvtx_pushpop_trace": ("start", "end", "name", "pid", "tid", "lvl"),
    "nvtx_gpu_proj_trace": ("name", "projectedstart", "origstart", "origduration", "pid", "tid"),
}
#: the report names of older nsys (2021: ``gputrace``, ``cudaapitrace``, ``nvtxpptrace``)
OLD_NAMES = {"gputrace": "cuda_gpu_trace", "cudaapitrace": "cuda_api_trace", "nvtxpptrace": "nvtx_pushpop_trace"}
#: nsys's summary reports (no timeline), to name them apart from a file's prefix
SUMMARIES = ("cuda_api_sum", "cuda_api_gpu_sum", "cuda_gpu_kern_sum", "cuda_gpu_kern_gb_sum", "cuda_gpu_mem_size_sum",
             "cuda_gpu_mem_time_sum", "cuda_gpu_sum", "cuda_kern_exec_sum", "nvtx_gpu_proj_sum", "nvtx_kern_sum",
             "nvtx_pushpop_sum", "nvtx_startend_sum", "nvtx_sum", "openacc_sum", "openmp_sum", "osrt_sum", "um_sum",
             "um_total_sum", "um_cpu_page_faults_sum", "mpi_event_sum", "cudaapisum", "gpukernsum", "gpumemsizesum",
             "gpumemtimesum", "gpusum", "nvtxsum", "osrtsum")
#: columns read as integers, as floats; the rest are text
INTS = frozenset(("corrid", "grdx", "grdy", "grdz", "blkx", "blky", "blkz", "regtrd", "ctx", "greenctx", "strm",
                  "pid", "tid", "result", "lvl", "rangeid", "parentid"))
FLOATS = frozenset(("stcsmem", "dymsmem", "bytes"))
TIMES = frozenset(("start", "duration", "end", "projectedstart", "projectedduration", "origstart", "origduration"))
TEXTS = frozenset(("name", "device", "srcmemkd", "dstmemkd", "threadname", "style"))
#: time units nsys writes in a column's parentheses (``--timeunit``) -> ns
TIME_UNITS = {"ns": 1, "nsec": 1, "us": 1_000, "usec": 1_000, "ms": 1_000_000, "msec": 1_000_000,
              "s": 1_000_000_000, "sec": 1_000_000_000}
#: size units -> bytes (nsys's MB is 10^6 bytes: a 4 MiB copy is 4.194 MB)
SIZE_UNITS = {"": 1_000_000, "b": 1, "byte": 1, "bytes": 1, "kb": 1_000, "mb": 1_000_000, "gb": 1_000_000_000,
              "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
REPORT_LINE = re.compile(rb"Processing \[[^\]\n]*\] with \[(?:[^\]\n]*[/\\])?([A-Za-z0-9_]+)(?:\.py)?\]")
_COLUMN = re.compile(r"^\s*(.*?)\s*(?:\(([^()]*)\))?\s*$")


def column(text: str) -> tuple[str, str]:
    """(key, unit) of a header cell: ``"Start (ns)"`` -> ``("start", "ns")``,
    ``"Reg/Trd"`` -> ``("regtrd", "")``, ``"CorrID"`` -> ``("corrid", "")``."""
    m = _COLUMN.match(text)
    name, unit = (m.group(1), m.group(2) or "") if m else (text, "")
    return re.sub(r"[^a-z0-9]", "", name.lower()), unit.strip().lower()


def kind_of(cells: list[str]) -> str | None:
    """What a header line is: a trace report's name, ``"summary"``, or None."""
    keys = {column(c)[0] for c in cells}
    if len(cells) < 3:
        return None
    for name, need in TRACE_REPORTS.items():
        if keys.issuperset(need):
            return name
    if keys.issuperset(("avg", "med", "min", "max", "stddev")):  # every *_sum report's statistics
        return "summary"
    return None


def header_cells(line: bytes) -> list[str]:
    if len(line) > HEADER_MAX or b"," not in line:
        return []
    try:
        return next(csv.reader(io.StringIO(line.decode("utf-8", "replace").rstrip("\r"))), [])
    except csv.Error:
        return []


def report_named(text: str) -> str | None:
    """The report a file name or ``Processing [...]`` line names (``PREFIX_cuda_gpu_trace.csv``)."""
    stem = text[:-4] if text.endswith(".csv") else text
    for name in sorted([*TRACE_REPORTS, *OLD_NAMES, *SUMMARIES], key=len, reverse=True):
        if stem == name or stem.endswith("_" + name):
            return OLD_NAMES.get(name, name)
    m = re.search(r"([a-z0-9]+(?:_[a-z0-9]+)*_sum)$", stem)
    return m.group(1) if m else None


#: how much of a file is looked at for a report's header when its first bytes are nsys's preamble
_SNIFF_MORE = 1 << 16
_PREAMBLE_WORDS = (b"Processing [", b"NOTICE:", b"Generating SQLite", b"Exporting ", b"SKIPPED:")


def _kinds(head: bytes) -> set[str]:
    lines = head.split(b"\n")
    if len(head) >= HEADER_MAX and len(lines) > 1:
        lines = lines[:-1]  # the last may be cut by the head's end
    return {k for ln in lines if (k := kind_of(header_cells(ln.rstrip(b"\r")))) is not None}


def sniff(head: bytes, path: Path) -> bool:
    """Text whose first line is a report's header, or nsys's preamble and a header after it."""
    if head.startswith(b"GZ") or b"\x00" in head:
        return False
    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    if kind_of(header_cells(first)) is not None:
        return True
    if not any(w in head for w in _PREAMBLE_WORDS):
        return False
    named = [m.group(1).decode("ascii", "replace") for m in REPORT_LINE.finditer(head)]
    if _kinds(head) or any(n in TRACE_REPORTS or n in OLD_NAMES or n.endswith("_sum") for n in named):
        return True  # a report's header, or nsys naming the report it runs: its table may come later
    try:
        with open(path, "rb") as f:
            return bool(_kinds(f.read(_SNIFF_MORE)))
    except OSError:
        return False


@dataclass
class Table:
    """One report's table in a file: its header and where its rows are."""

    kind: str  # a TRACE_REPORTS name or "summary"
    cells: list[str]
    start: int  # byte offset of the first row
    end: int  # byte offset past the last whole row
    report: str | None = None  # the report's name, where the file or a Processing line says it
    cut: bool = False  # the last line was cut short (no newline at the end of the file) and is left out


@dataclass
class Scan:
    tables: list[Table] = field(default_factory=list)
    reports_named: list[str] = field(default_factory=list)  # by Processing lines, tables or not


def scan(mm: Any, size: int, file_report: str | None) -> Scan:
    """The tables of a mapped file (``mm``: bytes or an mmap)."""
    out = Scan()
    pos, other, report = 0, 0, file_report
    while pos < size:
        nl = mm.find(b"\n", pos, min(size, pos + HEADER_MAX + 2))
        end = size if nl < 0 else nl
        line = mm[pos:end] if end - pos <= HEADER_MAX else b""
        nxt = size if nl < 0 else nl + 1
        if nl < 0 and size - pos > HEADER_MAX:  # a line too long to be a header: skip past it
            far = mm.find(b"\n", pos)
            nxt = size if far < 0 else far + 1
        m = REPORT_LINE.match(line)
        if m:
            report = m.group(1).decode("ascii", "replace")
            out.reports_named.append(report)
            pos, other = nxt, 0
            continue
        cells = header_cells(line)
        kind = kind_of(cells) if cells else None
        if kind is None:
            other += 1
            if other > PREAMBLE_LINES:  # no Python loop over a long run of other lines
                at = mm.find(b"\nProcessing [", pos)
                if at < 0:
                    break
                nxt, other = at + 1, 0
            pos = nxt
            continue
        other = 0
        stop = _table_end(mm, nxt, size)
        cut = False
        if stop == size and size > nxt and mm[size - 1:size] != b"\n":
            last = mm.rfind(b"\n", nxt, size)
            stop, cut = (last + 1 if last >= 0 else nxt), True
        out.tables.append(Table(kind, cells, nxt, stop, report, cut))
        report = file_report
        pos = max(stop, nxt)
        if cut:
            break
    return out


def _table_end(mm: Any, start: int, size: int) -> int:
    """Where a table's rows end: at a blank line or a ``Processing [`` line."""
    ends = [size]
    for mark, skip in ((b"\n\n", 1), (b"\n\r\n", 1), (b"\nProcessing [", 1)):
        at = mm.find(mark, max(start - 1, 0), size)
        if at >= 0:
            ends.append(at + skip)
    return max(min(ends), start)


class Columns:
    """A table's columns, by normalised key: integers and floats as NumPy arrays (NaN / a
    default where a cell is empty), texts as codes and distinct values, times in ns."""

    def __init__(self, path: Path, table: Table, cols: dict[str, Any], units: dict[str, str], n: int):
        self.path, self.table, self.cols, self.units, self.n = path, table, cols, units, n

    def has(self, key: str) -> bool:
        return key in self.cols

    def ints(self, key: str, default: int = -1) -> np.ndarray:
        if key not in self.cols:
            return np.full(self.n, default, np.int64)
        col = self.cols[key]
        return _fill(col, default)

    def ended(self, key: str) -> np.ndarray:
        """Rows where column ``key`` has a value (all rows where there is no such column)."""
        if key not in self.cols or not self.cols[key].null_count:
            return np.ones(self.n, bool)
        import pyarrow.compute as pc

        return pc.is_valid(self.cols[key]).to_numpy(zero_copy_only=False)

    def take(self, rows: np.ndarray) -> "Columns":
        """These columns at ``rows`` (a boolean mask)."""
        import pyarrow as pa

        mask = pa.array(rows)
        return Columns(self.path, self.table, {k: v.filter(mask) for k, v in self.cols.items()}, self.units,
                       int(rows.sum()))

    def time(self, key: str) -> np.ndarray:
        """A time column in ns (its unit from the header); an empty cell is an error."""
        col = self.cols[key]
        if col.null_count:
            import pyarrow.compute as pc

            row = int(pc.index(pc.is_null(col), True).as_py())
            raise TraceFormatError(self.path, f"{self.table.report or self.table.kind}: row {row + 1}: "
                                              f"{self.table_header(key)} is empty")
        scale = TIME_UNITS[self.units[key]]
        vals = col.to_numpy(zero_copy_only=False)
        if vals.dtype.kind == "f":
            with np.errstate(over="ignore", invalid="ignore"):
                ns = vals * scale
            if not (np.abs(ns) < 2.0 ** 62).all():  # NaN, inf, or past any trace's times
                row = int(np.flatnonzero(~(np.abs(ns) < 2.0 ** 62))[0])
                raise TraceFormatError(self.path, f"{self.table.report or self.table.kind}: row {row + 1}: "
                                                  f"{self.table_header(key)} is {float(vals[row])!r}, not a time")
            return np.rint(ns).astype(np.int64)
        far = (vals < -(TIME_LIMIT_NS // scale)) | (vals > TIME_LIMIT_NS // scale)  # past any trace's times
        if far.any():
            row = int(np.flatnonzero(far)[0])
            raise TraceFormatError(self.path, f"{self.table.report or self.table.kind}: row {row + 1}: "
                                              f"{self.table_header(key)} is {int(vals[row])}, beyond +-2**62 ns")
        return vals.astype(np.int64, copy=False) * scale

    def size(self, key: str) -> np.ndarray:
        """A size column in bytes (NaN-free: -1 where empty)."""
        if key not in self.cols:
            return np.full(self.n, -1, np.int64)
        with np.errstate(over="ignore", invalid="ignore"):
            vals = _fill(self.cols[key], np.nan).astype(np.float64) * SIZE_UNITS.get(self.units.get(key, ""), 1_000_000)
        bad = ~np.isnan(vals) & ~((vals >= 0) & (vals < 2.0 ** 62))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise TraceFormatError(self.path, f"{self.table.report or self.table.kind}: row {row + 1}: "
                                              f"{self.table_header(key)} is not a size")
        return np.where(np.isnan(vals), -1, np.rint(np.nan_to_num(vals))).astype(np.int64)

    def texts(self, key: str) -> tuple[np.ndarray, list[str]]:
        """Codes and distinct values of a text column ("" where empty or missing)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if key not in self.cols or not self.n:
            return np.zeros(self.n, np.int64), [""]
        col = self.cols[key]
        if not pa.types.is_dictionary(col.type):
            col = pc.dictionary_encode(pc.cast(col, pa.string()))
        chunks = [c for c in col.chunks if len(c)]  # one dictionary: the table's were unified
        vals = [str(v) for v in chunks[0].dictionary.to_pylist()]
        idx = pa.chunked_array([c.indices for c in chunks])
        if idx.null_count:  # empty cells: ""
            idx = pc.fill_null(idx, len(vals))
            vals.append("")
        return idx.to_numpy().astype(np.int64), vals

    def table_header(self, key: str) -> str:
        return next((c for c in self.table.cells if column(c)[0] == key), key)


def _fill(col: Any, default: float) -> np.ndarray:
    import pyarrow.compute as pc

    if col.null_count:
        col = pc.fill_null(col, default)
    return col.to_numpy(zero_copy_only=False)


def read_table(path: Path, mm: Any, table: Table, counted: int) -> Columns:
    """The columns of ``table`` (only those a reader uses), read in batches: ``counted``
    events are already read from other tables; the limit is checked after each batch."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    keys = [column(c) for c in table.cells]
    names = [f"c{i}" for i in range(len(keys))]
    types: dict[str, Any] = {}
    units: dict[str, str] = {}
    use: dict[str, str] = {}
    for name, (key, unit) in zip(names, keys):
        if key in use.values() or key not in INTS | FLOATS | TIMES | TEXTS:
            continue
        if key in TIMES:
            if unit not in TIME_UNITS and unit:
                raise TraceFormatError(path, f"{table.report or table.kind}: unknown time unit {unit!r} "
                                             f"in column {table.cells[names.index(name)]!r}")
            unit = unit or "ns"
            types[name] = pa.int64() if unit in ("ns", "nsec") else pa.float64()
        else:
            types[name] = (pa.int64() if key in INTS else pa.float64() if key in FLOATS
                           else pa.dictionary(pa.int32(), pa.string()))  # texts: each distinct one kept once
        use[name], units[key] = key, unit
    body = memoryview(mm)[table.start:table.end] if isinstance(mm, mmap.mmap) else mm[table.start:table.end]
    batches: list[Any] = []
    n = 0
    if table.end > table.start:
        try:
            reader = pacsv.open_csv(pa.BufferReader(pa.py_buffer(body)),
                                    read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 20),
                                    parse_options=pacsv.ParseOptions(newlines_in_values=False),
                                    convert_options=pacsv.ConvertOptions(
                                        include_columns=list(use), column_types=types,
                                        strings_can_be_null=True, quoted_strings_can_be_null=False))
            for batch in reader:
                n += batch.num_rows
                check_events(path, counted + n, so_far=True)
                batches.append(batch)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise TraceFormatError(path, f"{table.report or table.kind}: malformed CSV ({one_line(e)})") from None
        finally:
            del body
    tab = pa.Table.from_batches(batches, schema=pa.schema([(k, types[k]) for k in use])).unify_dictionaries() \
        if batches else None
    cols = {use[k]: (tab.column(k) if tab is not None else pa.chunked_array([], types[k])) for k in use}
    return Columns(path, table, cols, units, n)
