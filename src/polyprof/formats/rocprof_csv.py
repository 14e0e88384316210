"""rocprofv3's CSV output (its default: ``rocprofv3 --kernel-trace ...``), as a Trace.

rocprofv3 writes one CSV file per record kind, each named ``<prefix>_<kind>.csv`` (the
prefix is ``<pid>`` unless ``-o`` names another): ``kernel_trace``, ``hip_api_trace``
(or ``hip_runtime_trace`` / ``hip_compiler_trace``), ``hsa_api_trace``,
``marker_api_trace`` (ROCTx), ``rccl_api_trace``, ``memory_copy_trace``, ``agent_info``,
and others this reader lists as not read (``counter_collection``, ``scratch_memory_trace``,
``memory_allocation_trace``, the ``*_stats`` files). The columns are rocprofiler-sdk's
(``generateCSV.cpp``); files are told apart by their header, not their name. A
``memory_copy_trace`` row gives a copy's direction, agents and times, not its size (no
rocprofiler-sdk version writes one there; its JSON and rocpd outputs do): its copies are
unsized.

One prefix's files are one process. A path is either one of those files (its siblings
with the same prefix are read with it) or the directory rocprofv3 wrote (every prefix
in it: one Trace with a source per process, as rocprofv3's JSON and a merged rocpd
database give). Each file is read by pyarrow's CSV reader into columns, names dictionary-encoded,
the Trace made by formats/rocm_trace.py as for the JSON and rocpd readers (ns, no wall anchor).

rocpd's CSV files (``rocpd2csv``, ROCm 7) are these kinds with a ``Guid`` (the run's id)
first, some names title-cased (``Vgpr_Count``: names match without case), every API domain
in one ``regions_trace.csv`` in newer ones. One file may hold several runs (``rocpd2csv -i
a.db b.db``): each Guid is a process, its pid its calls' ``Process_Id``, kept in the metadata.
"""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
import numpy as np

from ..errors import TraceFormatError, one_line
from ..trace import keys
from ..trace.core import Trace
from . import rocm_trace
from .parts import Part, set_stat, triples
from .safety import check_events, guarded
from ..trace.sorting import unique

log = logging.getLogger("polyprof")

#: the file kinds rocprofv3 writes (``<prefix>_<kind>.csv``), longest first for matching
KINDS = tuple(sorted((
    "kernel_trace", "hip_api_trace", "hip_runtime_trace", "hip_compiler_trace", "hip_compile_trace",
    "hsa_api_trace", "marker_api_trace", "rccl_api_trace", "rocdecode_api_trace", "rocjpeg_api_trace",
    "memory_copy_trace", "memory_allocation_trace", "scratch_memory_trace", "counter_collection",
    "agent_info", "kernel_stats", "hip_api_stats", "hsa_api_stats", "memory_copy_stats", "marker_api_stats",
    "rccl_api_stats", "scratch_memory_stats", "memory_allocation_stats", "counter_collection_stats",
    "domain_stats", "regions_trace",  # and rocpd's (rocpd2csv): every API domain in one file, and more
    "counter_collection_trace", "spm_counter_collection_trace", "graph_launch_trace", "hip_event_trace",
    "pc_sampling_host_trap", "pc_sampling_stochastic"), key=len, reverse=True))

