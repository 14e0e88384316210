"""Each event table of an Nsight Systems export as NumPy columns (one :class:`Part` per table).

Times are the export's: nanoseconds since the session start. A host event's thread is
its ``globalTid`` (process ``globalTid >> 24 & 0xFFFFFF``, thread ``globalTid &
0xFFFFFF``); a device event's process is its ``globalPid`` (when the table has none, the
process of the runtime call with its correlation id: see build.py).
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, Callable

import numpy as np

from ...lowlevel.demangle import demangle_all
from ...trace import keys
from .. import sqlite_bounds, sqlite_db
from ..sqlite_db import quote
from . import schema as S
from .schema import Export
from ...trace.sorting import member, unique, unique_inverse
from ..parts import Part, pair_keys, zeros, triples, combined_names as _combined_names, one as _one, set_stat as _set

#: columns of 15-digit ids that vary little (process << 24 | thread), read as differences
_WIDE = ("globalTid", "globalPid")
#: what a host event cannot be placed without: its thread (``globalTid``, nullable in
#: Nsight's schema; NULL read as -1 made a process of its own, thread 16777215). A row
#: without it is left out and counted (sqlite_db.read_columns' ``required``). A device
#: row's NULL ``globalPid`` is not: it takes its launch's process (build.fill_process)
HOST_KEYS = ("globalTid",)

#: the API version suffix Nsight keeps on runtime names (``cudaMemcpy_v3020``)
_VERSION = re.compile(r"_v\d+$")

CAT_RUNTIME, CAT_DRIVER = "cuda_runtime", "cuda_driver"
CAT_NVTX, CAT_NVTX_MARK = "nvtx", "nvtx_mark"
CAT_OSRT, CAT_GRAPH, CAT_SYNC = "os_runtime", "cuda_graph", "cuda_sync"


def _host_ids(gtid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(globalPid, OS thread id) of globalTid values."""
    gpid = np.where(gtid >= 0, gtid & ~np.int64(0xFFFFFF), -1)
    return gpid, gtid & 0xFFFFFF


def names(conn: sqlite3.Connection, table: str, key: str, value: str, where: str = "") -> dict[int, str]:
    """``table``'s ``key -> value`` texts, each cut to ``MAX_NAME_CHARS`` (a longer one is
    damage or hostile: a 900 MB "name" stalled the text report); a key that is not an
    integer is a damaged table, named (NULL keys and values are skipped)."""
    cut = sqlite_bounds.MAX_NAME_CHARS
    got = sqlite_db.rows(conn, f"SELECT {quote(key)}, substr({quote(value)}, 1, {cut}) FROM {quote(table)}{where}",
                         table)
    bad = next((i for i, v in got if i is not None and v is not None and (not isinstance(i, int) or
                                                                         isinstance(i, bool))), None)
    if bad is not None:
        raise sqlite_bounds.Refused(f"{table}.{key} holds {type(bad).__name__} ({str(bad)[:40]!r}), not integer ids")
    return {i: str(v) for i, v in got if i is not None and v is not None}


class Strings:
    """``StringIds``: id -> text, and ids -> (codes, distinct texts) for a column."""

    #: the table the texts come from, as the note of missing ones names it
    table = "StringIds"
    #: ids asked for that the table lacks, and how many rows named them (:meth:`note_missing`)
    missing: set[int]
    missing_rows = 0

    def __init__(self, conn: sqlite3.Connection, ex: Export):
        self.text: dict[int, str] = {}
        self.missing = set()
        if ex.has("StringIds", "id", "value"):
            self.text = names(conn, "StringIds", "id", "value")

    def codes(self, ids: np.ndarray, clean: Callable[[list[str]], list[str]] | None = None
              ) -> tuple[np.ndarray, list[str]]:
        """(code per id, distinct texts), the texts through ``clean`` (all at once) if given.
        An id the table lacks is named ``[string N]`` and counted for :meth:`note_missing`."""
        uniq, inv = unique_inverse(ids)
        ulist = uniq.tolist()
        vals = [self.text.get(u, f"[string {u}]" if u >= 0 else "[unnamed]") for u in ulist]
        lost = [k for k, u in enumerate(ulist) if u >= 0 and u not in self.text]
        if lost:
            self.missing.update(ulist[k] for k in lost)
            self.missing_rows += int(np.isin(inv, lost).sum())
        if clean is not None:
            vals = clean(vals)
        return inv.astype(np.int64), vals

    def note_missing(self, notes: list[str]) -> None:
        """Say in ``notes`` how many rows named a string the table lacks (a damaged or cut
        export), which are named ``[string N]`` by their id. Returns None: the last of a
        reader's parts (it runs after the others asked for their names)."""
        if self.missing:
            ids = sorted(self.missing)
            shown = ", ".join(map(str, ids[:5])) + (", ..." if len(ids) > 5 else "")
            notes.append(f"{self.missing_rows} row(s) name {len(ids)} string id(s) that {self.table} lacks "
                         f"({shown}; a damaged or cut export): named [string N] by the id")


