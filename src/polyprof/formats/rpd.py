"""RPD: the SQLite database of ROCm's rocmProfileData tracer (``rpd_tracer``,
``runTracer.sh``, ``rpdTracerControl``), as a Trace.

Not rocprofiler-sdk's rocpd (formats/rocpd/): RPD's tables share the ``rocpd_`` prefix
but not their layout. What this reads (schema versions 2 and 3, the ones rpd_tracer
writes; times are ns):

- ``rocpd_api`` (pid, tid, start, end, ``apiName_id``, ``args_id``): HIP calls, ROCTx
  ranges and marks (``UserMarker``: the name is the args text, a mark when it has no
  length), ranges pushed through rpd's own API, and the tracer's own writes;
  ``rocpd_hsaApi`` (older tracers), HSA calls, the same columns;
- ``rocpd_op`` (``gpuId``, ``queueId``, start, end, ``description_id``, ``opType_id``):
  kernels (``KernelExecution``, and ``Task``: a graph's kernels), copies, fills;
- ``rocpd_api_ops``: which call launched each op, which gives the flows and the
  correlation ids (the call's id), and through the call ``rocpd_kernelapi``'s grid,
  workgroup and segment sizes and ``rocpd_copyapi``'s bytes.

Not read: ``rocpd_monitor`` (SMI clocks; its ``deviceId`` is the SMI's numbering, which
the database does not map to the ops' ``gpuId``), stack frames, autograd tables; the
trace's metadata lists them.

Names and args are ``rocpd_string`` rows (schema 3: args are ``rocpd_ustring`` rows).
formats/rocm_trace.py makes the Trace, as for rocprofiler-sdk's formats.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from ..lowlevel.demangle import demangle_all
from ..trace import keys
from ..trace.core import Trace
from ..trace.sorting import find, member, unique_inverse
from . import rocm_trace, sqlite_bounds, sqlite_db
from .parts import Part, group_rows, set_stat, triples
from .safety import TIME_LIMIT_NS, guarded
from .sqlite_db import Schema, quote

log = logging.getLogger("polyprof")

__all__ = ["load", "sniff", "read", "is_rpd"]

#: tables read (the rest are listed in the trace's metadata)
READ = ("rocpd_metadata", "rocpd_string", "rocpd_ustring", "rocpd_api", "rocpd_hsaApi", "rocpd_op",
        "rocpd_api_ops", "rocpd_kernelapi", "rocpd_copyapi")
#: the ``apiName`` of ROCTx ranges and marks (their text is the args)
MARKER = "UserMarker"
#: calls the tracer makes itself, to write its tables: profiler overhead
_TRACER = re.compile(r"::writeRows$|^hcc_activity_callback$|^rpdflush$")
#: opType -> (category, name; None: the op's description, else the opType)
_OPS = {"KernelExecution": (keys.CAT_KERNEL, None), "Task": (keys.CAT_KERNEL, None),
        "CopyHostToDevice": (keys.CAT_MEMCPY, "Memcpy HtoD"), "CopyDeviceToHost": (keys.CAT_MEMCPY, "Memcpy DtoH"),
        "CopyDeviceToDevice": (keys.CAT_MEMCPY, "Memcpy DtoD"), "CopyHostToHost": (keys.CAT_MEMCPY, "Memcpy HtoH"),
        "FillBuffer": (keys.CAT_MEMSET, "Memset")}
#: an op type this table does not know: a kernel when it names one, else this (no device busy time)
CAT_OTHER_OP = "rpd_op"
#: a call whose name string is missing (a damaged file) that launched no op: not a section
CAT_UNNAMED_CALL = "rpd_api"
#: hipMemcpyKind (rocpd_copyapi.kind) -> the copy's name
_COPY_KINDS = {0: "Memcpy HtoH", 1: "Memcpy HtoD", 2: "Memcpy DtoH", 3: "Memcpy DtoD"}
#: an op whose type string is missing: classified by its call's name (these prefixes,
#: lower case), else by the call's rocpd_kernelapi or rocpd_copyapi row, else this
_CALL_KINDS = (("hipmemset", keys.CAT_MEMSET), ("hsa_amd_memory_fill", keys.CAT_MEMSET),
               ("hipmemcpy", keys.CAT_MEMCPY), ("hsa_amd_memory_async_copy", keys.CAT_MEMCPY),
               ("hiplaunch", keys.CAT_KERNEL), ("hipmodulelaunch", keys.CAT_KERNEL),
               ("hipextmodulelaunch", keys.CAT_KERNEL), ("hipextlaunch", keys.CAT_KERNEL))
UNTYPED_OP = "[GPU op of unknown type]"
_GRAPH_EXEC = re.compile(r"graphExec\s*=\s*(\S+)")


def is_rpd(tabs: Schema) -> bool:
    return tabs.has("rocpd_api", "start", "end", "apiName_id") and tabs.has("rocpd_op", "gpuId", "start", "end")


def sniff(head: bytes, path: Path) -> bool:
    """An SQLite file with RPD's call and op tables."""
    return sqlite_db.sniff(head, path, is_rpd, compressed=True)