#: the columns each file this reader reads must have
KERNEL = ("Kind", "Agent_Id", "Queue_Id", "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp")
API = ("Domain", "Function", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp")
COPY = ("Kind", "Direction", "Source_Agent_Id", "Destination_Agent_Id", "Start_Timestamp", "End_Timestamp")
AGENT = ("Node_Id", "Agent_Type")
#: the text columns, dictionary-encoded as they are read (a kernel's name is kept once)
TEXT = ("Kind", "Direction", "Domain", "Function", "Kernel_Name", "Agent_Type", "Name", "Product_Name",
        "Vendor_Name", "Model_Name", "Guid")
#: every column a reader uses (the others are not converted)
USED = frozenset(KERNEL + API + COPY + AGENT + TEXT + (
    "Stream_Id", "Dispatch_Id", "Process_Id", "Bytes", "Logical_Node_Id", "Private_Segment_Size",
    "Group_Segment_Size", "LDS_Block_Size", "Scratch_Size", "VGPR_Count", "Arch_VGPR_Count", "SGPR_Count",
    "Cu_Count", "Simd_Per_Cu", "Wave_Front_Size", "Max_Waves_Per_Cu", "Num_Xcc", "Max_Engine_Clk_Fcompute",
    "Gfx_Target_Version") + tuple(f"{w}_Size_{a}" for w in ("Grid", "Workgroup") for a in "XYZ"))
#: agent keys: a plain integer is a node id (``Node_Id``, as rocprofiler-sdk wrote agents
#: before ROCm 7); ``Agent N`` (ROCm 7's default, ``--agent-index relative``) is a
#: ``Logical_Node_Id``; ``GPU N`` / ``CPU N`` (``type-relative``) the Nth of that type
AGENT_BASE = {"Agent": 1 << 40, "GPU": 2 << 40, "CPU": 3 << 40, "UNK": 4 << 40}
#: by header kind: the columns a header must begin with (after rocpd's ``Guid``) and hold
HEADERS = {"kernel": (("Kind",), KERNEL + ("Dispatch_Id",)), "api": (("Domain", "Function"), API),
           "copy": (("Kind", "Direction"), COPY), "agent": (("Node_Id",), AGENT + ("Logical_Node_Id",))}
#: the header kind expected by file kind, for a file whose header is not one of them
EXPECTED = {"kernel_trace": "kernel", "memory_copy_trace": "copy", "regions_trace": "api",
            **{k: "api" for k in KINDS if k.endswith("_api_trace") or k.startswith(("hip_runtime", "hip_compile"))}}
#: column names by their lower-case spelling (rocpd's writer title-cases some: ``Vgpr_Count``)
CANON = {c.lower(): c for c in (*USED, "Accum_VGPR_Count", "Guid")}


def split_name(name: str) -> tuple[str, str] | None:
    """(prefix, kind) of a rocprofv3 CSV file name (the prefix keeps its ``_``), or None."""
    if not name.endswith(".csv"):
        return None
    stem = name[:-4]
    for kind in KINDS:
        if stem == kind or stem.endswith("_" + kind):
            return stem[:len(stem) - len(kind)], kind
    return None


def _header(head: bytes) -> list[str]:
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        cells = next(csv.reader(io.StringIO(line.decode("utf-8", "replace"))), [])
    except csv.Error:
        return []
    return [CANON.get(c.lower(), c) for c in cells]  # rocpd's spellings as rocprofv3's


def kind_of(header: list[str]) -> str | None:
    """What a rocprofv3 (or rocpd) CSV header is: kernel, api, copy, agent; None for any other CSV."""
    body = header[1:] if header[:1] == ["Guid"] else header  # less rocpd's Guid
    for kind, (lead, need) in HEADERS.items():
        if tuple(body[:len(lead)]) == lead and set(body).issuperset(need):
            return kind
    return None


def mismatch(kind: str, header: list[str]) -> str:
    """Why a header is not of the kind its file's name says: the columns it lacks, else its first."""
    lead, need = HEADERS[kind]
    body = header[1:] if header[:1] == ["Guid"] else header
    missing = [c for c in need if c not in body]
    if missing:
        return f"no {', '.join(missing)}"
    return f"it begins with {', '.join(body[:len(lead)])}, not {', '.join(lead)}"


def sniff(head: bytes, path: Path) -> bool:
    """A CSV file whose header is one of the trace files rocprofv3 writes (kernel, API,
    memory copy): by the exact leading columns rocprofiler-sdk writes, not the name."""
    if head.startswith(b"GZ") or head[:1] != b'"':
        return False
    return kind_of(_header(head)) in ("kernel", "api", "copy")


#: what rocprofv3's (and rocpd's) CSV files that hold no events are (by the kind in their name)
NOT_TRACES = {"counter_collection": "counter values per kernel dispatch", "agent_info": "the run's agents",
              **dict.fromkeys(("pc_sampling_host_trap", "pc_sampling_stochastic"), "program counter samples"),
              **{f"{k}_trace": f"{w}, which polyprof does not read" for k, w in (
                  ("memory_allocation", "allocations"), ("scratch_memory", "scratch memory events"),
                  ("graph_launch", "graph launches"), ("hip_event", "HIP events"))},
              **{f"{k}_trace": "counter values per kernel dispatch" for k in ("counter_collection", "spm_counter_collection")}}


def not_a_trace(head: bytes, path: Path) -> str | None:
    """What a rocprofv3 CSV file polyprof does not read is (counters, statistics, agents:
    by its name, its header no trace's), and the trace file beside it to give instead;
    None for any other file."""
    got = split_name(path.name)
    if got is None or got[1] in EXPECTED or sniff(head, path):
        return None
    prefix, kind = got
    what = NOT_TRACES.get(kind, "totals per name")  # the others: the *_stats files
    beside = [f"{prefix}{k}.csv" for k in ("kernel_trace", "hip_api_trace", "memory_copy_trace")
              if (path.parent / f"{prefix}{k}.csv").is_file()]
    give = (f"give polyprof {beside[0]} beside it" if beside else
            "polyprof reads its kernel_trace.csv and *_api_trace.csv files (rocprofv3 --kernel-trace --hip-trace)")
    return f"rocprofv3's {kind} file ({what}), not a trace: {give}"


def claim(head: bytes, path: Path) -> bool:
    """By name, when no sniff answered: a damaged trace file of rocprofv3's gets this
    reader's error (which column is missing) rather than "unrecognised format"."""
    got = split_name(path.name)
    return got is not None and got[1] in EXPECTED


def is_output_dir(path: Path) -> bool:
    """A directory holding rocprofv3 trace CSVs (each checked by its header)."""
    return bool(_trace_files(path))


def _trace_files(path: Path) -> list[Path]:
    try:
        items = sorted(path.iterdir())
    except OSError:
        return []
    out = []
    for q in items:
        if q.is_file() and split_name(q.name) is not None:
            try:
                if sniff(_head(q, 4096), q):
                    out.append(q)
            except OSError:
                continue
    return out


def runs_in(path: Path) -> list[Path]:
    """One trace file per prefix (process) of a rocprofv3 output directory, for ranks/."""
    seen: dict[str, Path] = {}
    for q in _trace_files(path):
        prefix, kind = split_name(q.name)  # type: ignore[misc]
        if prefix not in seen or kind == "kernel_trace":  # named by its kernel trace where it has one
            seen[prefix] = q
    return list(seen.values())


Agents = dict[tuple[int, int], rocm_trace.Agent]


@dataclass
class _Run:
    """One prefix's files: kind -> file."""

    prefix: str
    files: dict[str, Path] = field(default_factory=dict)


def _runs(path: Path) -> list[_Run]:
    if path.is_dir():
        names = sorted(q for q in path.iterdir() if q.is_file())
        prefixes = {split_name(q.name)[0] for q in _trace_files(path)}  # type: ignore[index]
    else:
        got = split_name(path.name)
        if got is None:  # a trace CSV under another name: that file alone
            return [_Run("", {"file": path})]
        names = sorted(q for q in path.parent.iterdir() if q.is_file())
        prefixes = {got[0]}
    runs = {p: _Run(p) for p in sorted(prefixes)}
    for q in names:
        got = split_name(q.name)
        if got is not None and got[0] in runs:
            runs[got[0]].files[got[1]] = q
    return list(runs.values())


#: bytes of CSV text parsed at a time (pyarrow's default block)
BLOCK = 1 << 20
#: the block tried when a row is longer than ``BLOCK`` (a kernel name of megabytes); longer rows are refused
LONG_ROW_BLOCK = 1 << 26


def _streamed(path: Path, block: int, parse: Any, convert: Any, names: list[str]) -> Any:
    """The CSV as a table, parsed a block at a time: read whole (``read_csv``), its text
    and parse buffers stood beside the table, 2.3 times the table at the peak; streamed,
    1.05. Each block's types are the first block's (ArrowInvalid where one does not fit).
    ``names``: the header as :func:`_header` read it (pyarrow finds every column asked
    for; a header pyarrow would read otherwise makes a row of the wrong width)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    read = pacsv.ReadOptions(block_size=block, column_names=names, skip_rows=1)
    blocks = pacsv.open_csv(path, read_options=read, parse_options=parse, convert_options=convert)
    return pa.Table.from_batches(list(blocks), schema=blocks.schema).unify_dictionaries()


class _Reader:
    """Columns of one CSV file (pyarrow), each checked and refused in one line."""

    def __init__(self, path: Path, want: tuple[str, ...], multiline: bool = False):
        import pyarrow as pa
        import pyarrow.csv as pacsv

        self.path = path
        self.header = _header(_head(path))
        missing = [c for c in want if c not in self.header]
        if missing:
            raise TraceFormatError(path, f"not a rocprofv3 CSV of this kind: no column {', '.join(missing)}")
        use = [c for c in dict.fromkeys(self.header) if c in USED]
        text = pa.dictionary(pa.int32(), pa.string())
        convert = pacsv.ConvertOptions(include_columns=use, column_types={c: text for c in use if c in TEXT},
                                       strings_can_be_null=False, quoted_strings_can_be_null=False)
        parse = pacsv.ParseOptions(newlines_in_values=multiline)
        for block in (BLOCK, LONG_ROW_BLOCK):
            try:
                self.table = _streamed(path, block, parse, convert, self.header)
                break
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                msg = one_line(e, None)
                if "straddl" in msg and block < LONG_ROW_BLOCK:  # a row longer than a block: larger blocks
                    continue
                if "straddl" in msg:
                    raise TraceFormatError(path, f"a row is longer than {LONG_ROW_BLOCK >> 20} MB: not a trace "
                                                 "file rocprofv3 writes") from None
                if "conversion error" not in msg:
                    raise TraceFormatError(path, f"malformed CSV ({one_line(msg)})") from None
            # a column whose later blocks do not fit the type its first block gave it (empty
            # cells, then numbers; numbers, then text): read whole, where pyarrow widens the
            # type over the whole column (and the column's check names the row)
            try:
                self.table = pacsv.read_csv(path, read_options=pacsv.ReadOptions(column_names=self.header, skip_rows=1),
                                            parse_options=parse, convert_options=convert).unify_dictionaries()
                break
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise TraceFormatError(path, f"malformed CSV ({one_line(e)})") from None
        self.n = self.table.num_rows

    def has(self, name: str) -> bool:
        return name in self.table.column_names

    def ints(self, name: str, default: int | None = None) -> np.ndarray:
        """An integer column (``default`` where it is missing or a cell is empty)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.n and (self.has(name) or default is not None):  # a header alone: no rows
            return np.zeros(0, np.int64)
        if not self.has(name):
            if default is None:
                raise TraceFormatError(self.path, f"no column {name}")
            return np.full(self.n, default, np.int64)
        col = self.table.column(name).combine_chunks()
        if not pa.types.is_integer(col.type) and not pa.types.is_null(col.type):
            self._not_integer(name, col)
        if pa.types.is_null(col.type) and default is not None:  # every cell empty (fill_null cannot type them)
            return np.full(self.n, default, np.int64)
        if col.null_count:
            if default is None:
                row = int(pc.index(pc.is_null(col), True).as_py())
                raise TraceFormatError(self.path, f"row {row + 2}: {name} is empty")
            col = col.fill_null(default)
        if pa.types.is_null(col.type):
            return np.full(self.n, default, np.int64)
        if pa.types.is_uint64(col.type) and pc.max(col).as_py() >= 1 << 63:
            raise TraceFormatError(self.path, f"{name} holds an integer beyond 64 bits")
        return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)

    def times(self, name: str) -> np.ndarray:
        """A time column (ns), refused naming its first row beyond +-2**62 ns (damage, not
        a clock: an end minus a start must fit in int64)."""
        v = self.ints(name)
        far = np.flatnonzero((v < -(2**62)) | (v > 2**62))
        if len(far):
            raise TraceFormatError(self.path, f"row {int(far[0]) + 2}: {name} is {int(v[far[0]])}, beyond +-2**62 ns")
        return v

    def _not_integer(self, name: str, col: object) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        kind = col.type  # type: ignore[attr-defined]
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):  # pyarrow's type for non-UTF-8 text
            raise TraceFormatError(self.path, f"{name} holds bytes that are not UTF-8 text, not integers")
        text = pc.cast(col, pa.string())
        bad = pc.invert(pc.match_substring_regex(text, r"^\s*-?\d+\s*$"))
        row = int(pc.index(pc.fill_null(bad, True), True).as_py())
        raise TraceFormatError(self.path, f"row {row + 2}: {name} is {text[row].as_py()!r}, not an integer")

    def agents(self, name: str) -> np.ndarray:
        """Agent keys (module doc of ``AGENT_BASE``): node ids written as integers
        (rocprofiler-sdk before ROCm 7) or ``Agent N`` / ``GPU N`` / ``CPU N`` texts."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.n:
            return np.zeros(0, np.int64)
        col = self.table.column(name).combine_chunks()
        if pa.types.is_integer(col.type):
            return self.ints(name)
        if not pa.types.is_string(col.type):
            self._not_integer(name, col)
        parts = pc.extract_regex(col, r"^\s*(?P<w>Agent|GPU|CPU|UNK)\s+(?P<n>\d+)\s*$")
        if parts.null_count:
            row = int(pc.index(pc.is_null(parts), True).as_py())
            raise TraceFormatError(self.path, f"row {row + 2}: {name} is {col[row].as_py()!r}, not an agent "
                                              "(a node id, or Agent/GPU/CPU and a number)")
        codes, words = (lambda e: (e.indices.to_numpy(zero_copy_only=False),
                                   e.dictionary.to_pylist()))(pc.dictionary_encode(parts.field("w")))
        base = np.array([AGENT_BASE[w] for w in words], np.int64)[codes]
        return base + pc.cast(parts.field("n"), pa.int64()).to_numpy(zero_copy_only=False)

    def names(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Codes and distinct values of a text column (dictionary-encoded, no object per row)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.n:
            return np.zeros(0, np.int64), []
        col = self.table.column(name)
        if not pa.types.is_dictionary(col.type):
            col = pc.dictionary_encode(pc.cast(col, pa.string()))
        chunks = [c for c in col.chunks if len(c)]
        codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks]).astype(np.int64)
        return codes, [str(v) for v in chunks[0].dictionary.to_pylist()]


class _Guids:
    """The runs (rocpd's ``Guid`` column) met in a prefix's files, numbered as met, and the
    pid a file gives each (``Process_Id``). Rows are keyed by that number (-1: a file with
    no Guid) until every file is read; :meth:`keys` then gives each number its process key."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.pid: dict[int, int] = {}

    def rows(self, r: _Reader) -> np.ndarray:
        if not (r.has("Guid") and r.n):
            return np.full(r.n, -1, np.int64)
        codes, vals = r.names("Guid")
        rows = np.array([self.index.setdefault(v, len(self.index)) for v in vals], np.int64)[codes]
        if r.has("Process_Id"):
            pids = r.ints("Process_Id")
            for i, first in zip(*(a.tolist() for a in np.unique(rows, return_index=True))):  # per run, not row
                self.pid.setdefault(i, int(pids[first]))
        return rows

    def keys(self, default: int) -> np.ndarray:
        """Process key by run number, ``default`` last (for -1): its calls' pid, else the first free."""
        if len(self.index) <= 1:
            return np.full(len(self.index) + 1, default, np.int64)
        used = set(self.pid.values())
        free = (k for k in range(1 << 62) if k not in used)
        return np.array([self.pid[i] if i in self.pid else next(free) for i in range(len(self.index))]
                        + [default], np.int64)


def _agents(run: _Run, guids: _Guids) -> tuple[Agents, set[int]]:
    """GPU agents of agent_info.csv, under every key a trace file may name them by
    (``AGENT_BASE``), numbered as rocprofiler-sdk does (by node id) in each run (:class:`_Guids`)."""
    path = run.files.get("agent_info")
    if path is None:
        return {}, set()
    r = _Reader(path, AGENT)
    run_of = guids.rows(r)
    node = r.ints("Node_Id")
    logical = r.ints("Logical_Node_Id", -1)
    typ_codes, typ = r.names("Agent_Type")
    texts = {c: r.names(c) for c in ("Name", "Product_Name", "Vendor_Name", "Model_Name") if r.has(c)}
    numcols = {c: r.ints(c, 0) for c in ("Cu_Count", "Simd_Per_Cu", "Wave_Front_Size", "Max_Waves_Per_Cu",
                                         "Num_Xcc", "Max_Engine_Clk_Fcompute", "Gfx_Target_Version") if r.has(c)}
    out: Agents = {}
    seen: dict[tuple[int, str], int] = {}
    for row in np.lexsort((node, run_of)).tolist():  # per run, by node id
        kind, g = typ[int(typ_codes[row])], int(run_of[row])
        k = seen.get((g, kind), 0)
        seen[(g, kind)] = k + 1
        if kind != "GPU":
            continue
        props: dict[str, object] = {c.lower(): vals[int(codes[row])] for c, (codes, vals) in texts.items()}
        props.update({c.lower(): int(v[row]) for c, v in numcols.items()})
        props["agent_node_id"] = int(node[row])
        agent = rocm_trace.Agent(k, True, props)
        for key in (int(node[row]), AGENT_BASE["Agent"] + int(logical[row]), AGENT_BASE["GPU"] + k):
            out[(g, key)] = agent
    return out, {key for _, key in out}


def _kernels(path: Path, guids: _Guids) -> Part:
    r = _Reader(path, KERNEL)
    n = r.n
    codes, vals = r.names("Kernel_Name")
    corr, queue = r.ints("Correlation_Id"), r.ints("Queue_Id")
    stats: dict[str, object] = {keys.QUEUE: queue}
    if r.has("Stream_Id"):
        stats[keys.STREAM] = r.ints("Stream_Id", 0)
    if r.has("Dispatch_Id"):
        stats["dispatch id"] = r.ints("Dispatch_Id", 0)
    set_stat(stats, keys.CORRELATION_ID, corr, 0)
    if all(r.has(f"Grid_Size_{a}") for a in "XYZ"):
        stats[keys.GRID] = triples(*(r.ints(f"Grid_Size_{a}", 1) for a in "XYZ"))
    if all(r.has(f"Workgroup_Size_{a}") for a in "XYZ"):
        stats[keys.BLOCK] = triples(*(r.ints(f"Workgroup_Size_{a}", 1) for a in "XYZ"))
    for stat, cols in (("shared memory", ("Group_Segment_Size", "LDS_Block_Size")),
                       ("scratch memory", ("Private_Segment_Size", "Scratch_Size")),
                       ("vgpr count", ("Arch_VGPR_Count", "VGPR_Count")), ("sgpr count", ("SGPR_Count",))):
        col = next((c for c in cols if r.has(c)), None)
        if col is not None:
            set_stat(stats, stat, r.ints(col, -1))
    return Part("kernel_trace", True, r.times("Start_Timestamp"), r.times("End_Timestamp"), guids.rows(r),
                -queue, r.agents("Agent_Id"), codes, vals, np.zeros(n, np.int64), [keys.CAT_KERNEL], stats, corr)


def _copies(path: Path, guids: _Guids, gpus: set[int]) -> Part:
    r = _Reader(path, COPY)
    n = r.n
    dst, src = r.agents("Destination_Agent_Id"), r.agents("Source_Agent_Id")
    if not gpus:  # no agent_info nor kernels: GPU N, else any agent but the first CPU
        ids = unique(np.concatenate([dst, src])).tolist()
        gpus = {x for x in ids if AGENT_BASE["GPU"] <= x < AGENT_BASE["CPU"]} or \
            {x for x in ids if x not in (0, AGENT_BASE["Agent"]) and x < AGENT_BASE["GPU"]}
    on = np.where(np.isin(dst, list(gpus)), dst, src)
    codes, vals = r.names("Direction")
    corr = r.ints("Correlation_Id", 0)
    stats: dict[str, object] = {"dst agent": dst, "src agent": src}
    for stat, col in ((keys.BYTES, "Bytes"), (keys.STREAM, "Stream_Id")):  # Bytes: not rocprofv3's (module doc)
        if r.has(col):
            stats[stat] = r.ints(col, 0)
    set_stat(stats, keys.CORRELATION_ID, corr, 0)
    return Part("memory_copy_trace", True, r.times("Start_Timestamp"), r.times("End_Timestamp"),
                guids.rows(r), r.ints("Stream_Id", 0), on, codes,
                [rocm_trace.copy_name(v) for v in vals], np.zeros(n, np.int64), [keys.CAT_MEMCPY], stats, corr)


def _calls(r: _Reader, table: str, guids: _Guids) -> Part:
    """API calls on their threads; ROCTx (``MARKER_*`` domains) as ranges, or marks
    where a record takes no time (rocprofv3 writes the message as the Function)."""
    n = r.n
    start, end = r.times("Start_Timestamp"), r.times("End_Timestamp")
    codes, vals = r.names("Function")
    dcodes, domains = r.names("Domain")
    marker_dom = np.array([d.startswith("MARKER_") for d in domains], bool)
    marker = marker_dom[dcodes] if n else np.zeros(0, bool)
    cats = [rocm_trace.api_category(d) for d in domains] + [rocm_trace.CAT_ROCTX_MARK]
    instant = marker & (end <= start)
    ccode = np.where(instant, len(cats) - 1, dcodes)
    corr = r.ints("Correlation_Id", 0)
    stats: dict[str, object] = {}
    api = ~marker
    rows = np.flatnonzero(api & (corr > 0))
    if len(rows):
        stats[keys.CORRELATION_ID] = (rows, corr[rows])
    return Part(table, False, start, np.where(instant, start, end), guids.rows(r), r.ints("Thread_Id"),
                np.zeros(n, np.int64), codes, vals, ccode, cats, stats, np.where(api, corr, -1))


def _pid(run: _Run, readers: list[_Reader], index: int) -> int:
    for r in readers:
        if r.has("Process_Id") and r.n:
            first = r.table.column("Process_Id")[0].as_py()  # one pid per file
            return first if isinstance(first, int) else int(r.ints("Process_Id")[0])
    p = run.prefix.rstrip("_").rsplit("/", 1)[-1]
    return int(p) if p.isdigit() else index


def _run_parts(run: _Run, index: int) -> tuple[list[Part], list[int], Agents, list[str], dict[str, int]]:
    """A prefix's events, processes (one per rocpd Guid), GPUs, files not read, Guid -> process."""
    parts: list[Part] = []
    api: list[tuple[str, _Reader]] = []
    kinds: dict[str, list[Path]] = {"kernel": [], "copy": []}
    unread: list[str] = []
    for kind, f in run.files.items():
        what = kind_of(header := _header(_head(f)))
        if what == "api":
            # ROCTx messages are the user's text, written as they are: newlines too
            api.append((kind, _Reader(f, API, multiline=kind in ("marker_api_trace", "regions_trace"))))
        elif what in kinds:
            kinds[what].append(f)  # type: ignore[index]
        elif kind in EXPECTED:  # a trace file's name, not its header
            raise TraceFormatError(f, f"not the columns rocprofv3 writes in a {kind} file "
                                      f"({mismatch(EXPECTED[kind], header)})")
        elif what != "agent":
            unread.append(f.name)
    guids = _Guids()
    by_run, gpus = _agents(run, guids)
    parts += [_kernels(f, guids) for f in kinds["kernel"]]
    ks = [] if gpus else parts[:]
    if not gpus:  # no agent_info: the GPUs are the kernels' agents, numbered in order
        gpus = {int(x) for p in parts for x in unique(p.dev).tolist()}
    parts += [_copies(f, guids, gpus) for f in kinds["copy"]]
    parts += [_calls(r, kind, guids) for kind, r in api]
    key = guids.keys(_pid(run, [r for _, r in api], index))
    for p in parts:
        p.gpid = key[p.gpid]
    procs = sorted({int(g) for p in parts for g in unique(p.gpid).tolist()}) or [int(key[-1])]
    agents: Agents = {}
    for (i, d), ag in by_run.items():  # an agent_info without Guid: every process's
        for g in ([int(key[i])] if i >= 0 else procs):
            agents[(g, d)] = ag
    for g, d in (np.unique(np.stack([np.concatenate([p.gpid for p in ks]), np.concatenate([p.dev for p in ks])], 1),
                           axis=0).tolist() if ks else []):  # one per (process, agent), numbered in agent order
        agents[(g, d)] = rocm_trace.Agent(sum(k[0] == g for k in agents), True, {"agent_key": d})
    return parts, procs, agents, unread, {v: int(key[i]) for v, i in guids.index.items()}


def read(path: Path) -> Trace:
    runs = [r for r in _runs(path) if r.files]
    if not runs:
        raise TraceFormatError(path, "no rocprofv3 CSV trace files here (<pid>_kernel_trace.csv, "
                                     "<pid>_hip_api_trace.csv, ...)")
    parts: list[Part] = []
    processes: dict[int, rocm_trace.Process] = {}
    agents: dict[tuple[int, int], rocm_trace.Agent] = {}
    unread: list[str] = []
    guids: dict[str, int] = {}
    for i, run in enumerate(runs):
        if "file" in run.files:  # a trace CSV under a name of its own
            run = _Run("", {_kind_by_header(run.files["file"]): run.files["file"]})
        got, procs, ags, not_read, run_guids = _run_parts(run, i)
        check_events(path, sum(len(p) for p in parts) + sum(len(p) for p in got), so_far=True)
        for pid in procs:
            if pid in processes:
                raise TraceFormatError(path, f"two sets of files for process {pid}")
            processes[pid] = rocm_trace.Process(pid=pid)
        parts += got
        agents.update(ags)
        unread += not_read
        guids.update(run_guids)
    if unread:
        log.info("%s: %d files not read (%s)", path, len(unread), ", ".join(unread[:12]))
    md = {"clock": "rocprofiler-sdk timestamps (ns)",
          "rocprof": {"format": "rocprofv3 csv", "processes": len(processes), "files_not_read": unread,
                      **({"guids": guids} if guids else {})}}
    trace = rocm_trace.build(parts, processes, agents, {}, md, path.name)
    del parts
    import pyarrow as pa  # loaded by the read already

    pa.default_memory_pool().release_unused()  # the tables' freed blocks, kept by Arrow's allocator, back to the OS
    return trace


def _kind_by_header(path: Path) -> str:
    return kind_of(_header(_head(path))) or "file"


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read rocprofv3's CSV output: one of its trace files (with its siblings) or its directory."""
    return read(Path(path))


def _head(path: Path, size: int = 65536) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)