def _opt(ex: Export, table: str, *cols: str) -> dict[str, str]:
    have = set(ex.cols(table))
    return {c: c for c in cols if c in have}






def _triples(c: dict[str, np.ndarray], prefix: str, n: int) -> np.ndarray | None:
    names = [f"{prefix}{a}" for a in "XYZ"]
    if not all(k in c for k in names):
        return None
    return triples(*(c[k] for k in names))


#: the "stream" of unified-memory migrations (copies of kind ``Unified HtoD``...): the
#: driver moves managed pages on a fault or a prefetch, on no stream and for no API call
#: (correlation id 0); their line is named ``unified memory`` (build.add_part), as
#: Nsight's own timeline shows them on a memory row apart from the streams (their
#: ``stream`` stat stays the file's 0, as the Kineto export writes it for HTA)
UNIFIED_MEMORY = -2

#: CUPTI's "not applicable" (``CUPTI_SYNCHRONIZATION_INVALID_VALUE``) in a synchronisation
#: record's ``streamId`` (a sync on no stream: ``cudaEventSynchronize``,
#: ``cudaDeviceSynchronize``) or ``eventId``. Read as -1, none: the record is on the
#: device's ``context`` line (build.add_part) with stream -1, as Kineto writes it
#: (``"stream": -1``) and the CUPTI plugin lays it out, outside every stream's time (HTA
#: and ``--window hta`` count only device rows with a stream); no ``event id`` stat
NOT_APPLICABLE = 0xFFFFFFFF

#: the "stream" of the device rows of a table without ``streamId`` (a damaged or trimmed
#: export, said in the warnings: schema.defaulted_note): one line per device named
#: ``unknown stream`` (build.add_part), and no ``stream`` stat
UNKNOWN_STREAM = -3


def _device_common(c: dict[str, np.ndarray], n: int, stats: dict[str, Any]) -> None:
    if "correlationId" in c:
        _set(stats, keys.CORRELATION_ID, c["correlationId"])
    _set(stats, keys.STREAM, c["streamId"], missing=UNKNOWN_STREAM)
    stats[keys.DEVICE] = c["deviceId"]
    if "contextId" in c:
        _set(stats, "context", c["contextId"])
    if "graphNodeId" in c:
        _set(stats, "graph node id", c["graphNodeId"])
    if "graphId" in c:
        _set(stats, "graph id", c["graphId"])


def _device_part(table: str, c: dict[str, np.ndarray], names: tuple[np.ndarray, list[str]],
                 category: str, stats: dict[str, Any]) -> Part:
    n = len(c["start"])
    return Part(table, True, c["start"], c["end"], c.get("globalPid", np.full(n, -1, np.int64)), c["streamId"],
                c["deviceId"], names[0], names[1], *_one(n, category), stats, c.get("correlationId"))


_DEVICE_COLS = S._DEVICE + S._DEVICE_OPT