def _strings(conn: sqlite3.Connection, table: str, ids_sql: str) -> dict[int, str]:
    """``id -> string`` of the rows of ``table`` whose ids ``ids_sql`` selects."""
    cut = sqlite_bounds.MAX_NAME_CHARS  # (a longer name is damage or hostile)
    return {int(i): str(s) for i, s in sqlite_db.rows(
        conn, f"SELECT id, substr(string, 1, {cut}) FROM {quote(table)} WHERE id IN ({ids_sql})") if isinstance(i, int)}


def _timed(c: dict[str, np.ndarray], table: str) -> dict[str, np.ndarray]:
    """``c``, whose start and end times are checked: beyond +-2**62 ns is damage, not a clock."""
    for k in ("start", "end"):
        if len(c[k]) and (c[k].min() < -TIME_LIMIT_NS or c[k].max() > TIME_LIMIT_NS):
            raise sqlite3.DatabaseError(f"{table}.{k} holds times beyond +-2**62 ns: damaged")
    return c


def _category(name: str, default: str) -> str:
    if name == MARKER:
        return rocm_trace.CAT_ROCTX
    if _TRACER.search(name):
        return "overhead"
    low = name.lower()
    if low.startswith("hsa_"):
        return "hsa_api"
    if low.startswith(("nccl", "rccl")):
        return "rccl_api"
    if low.startswith("hip"):
        return "hip_runtime"
    return default


def _calls(conn: sqlite3.Connection, tabs: Schema, table: str, args_table: str, default: str,
           launched: np.ndarray, notes: list[str]) -> tuple[Part, np.ndarray] | None:
    """A call table's rows as a host part (ROCTx markers named by their text; the args of
    other calls as a stat) and the calls' ids. ``launched``: the ids of calls that launched
    ops (their correlation ids). A call whose name string is missing is named by its id
    (``[string N]``): a HIP call when it launched an op, else of no kind, said in ``notes``."""
    if not tabs.has(table, "id", "pid", "tid", "start", "end", "apiName_id"):
        return None
    has_args = tabs.has(table, "args_id") and tabs.has(args_table, "id", "string")
    exprs = {"id": "id", "pid": "pid", "tid": "tid", "start": "start", "end": "end", "name": "apiName_id",
             "args": "args_id" if has_args else "NULL"}
    c = _timed(sqlite_db.read_columns(conn, table, exprs, not_null=tabs.not_null(table),
                                      required=("pid", "tid", "start", "end"), notes=notes), table)
    t, src = quote(table), f"SELECT DISTINCT apiName_id FROM {quote(table)}"
    name_of = _strings(conn, "rocpd_string", src) if tabs.has("rocpd_string", "id", "string") else {}
    uniq, inv = unique_inverse(c["name"])
    api_names = [name_of.get(int(u), f"[string {int(u)}]") for u in uniq.tolist()]
    marker = np.array([n == MARKER for n in api_names], bool)[inv] if len(uniq) else np.zeros(0, bool)
    names, name_values = inv.astype(np.int64), list(api_names)
    stats: dict[str, Any] = {}
    if has_args and len(c["id"]):
        markers = ",".join(str(int(u)) for u, n in zip(uniq.tolist(), api_names) if n == MARKER)
        rows = np.flatnonzero(marker)
        if len(rows):  # a marker's name is its text
            text = _strings(conn, args_table, f"SELECT DISTINCT args_id FROM {t} WHERE apiName_id IN ({markers})")
            u, i = unique_inverse(c["args"][rows])
            names[rows] = len(name_values) + i
            name_values += [text.get(int(x), MARKER) for x in u.tolist()]
        others = f" WHERE apiName_id NOT IN ({markers})" if markers else ""
        args = {k: v for k, v in _strings(conn, args_table, f"SELECT DISTINCT args_id FROM {t}{others}").items() if v}
        stats.update(_args_stats(c["args"], np.flatnonzero(~marker & np.isin(c["args"], list(args))), args))
    cats = [_category(n, default) for n in api_names]
    category = inv.astype(np.int64)
    instant = marker & (c["end"] <= c["start"])
    if instant.any():
        cats.append(rocm_trace.CAT_ROCTX_MARK)
        category = np.where(instant, len(cats) - 1, category)
    is_launch = ~marker & member(c["id"], launched)
    unnamed = ~np.array([int(u) in name_of for u in uniq.tolist()], bool)[inv] if len(uniq) else marker
    if unnamed.any():  # a damaged file: not sections (the default of rocpd_api's unknown names)
        cats += ["hip_runtime" if table == "rocpd_api" else default, CAT_UNNAMED_CALL]
        category = np.where(unnamed, np.where(is_launch, len(cats) - 2, len(cats) - 1), category)
        notes.append(f"{int(unnamed.sum())} {table} row(s) name a call whose string rocpd_string lacks (a damaged "
                     f"file): named [string N] by its id, the {int((unnamed & is_launch).sum())} that launched GPU ops "
                     "read as runtime calls, the others as calls of no kind")
    corr = np.where(is_launch, c["id"], -1)
    set_stat(stats, keys.CORRELATION_ID, corr)
    part = Part(table, False, c["start"], c["end"], c["pid"], c["tid"], np.zeros(len(names), np.int64),
                names, name_values, category, cats, stats, corr)
    return part, c["id"]