def device_defaults(c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``c`` with the device columns its table lacks (schema.OPTIONAL; said in the
    warnings): device 0, stream UNKNOWN_STREAM; a missing ``correlationId`` stays
    missing (no links)."""
    n = len(c["start"])
    c.setdefault("deviceId", np.zeros(n, np.int64))
    c.setdefault("streamId", np.full(n, UNKNOWN_STREAM, np.int64))
    return c


def _device_exprs(ex: Export, t: str) -> dict[str, str] | None:
    """The device columns of ``t`` to read, or None when it lacks one its reader needs."""
    if not ex.has(t, *S._DEVICE):
        return None
    return _opt(ex, t, *_DEVICE_COLS)


def kernels(conn: sqlite3.Connection, ex: Export, strings: Strings) -> Part | None:
    t = S.KERNEL
    exprs = _device_exprs(ex, t)
    if exprs is None:
        return None
    name_col = next((c for c in ("demangledName", "shortName", "mangledName") if ex.has(t, c)), None)
    exprs.update(_opt(ex, t, "globalPid", "contextId", "registersPerThread", "gridX", "gridY", "gridZ",
                      "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory",
                      "graphNodeId", "graphId", "gridId"))
    if name_col:
        exprs["name"] = name_col
    c = device_defaults(sqlite_db.read_columns(conn, t, exprs, not_null=ex.tables.not_null(t), wide=_WIDE))
    n = len(c["start"])
    stats: dict[str, Any] = {}
    _device_common(c, n, stats)
    for key, prefix in ((keys.GRID, "grid"), (keys.BLOCK, "block")):
        trip = _triples(c, prefix, n)
        if trip is not None:
            stats[key] = trip
    if "registersPerThread" in c:
        _set(stats, "registers per thread", c["registersPerThread"])
    if "staticSharedMemory" in c or "dynamicSharedMemory" in c:
        st = c.get("staticSharedMemory", np.zeros(n, np.int64))
        dy = c.get("dynamicSharedMemory", np.zeros(n, np.int64))
        stats["shared memory"] = np.maximum(st, 0) + np.maximum(dy, 0)
    names = strings.codes(c["name"], demangle_all if name_col == "mangledName" else None) if "name" in c \
        else _one(n, "kernel")  # an export with only the mangled name: as C++ writes it
    return _device_part(t, c, names, keys.CAT_KERNEL, stats)




def _bytes(stats: dict[str, Any], c: dict[str, np.ndarray], table: str, notes: list[str]) -> None:
    """The ``bytes`` stat, where the table has the column; a negative count (a damaged
    file) is left out, its copy or fill kept with its size unknown, said in ``notes``."""
    if "bytes" not in c:
        return
    neg = c["bytes"] < 0
    bad = int(np.count_nonzero(neg & (c["bytes"] != -1)))  # -1: NULL, no size given
    if bad:
        notes.append(f"{bad} row(s) of {table} hold a negative byte count (a damaged file): kept, their size "
                     "unknown")
    _set(stats, keys.BYTES, np.where(neg, -1, c["bytes"]) if bad else c["bytes"])


def copies(conn: sqlite3.Connection, ex: Export, notes: list[str]) -> Part | None:
    t = S.MEMCPY
    exprs = _device_exprs(ex, t)
    if exprs is None:
        return None
    exprs.update(_opt(ex, t, "globalPid", "contextId", "bytes", "copyKind", "srcKind", "dstKind", "graphNodeId"))
    c = device_defaults(sqlite_db.read_columns(conn, t, exprs, not_null=ex.tables.not_null(t), wide=_WIDE))
    n = len(c["start"])
    kind = c.get("copyKind", np.zeros(n, np.int64))
    ck, mk = ex.copy_kinds, ex.mem_kinds
    unified = member(kind, np.array([k for k, v in ck.items() if v.startswith("Unified")], np.int64))
    stats: dict[str, Any] = {}
    _device_common(c, n, stats)  # (their stream stat stays the file's: 0)
    if unified.any():  # unified-memory migrations: on their own line (UNIFIED_MEMORY)
        c["streamId"] = np.where(unified, UNIFIED_MEMORY, c["streamId"])
    _bytes(stats, c, t, notes)
    src, dst = c.get("srcKind", np.full(n, -1, np.int64)), c.get("dstKind", np.full(n, -1, np.int64))

    def label(k: int, s: int, d: int) -> str:
        base = f"Memcpy {ck.get(k, f'kind {k}')}"
        return base if s < 0 or d < 0 else f"{base} ({mk.get(s, s)} -> {mk.get(d, d)})"

    names = _combined_names([kind, src, dst], label)
    kcodes, kvals = _combined_names([kind], lambda k: ck.get(k, f"kind {k}"))
    stats[keys.COPY_KIND] = np.array(kvals, dtype=object)[kcodes]
    return _device_part(t, c, names, keys.CAT_MEMCPY, stats)


def fills(conn: sqlite3.Connection, ex: Export, notes: list[str]) -> Part | None:
    t = S.MEMSET
    exprs = _device_exprs(ex, t)
    if exprs is None:
        return None
    exprs.update(_opt(ex, t, "globalPid", "contextId", "bytes", "value", "memKind", "graphNodeId"))
    c = device_defaults(sqlite_db.read_columns(conn, t, exprs, not_null=ex.tables.not_null(t), wide=_WIDE))
    n = len(c["start"])
    stats: dict[str, Any] = {}
    _device_common(c, n, stats)
    _bytes(stats, c, t, notes)
    if "value" in c:
        _set(stats, "value", c["value"])
    mk = ex.mem_kinds
    names = _combined_names([c.get("memKind", np.full(n, -1, np.int64))],
                            lambda k: "Memset" if k < 0 else f"Memset ({mk.get(k, k)})")
    return _device_part(t, c, names, keys.CAT_MEMSET, stats)


def syncs(conn: sqlite3.Connection, ex: Export) -> Part | None:
    t = S.SYNC
    exprs = _device_exprs(ex, t)
    if exprs is None:
        return None
    exprs.update(_opt(ex, t, "globalPid", "contextId", "syncType", "eventId"))
    c = sqlite_db.read_columns(conn, t, exprs, not_null=ex.tables.not_null(t), wide=_WIDE)
    n = len(c["start"])
    for col in ("streamId", "eventId"):
        if col in c:
            c[col] = np.where((c[col] == NOT_APPLICABLE) | (c[col] < 0), -1, c[col])
    device_defaults(c)
    stats: dict[str, Any] = {}
    _device_common(c, n, stats)
    if "eventId" in c:
        _set(stats, "event id", c["eventId"])
    st = ex.sync_types
    names = _combined_names([c.get("syncType", np.zeros(n, np.int64))], lambda k: st.get(k, f"Sync {k}"))
    return _device_part(t, c, names, CAT_SYNC, stats)


def _host_part(table: str, c: dict[str, np.ndarray], names: tuple[np.ndarray, list[str]],
               category: tuple[np.ndarray, list[str]], stats: dict[str, Any], corr: np.ndarray | None = None) -> Part:
    n = len(c["start"])
    gpid, tid = _host_ids(c["globalTid"])
    return Part(table, False, c["start"], c["end"], gpid, tid, zeros(n), names[0], names[1],
                category[0], category[1], stats, corr)


def _repeats(c: dict[str, np.ndarray], ours: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Which ``other`` rows (calls of another event class) repeat one of ``ours`` (runtime
    and driver calls): the same correlation id in the same process; in a table without
    ``correlationId`` (damaged: said), a call of ``ours`` on the same thread inside its
    span (the repeat's span is slightly wider), found per thread (a few)."""
    if "correlationId" in c:
        gpid = _host_ids(c["globalTid"])[0]
        ckey, okey = pair_keys(gpid[ours], c["correlationId"][ours], gpid[other], c["correlationId"][other])
        ckey.sort()
        pos = np.minimum(np.searchsorted(ckey, okey), max(len(ckey) - 1, 0))
        return (ckey[pos] == okey) & (c["correlationId"][other] > 0) if len(ckey) else np.zeros(len(okey), bool)
    dup = np.zeros(len(other), bool)
    gt, start, end = c["globalTid"], c["start"], c["end"]
    for g in unique(gt[other]).tolist():
        mine, theirs = ours[gt[ours] == g], np.flatnonzero(gt[other] == g)
        if not len(mine):
            continue
        mine = mine[np.argsort(start[mine], kind="stable")]
        o = other[theirs]
        pos = np.minimum(np.searchsorted(start[mine], start[o]), len(mine) - 1)
        inside = (start[mine[pos]] >= start[o]) & (end[mine[pos]] <= end[o])
        dup[theirs] = inside
    return dup


def api_calls(conn: sqlite3.Connection, ex: Export, strings: Strings, notes: list[str]) -> tuple[Part | None, int]:
    """CUDA runtime and driver calls; also the number of rows left out as copies of a call
    already read (Nsight 2022 adds a row of another event class, with the call's
    backtrace, for some calls: same correlation id, a slightly wider span). A row with
    no thread (``globalTid`` NULL: the schema allows it) is left out, said in ``notes``
    (as in every host table: :data:`HOST_KEYS`)."""
    t = S.RUNTIME
    if not ex.has(t, *S.NEEDS[t]):
        return None, 0
    exprs = _opt(ex, t, *S.NEEDS[t], *S.OPTIONAL[t])  # without correlationId or nameId: said (build.py)
    rt, drv = ex.api_classes["TRACE_PROCESS_EVENT_CUDA_RUNTIME"], ex.api_classes["TRACE_PROCESS_EVENT_CUDA_DRIVER"]
    dropped = 0
    nn = ex.tables.not_null(t)
    if ex.has(t, "eventClass"):
        exprs["eventClass"] = "eventClass"
    c = sqlite_db.read_columns(conn, t, exprs, not_null=nn, wide=_WIDE, required=HOST_KEYS, notes=notes)
    if "eventClass" in c:
        # a call of another class that repeats a runtime/driver call already read is left
        # out (runtime/driver rows first)
        cuda = (c["eventClass"] == rt) | (c["eventClass"] == drv)
        other = np.flatnonzero(~cuda)
        if len(other):
            ours = np.flatnonzero(cuda)
            dup = _repeats(c, ours, other)
            dropped = int(dup.sum())
            take = np.concatenate([ours, other[~dup]])
            c = {k: v.take(take) for k, v in c.items()}
            del take, ours, dup
        del cuda, other
    n = len(c["start"])
    names = strings.codes(c["nameId"], lambda vals: [_VERSION.sub("", s) for s in vals]) if "nameId" in c \
        else _one(n, "[unnamed CUDA call]")
    cls = c.get("eventClass", np.full(n, rt, np.int64))
    known = (cls == rt) | (cls == drv)
    # driver calls by class; calls of other classes by their name
    is_driver = np.array([s.startswith("cu") and not s.startswith("cuda") for s in names[1]], bool)
    drv_row = np.where(known, cls == drv, is_driver[names[0]] if len(names[1]) else False)
    category = (drv_row.astype(np.int64), [CAT_RUNTIME, CAT_DRIVER])
    stats: dict[str, Any] = {}
    if "correlationId" not in c:
        return _host_part(t, c, names, category, stats), dropped
    _set(stats, keys.CORRELATION_ID, c["correlationId"])
    return _host_part(t, c, names, category, stats, c["correlationId"]), dropped


def nvtx(conn: sqlite3.Connection, ex: Export, strings: Strings, notes: list[str]) -> tuple[Part | None, int]:
    """NVTX push/pop and start/end ranges (sections) and marks; also the number of
    ranges left out because they never ended."""
    t = S.NVTX
    if not ex.has(t, "start", "eventType", "globalTid"):
        return None, 0
    types = ex.nvtx_types
    ranges = (types["NvtxPushPopRange"], types["NvtxStartEndRange"])
    wanted = ranges + (types["NvtxMark"],)
    exprs = {"start": "start", "end": "end" if ex.has(t, "end") else "NULL", "eventType": "eventType",
             "globalTid": "globalTid"}
    exprs.update(_opt(ex, t, "textId", "domainId"))
    if ex.has(t, "text"):
        exprs["rowid"] = "rowid"
    c = sqlite_db.read_columns(conn, t, exprs, not_null=ex.tables.not_null(t), wide=_WIDE, required=HOST_KEYS,
                               notes=notes)
    # every row's inline text (code 0: none), domain registrations' among them
    text, tvals = np.zeros(len(c["start"]), np.int64), [""]
    if ex.has(t, "text"):
        trow, tc, tv = sqlite_db.read_texts(conn, t, "text")
        text[np.searchsorted(c.pop("rowid"), trow)] = tc + 1
        tvals += tv
        del trow, tc
    domains: dict[int, str] = {}
    if "domainId" in c:
        reg = np.flatnonzero((c["eventType"] == types["NvtxDomainCreate"]) & (text > 0) & (c["domainId"] >= 0))
        pairs = np.unique(np.stack([c["domainId"][reg], text[reg]]), axis=1) if len(reg) else np.zeros((2, 0), int)
        domains = {int(d): tvals[int(k)] for d, k in pairs.T.tolist()}
    wanted_rows = np.isin(c["eventType"], np.array(wanted, np.int64))
    if not wanted_rows.all():  # domain registrations and other event types: not events
        take = np.flatnonzero(wanted_rows)
        c = {k: v.take(take) for k, v in c.items()}
        text = text.take(take)
        del take
    del wanted_rows
    counts = np.bincount(text, minlength=len(tvals))  # the texts of the rows kept (and "": code 0)
    counts[0] = 1
    used = np.flatnonzero(counts)
    remap = np.zeros(len(tvals), np.int64)
    remap[used] = np.arange(len(used))
    tcodes, tvals = remap[text], [tvals[i] for i in used.tolist()]
    del text, counts, remap
    if "textId" in c:
        has_id = c["textId"] >= 0
        icodes, ivals = strings.codes(np.where(has_id, c["textId"], -1))
        all_vals = tvals + ivals
        codes = np.where(has_id, icodes + len(tvals), tcodes)
    else:
        all_vals, codes = tvals, tcodes
    all_vals = [v if v else "[unnamed NVTX range]" for v in all_vals]
    is_mark = c["eventType"] == types["NvtxMark"]
    unended = ~is_mark & (c["end"] < c["start"])
    keep = ~unended
    c["end"] = np.where(is_mark, c["start"], c["end"])
    stats: dict[str, Any] = {}
    if domains:
        dom, ids = c["domainId"], np.array(sorted(domains), np.int64)
        rows = np.flatnonzero(np.isin(dom, ids))
        if len(rows):
            labels = np.array([domains[int(d)] for d in ids.tolist()], dtype=object)
            stats["domain"] = (rows, labels[np.searchsorted(ids, dom[rows])])
    part = _host_part(t, c, (codes, all_vals), (is_mark.astype(np.int64), [CAT_NVTX, CAT_NVTX_MARK]), stats)
    return part.take(keep) if not keep.all() else part, int(unended.sum())


def _named_host(conn: sqlite3.Connection, ex: Export, strings: Strings, table: str, category: str,
                notes: list[str], extra: tuple[str, ...] = ()) -> Part | None:
    if not ex.has(table, *S.NEEDS[table]):
        return None
    exprs = _opt(ex, table, *S.NEEDS[table], *S.OPTIONAL[table], *extra)  # without nameId: said (build.py)
    c = sqlite_db.read_columns(conn, table, exprs, not_null=ex.tables.not_null(table), wide=_WIDE,
                               required=HOST_KEYS, notes=notes)
    n = len(c["start"])
    stats: dict[str, Any] = {}
    for col in extra:
        if col in c:
            _set(stats, {"graphNodeId": "graph node id", "graphExecId": "graph exec id",
                         "returnValue": "return value"}.get(col, col), c[col])
    names = strings.codes(c["nameId"]) if "nameId" in c else _one(n, "[unnamed]")
    return _host_part(table, c, names, _one(n, category), stats)


def os_calls(conn: sqlite3.Connection, ex: Export, strings: Strings, notes: list[str]) -> Part | None:
    return _named_host(conn, ex, strings, S.OSRT, CAT_OSRT, notes)


def graph_table(conn: sqlite3.Connection, ex: Export, strings: Strings, table: str, notes: list[str]) -> Part | None:
    """CUDA_GRAPH_EVENTS or CUDA_GRAPH_NODE_EVENTS."""
    return _named_host(conn, ex, strings, table, CAT_GRAPH, notes, ("graphNodeId", "graphExecId"))