def _args_stats(ids: np.ndarray, rows: np.ndarray, text: dict[int, str]) -> dict[str, Any]:
    """The ``args`` stat of the calls at ``rows`` (their args ids ``ids[rows]``, texts in
    ``text``), and a graph launch's ``graph exec id`` from its args."""
    if not len(rows):
        return {}
    u, i = unique_inverse(ids[rows])
    vals = [text[int(x)] for x in u.tolist()]
    out: dict[str, Any] = {"args": (rows, np.array(vals, dtype=object)[i])}
    graph = np.array([m.group(1) if (m := _GRAPH_EXEC.search(v)) else None for v in vals], dtype=object)
    has = np.array([g is not None for g in graph.tolist()], bool)[i]
    if has.any():
        out["graph exec id"] = (rows[has], graph[i[has]])
    return out


def _ops(conn: sqlite3.Connection, tabs: Schema, calls: list[tuple[Part, np.ndarray]],
         api_of: tuple[np.ndarray, np.ndarray], notes: list[str]) -> Part:
    """The ops on the GPUs, each with the call that launched it (``api_of``: op ids and
    their calls' ids, by op id) as its correlation id and process. An op whose type
    string is missing (a damaged file) is still device work: :func:`_untyped`."""
    exprs = {"id": "id", "gpu": "gpuId", "queue": "queueId", "start": "start", "end": "end",
             "desc": "description_id" if tabs.has("rocpd_op", "description_id") else "NULL",
             "type": "opType_id" if tabs.has("rocpd_op", "opType_id") else "NULL"}
    c = _timed(sqlite_db.read_columns(conn, "rocpd_op", exprs, not_null=tabs.not_null("rocpd_op"),
                                      required=("gpu", "queue", "start", "end"), notes=notes), "rocpd_op")
    n = len(c["start"])
    ops, apis = api_of
    at = find(ops, c["id"])
    corr = np.where(at >= 0, apis[at], -1) if len(apis) else at
    # the process of each op: its call's
    pid = np.full(n, -1, np.int64)
    for part, ids in calls:
        at = find(ids, corr)
        if len(ids):
            pid = np.where(at >= 0, part.gpid[at], pid)
    procs = {int(p) for part, _ in calls for p in np.unique(part.gpid).tolist()}
    if len(procs) == 1:
        pid[:] = procs.pop()
    strings = _strings(conn, "rocpd_string", "SELECT DISTINCT description_id FROM rocpd_op UNION "
                       "SELECT DISTINCT opType_id FROM rocpd_op") if tabs.has("rocpd_string", "id", "string") else {}
    inv, pairs = group_rows(c["desc"], c["type"])  # each distinct (description, type) once
    names, cats = [], []
    descs = demangle_all([strings.get(d, "") for d, _ in pairs.tolist()])  # HIP's kernel names as C++ writes them
    untyped = np.zeros(len(pairs), bool)  # groups with no type string and no description
    for i, (desc, (_, ty)) in enumerate(zip(descs, pairs.tolist())):
        kind = strings.get(ty, "")
        untyped[i] = ty not in strings and not desc
        cat, name = _OPS.get(kind, (keys.CAT_KERNEL if desc else CAT_OTHER_OP, None))
        names.append(name or desc or kind or "op")
        cats.append(cat)
    name_values, ncode = _dedupe(names)
    cat_values, ccode = _dedupe(cats)
    name_code, cat_code = np.asarray(ncode, np.int64)[inv], np.asarray(ccode, np.int64)[inv]
    rows = np.flatnonzero(untyped[inv]) if untyped.any() else np.zeros(0, np.intp)
    if len(rows):
        (ucat, uname), (cv, nv) = _untyped(conn, tabs, calls, corr[rows], notes), (cat_values, name_values)
        cat_code[rows], name_code[rows] = ucat + len(cv), uname + len(nv)
        cat_values, name_values = cv + [keys.CAT_KERNEL, keys.CAT_MEMCPY, keys.CAT_MEMSET], nv + _UNTYPED_NAMES
    stats: dict[str, Any] = {keys.STREAM: c["queue"], keys.QUEUE: c["queue"]}  # RPD's only stream: its queue
    set_stat(stats, keys.CORRELATION_ID, corr)
    _launch_stats(conn, tabs, corr, stats)
    return Part("rocpd_op", True, c["start"], c["end"], pid, -(c["queue"] + 1), c["gpu"],
                name_code, name_values, cat_code, cat_values, stats, corr)


#: the names an op of no type string gets (:func:`_untyped`): a kernel, copies by their
#: hipMemcpyKind, a fill, and one of nothing to tell it by (counted as a kernel)
_UNTYPED_NAMES = ["[unnamed kernel]", *_COPY_KINDS.values(), "Memcpy", "Memset", UNTYPED_OP]


def _untyped(conn: sqlite3.Connection, tabs: Schema, calls: list[tuple[Part, np.ndarray]], corr: np.ndarray,
             notes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(category code: 0 kernel, 1 copy, 2 fill; name code into _UNTYPED_NAMES) of ops
    whose type string ``rocpd_string`` lacks and that have no description (a damaged
    file; ``corr``: their calls' ids). rocpd_op holds only GPU ops, so each stays device
    work: classified by its call's name (_CALL_KINDS), else its call's rocpd_kernelapi or
    rocpd_copyapi row (a copy's direction: its ``kind``), else a kernel of unknown type;
    said in ``notes``."""
    n = len(corr)
    cat = np.full(n, -1, np.int64)
    for part, ids in calls:  # the call's name, where rocpd_string still has it
        at = find(ids, corr)
        has = np.flatnonzero(at >= 0)
        low = [v.lower() for v in part.name_values]
        by_name = np.array([next((["kernel", "gpu_memcpy", "gpu_memset"].index(k) for p, k in _CALL_KINDS
                                  if v.startswith(p)), -1) for v in low], np.int64)
        if len(has) and len(low):
            cat[has] = np.where(cat[has] < 0, by_name[part.names[at[has]]], cat[has])
    copy_kind = np.full(n, -1, np.int64)
    if tabs.has("rocpd_copyapi", "api_ptr_id", "kind"):
        k = sqlite_db.read_columns(conn, "rocpd_copyapi", {"api": "api_ptr_id", "kind": "kind"})
        at = find(k["api"], corr)
        copy_kind = np.where(at >= 0, k["kind"][np.maximum(at, 0)], -1) if len(k["api"]) else copy_kind
        cat = np.where((cat < 0) & (at >= 0), 1, cat)
    if tabs.has("rocpd_kernelapi", "api_ptr_id"):
        k = sqlite_db.read_columns(conn, "rocpd_kernelapi", {"api": "api_ptr_id"})
        cat = np.where((cat < 0) & (find(k["api"], corr) >= 0), 0, cat)
    unknown = cat < 0
    copy_name = np.where(member(copy_kind, np.array(list(_COPY_KINDS), np.int64)), copy_kind + 1, len(_COPY_KINDS) + 1)
    name = np.select([unknown, cat == 0, cat == 1], [len(_UNTYPED_NAMES) - 1, 0, copy_name], len(_COPY_KINDS) + 2)
    cat = np.maximum(cat, 0)
    counts = np.bincount(cat[~unknown], minlength=3).tolist()
    notes.append(f"{n} rocpd_op row(s) name a type string rocpd_string lacks (a damaged file): read as GPU work by "
                 f"the calls that launched them ({counts[0]} kernels, {counts[1]} copies, {counts[2]} fills)"
                 + (f", {int(unknown.sum())} with nothing to tell them by as kernels named {UNTYPED_OP}"
                    if unknown.any() else ""))
    return cat, name


def _dedupe(values: list[str]) -> tuple[list[str], list[int]]:
    out: dict[str, int] = {}
    codes = [out.setdefault(v, len(out)) for v in values]
    return list(out), codes


def _launch_stats(conn: sqlite3.Connection, tabs: Schema, corr: np.ndarray, stats: dict[str, Any]) -> None:
    """A kernel's grid, workgroup and segment sizes, a copy's bytes: from its call's row
    of ``rocpd_kernelapi`` / ``rocpd_copyapi``."""
    kcols = {"api": "api_ptr_id", "gx": "gridX", "gy": "gridY", "gz": "gridZ",
             "wx": "workgroupX", "wy": "workgroupY", "wz": "workgroupZ",
             "shared": "groupSegmentSize", "private": "privateSegmentSize"}
    if tabs.has("rocpd_kernelapi", *kcols.values()):
        k = _stat_columns(conn, tabs, "rocpd_kernelapi", kcols)
        at = find(k["api"], corr)
        rows = _with_stats(at, k)
        if len(rows):
            at = at[rows]
            stats[keys.GRID] = (rows, triples(k["gx"][at], k["gy"][at], k["gz"][at]))
            stats[keys.BLOCK] = (rows, triples(k["wx"][at], k["wy"][at], k["wz"][at]))
            stats["shared memory"] = (rows, k["shared"][at])
            stats["scratch memory"] = (rows, k["private"][at])
    if tabs.has("rocpd_copyapi", "api_ptr_id", "size"):
        k = _copy_bytes(conn, tabs)
        at = find(k["api"], corr)
        rows = _with_stats(at, k)
        if len(rows):
            stats[keys.BYTES] = (rows, k["bytes"][at[rows]])


#: a 2D copy's width x height past this is damage, not a size (its product would wrap int64)
MAX_COPY_BYTES = 1 << 62


def _copy_bytes(conn: sqlite3.Connection, tabs: Schema) -> dict[str, np.ndarray]:
    """``api`` and ``bytes`` of each ``rocpd_copyapi`` row: its ``size``, or where it has
    none (rpd_tracer writes ``''`` for a size of 0 or less; rocpd_python's importer 0) its
    ``width`` times ``height`` (a ``hipMemcpy2D``'s width in bytes and rows); -1 where it
    has neither (unsized: its launch's stats left out). Its ``pinned`` is not read: no RPD
    writer sets it (always 0), so it does not say a copy's host memory is pageable."""
    def whole(col: str) -> str:
        return f"CASE WHEN typeof({quote(col)}) = 'integer' THEN {quote(col)} ELSE -1 END"

    sides = tabs.has("rocpd_copyapi", "width", "height")
    cols = {"api": whole("api_ptr_id"), "size": whole("size"),
            **({"width": whole("width"), "height": whole("height")} if sides else {})}
    c = sqlite_db.read_columns(conn, "rocpd_copyapi", cols)
    size = c["size"]
    if sides:
        w, h = c["width"].astype(np.float64), c["height"].astype(np.float64)
        two_d = (size <= 0) & (w > 0) & (h > 0)
        area = np.where(two_d & (w * h <= MAX_COPY_BYTES), w * h, -1).astype(np.int64)  # -1: unsized, not wrapped
        size = np.where(two_d, area, size)
    return {"api": c["api"], "bytes": size}


def _stat_columns(conn: sqlite3.Connection, tabs: Schema, table: str, cols: dict[str, str]) -> dict[str, np.ndarray]:
    """``sqlite_db.read_columns`` of columns read only for launch stats. A value that is
    not an integer (rmpd's ``matmul_result_large.rpd`` stores one copy's size as ``''``)
    reads as -1, which leaves that call's stats out, with one warning: the stats are
    optional, the file's ops are not lost for them."""
    try:
        return sqlite_db.read_columns(conn, table, cols, not_null=tabs.not_null(table))
    except sqlite3.DatabaseError:
        guarded = {n: f"CASE WHEN typeof({quote(c)}) = 'integer' THEN {quote(c)} END"
                   for n, c in cols.items()}
        out = sqlite_db.read_columns(conn, table, guarded)  # a damaged page still raises
        bad = int(np.count_nonzero(np.minimum.reduce(list(out.values())) < 0))
        log.warning("%s: %d rows hold NULLs or values that are not integers (%s): their launch stats are left out",
                    table, bad, ", ".join(cols.values()))
        return out


def _with_stats(at: np.ndarray, k: dict[str, np.ndarray]) -> np.ndarray:
    """The ops whose call has a row (``at``: its index in ``k``, -1 for none) with every
    stat column read (no -1: NULL, or not an integer)."""
    rows = np.flatnonzero(at >= 0)
    whole = np.minimum.reduce(list(k.values())) >= 0
    return rows[whole[at[rows]]]


def _api_of_ops(conn: sqlite3.Connection, tabs: Schema) -> tuple[np.ndarray, np.ndarray]:
    """(op ids, sorted; the id of the call that launched each: its first row in ``rocpd_api_ops``)."""
    if not tabs.has("rocpd_api_ops", "api_id", "op_id"):
        z = np.zeros(0, np.int64)
        return z, z
    c = sqlite_db.read_columns(conn, "rocpd_api_ops", {"api": "api_id", "op": "op_id"},
                               not_null=tabs.not_null("rocpd_api_ops"))
    op, first = np.unique(c["op"], return_index=True)
    return op, c["api"][first]


def read(conn: sqlite3.Connection, path: Path) -> Trace:
    tabs = sqlite_db.schema(conn)
    if not is_rpd(tabs):
        from .nsys import not_an_export  # the shared message for a database of no known kind

        raise TraceFormatError(path, not_an_export(tabs))
    meta = dict(sqlite_db.rows(conn, "SELECT tag, value FROM rocpd_metadata")) \
        if tabs.has("rocpd_metadata", "tag", "value") else {}
    args_table = "rocpd_ustring" if tabs.has("rocpd_ustring", "id", "string") else "rocpd_string"
    api_of = _api_of_ops(conn, tabs)
    notes: list[str] = []
    calls = [got for table, default in (("rocpd_api", rocm_trace.CAT_ROCTX), ("rocpd_hsaApi", "hsa_api"))
             if (got := _calls(conn, tabs, table, args_table, default, api_of[1], notes)) is not None]
    ops = _ops(conn, tabs, calls, api_of, notes)
    if len(ops) and not tabs.has("rocpd_api_ops", "api_id", "op_id"):  # the link table (an empty one: as written)
        what = "rocpd_api_ops lacks api_id or op_id" if "rocpd_api_ops" in tabs.columns else "no rocpd_api_ops table"
        notes.append(f"{what}: the {len(ops):,} GPU ops cannot be tied to the calls that launched them (no "
                     "correlation, launch delays or section projection), and the kernels' launch sizes and copies' "
                     "bytes, which rocpd_kernelapi and rocpd_copyapi hold by call, are unknown")
    parts = [p for p, _ in calls] + [ops]
    processes = {int(g): rocm_trace.Process(pid=max(int(g), 0)) for p in parts for g in np.unique(p.gpid).tolist()}
    agents, queue_names = {}, {}
    for g, gpu, q in {(int(g), int(d), int(t)) for g, d, t in zip(ops.gpid.tolist(), ops.dev.tolist(), ops.tid.tolist())}:
        agents[(g, gpu)] = rocm_trace.Agent(gpu, True, {"gpu_id": gpu})
        queue_names[(g, gpu, q)] = f"queue {-q - 1}"
    unread = sorted(n for n in tabs.columns if n not in tabs.views and n not in READ)
    if unread:
        log.info("%s: %d tables not read (%s)", path, len(unread), ", ".join(unread[:12]))
    md: dict[str, Any] = {"clock": "rpd_tracer timestamps (ns)",
                          "rpd": {"schema_version": str(meta.get("schema_version", "")), "tables_not_read": unread}}
    if not any(len(p) for p in parts):  # never silently empty (a database rpd_tracer made and never filled)
        empty = " and ".join(t for t in ("rocpd_api", "rocpd_op", "rocpd_hsaApi") if t in tabs.columns)
        notes.append("nothing polyprof reads: the RPD database has no calls or device operations "
                     f"({empty or 'no rocpd_api or rocpd_op table'}: no rows)")
    if notes:
        md["warnings"] = notes
        for note in notes:
            log.warning("%s: %s", path, note)
    return rocm_trace.build(parts, processes, agents, queue_names, md, path.name)


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read an RPD database."""
    return sqlite_db.read_file(path, read)
