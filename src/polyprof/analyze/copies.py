"""Memory copies and fills per device and kind: how many, how many bytes, how long, and
the bandwidth they reached.

A copy is a device activity of kind memcpy (``gpu_memcpy``, rocprofv3's
``memory_copy``, Nsight's CUPTI memcpy table, XLA's ``MemcpyH2D`` events...), a fill
one of kind memset; XLA's copy HLO ops run as kernels (``copy-start``) are not copies
here (no byte count). Its size is the ``bytes`` stat (``trace/keys.py``: ``BYTES``),
which every reader sets where its source gives it (Kineto's ``bytes`` arg, Nsight's and
CUPTI's ``bytes``, rocpd's and rocprofv3's size, RPD's ``rocpd_copyapi.size``, XSpace's
``memcpy_details``/``memset_details``), else the ``size`` stat (MTIA's ``dma_request``
copies: Kineto args ``size`` and ``direction``). Its kind is the ``copy kind`` stat where
the reader gives one (Nsight, CUPTI), else read from its name (``Memcpy HtoD (Pinned ->
Device)``, ``MemcpyH2D``, ``Memcpy DtoD``, ``Host-to-Device``), else from its
``direction`` stat (``HOST_TO_DEVICE``), else from its ends' memory kinds (XLA's ``MemcpyOther`` from pinned to pageable memory is ``HtoH``), as one of ``HtoD``,
``DtoH``, ``DtoD``, ``PtoP``, ``HtoH``, ``Unified HtoD``/``DtoH``/``DtoD`` (unified-memory
migrations), ``memset``, ``map`` (OpenCL's map and unmap commands: the size mapped is not
counted as bytes moved, and they have no bandwidth: on a CPU device a 32 MiB map moved
nothing in 841 ns, 39,898 GB/s before) or ``unknown``; arrays count as device memory (``HtoA`` is
``HtoD``), and a ``DtoD`` copy between two agents (rocprofv3's and rocpd's ``src agent``
and ``dst agent``) is ``PtoP``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..derive import cache
from ..trace import keys
from ..trace.categories import Kind
from ..trace.copy_kind import copy_kind  # (tests and callers import it from here too)
from ..trace.core import Trace
from ..trace.sorting import unique_inverse
from .common import MEMCPY, MEMSET, device_view
from .frames import frame, order_desc
from .grouping import group_reduce, group_stats
from .window import WindowArg, view
from .window_counting import counted_ns

if TYPE_CHECKING:
    from .table import Table

COLUMNS = ["device", "kind", "count", "total_bytes", "total_ns", "bandwidth_gbps", "min_gbps", "median_gbps",
           "max_gbps", "small", "pageable", "unsized", "sized_ns"]
#: every kind a row may have (see the module doc), in a fixed order: a kind's index names it
KINDS = ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH", "Unified HtoD", "Unified DtoH", "Unified DtoD", "Unified PtoP",
         "Unified HtoH", "memset", "unknown", "map")
#: a copy smaller than this is small (many small copies cost their fixed latency each)
SMALL_BYTES = 1 << 20
#: stat of the copy's kind where a reader gives it (Nsight, the CUPTI plugin): ``HtoD``...
COPY_KIND = keys.COPY_KIND
#: stats of the memory kind of a copy's source and destination (``Pageable``, ``Pinned``, ``Device``)
SRC_KIND, DST_KIND = keys.SRC_KIND, keys.DST_KIND
#: a copy's bandwidth as the source computed it (Kineto's arg: from CUPTI's ns timestamps,
#: before the file rounded them to µs), GB/s
BANDWIDTH = "memory bandwidth (GB/s)"
#: stats of a copy's source and destination agents (ROCm readers)
SRC_AGENT, DST_AGENT = "src agent", "dst agent"
#: MTIA's args of a copy (``dma_request``, category ``mtia_ccp_events``): its size in bytes
#: and its kind (``HOST_TO_DEVICE``, ``DEVICE_TO_HOST``), read where ``bytes`` / a kind
#: from the name or ``copy kind`` are absent
SIZE, DIRECTION = "size", "direction"

#: a memory kind (``src kind``/``dst kind``) -> the end of a copy it makes
_END = {"pageable": "H", "pinned": "H", "device": "D", "array": "D"}
#: the stats a copy's row is read for
STATS = (keys.BYTES, BANDWIDTH, COPY_KIND, SRC_KIND, DST_KIND, SRC_AGENT, DST_AGENT, SIZE, DIRECTION)
Found = dict[str, tuple[np.ndarray, np.ndarray]]


def _stats(trace: Trace, rows: np.ndarray) -> Found:
    """(has, value) of each of :data:`STATS` at ``rows`` (float64 with NaN for a numeric
    stat, else an object array with None), decoded for these rows alone (a Kineto
    trace's other args stay undecoded)."""
    order = np.argsort(rows, kind="stable")
    got = trace.stats.lookup_rows(STATS, rows[order]) if len(rows) else {}
    out: Found = {}
    for key, (m, vals) in got.items():
        has = np.zeros(len(rows), bool)
        has[order[m]] = True
        numeric = vals.dtype.kind in "iuf"
        v = np.full(len(rows), np.nan if numeric else None, np.float64 if numeric else object)
        v[order[m]] = vals if numeric else vals.tolist()
        out[key] = (has, v)
    return out


def _texts(found: Found, key: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(has, text) of stat ``key``."""
    m, vals = found.get(key, (np.zeros(n, bool), np.full(n, None, object)))
    out = np.full(n, "", object)
    out[m] = [str(v) for v in vals[m].tolist()]
    return m, out


def _numbers(found: Found, key: str, n: int) -> np.ndarray:
    """Stat ``key`` as float64, NaN where absent or not a number (or negative: Kineto
    writes -1 for an unknown size)."""
    out = np.full(n, np.nan)
    m, vals = found.get(key, (np.zeros(n, bool), np.full(n, None, object)))
    if vals.dtype.kind == "f":
        return np.where(m & (vals >= 0), vals, np.nan)
    for i in np.flatnonzero(m).tolist():
        x = vals[i]
        if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) and x >= 0:
            out[i] = float(x)
    return out


def _kinds(trace: Trace, rows: np.ndarray, fill: np.ndarray, found: Found) -> tuple[np.ndarray, np.ndarray]:
    """(kind, pageable) of each copy row (``fill``: the row is a memset)."""
    n = len(rows)
    ids, inv = unique_inverse(trace.events["name"][rows])
    strings = [trace.strings[i] for i in ids.tolist()]
    kind = np.array([copy_kind(s) for s in strings], object)[inv] if n else np.zeros(0, object)
    pageable = np.array(["pageable" in s.lower() for s in strings], bool)[inv] if n else np.zeros(0, bool)
    has, stat = _texts(found, COPY_KIND, n)
    if has.any():
        told = {v: copy_kind(v) for v in set(stat[has].tolist())}
        kind[has] = [told[v] for v in stat[has].tolist()]
    _directions(found, kind)
    memory = [[t.lower() for t in _texts(found, key, n)[1].tolist()] for key in (SRC_KIND, DST_KIND)]
    ends = [np.array([_END.get(t, "") for t in m], object) for m in memory]
    for m in memory:
        pageable |= np.array([t == "pageable" for t in m], bool)
    if n:  # a copy its name leaves open (XLA's MemcpyOther): from its memory kinds
        both = (kind == "unknown") & (ends[0] != "") & (ends[1] != "")
        kind[both] = [f"{a}to{b}" for a, b in zip(ends[0][both].tolist(), ends[1][both].tolist())]
    kind[fill] = "memset"
    if SRC_AGENT in found and DST_AGENT in found:
        (hs, src), (hd, dst) = found[SRC_AGENT], found[DST_AGENT]
        kind[(kind == "DtoD") & hs & hd & (src != dst)] = "PtoP"
    return kind, pageable & ~fill


def _directions(found: Found, kind: np.ndarray) -> None:
    """Set the kind of each copy still ``unknown`` that has a :data:`DIRECTION` (MTIA's
    ``DEVICE_TO_HOST``...) from it, in place: parsed once per distinct value."""
    has, vals = found.get(DIRECTION, (np.zeros(len(kind), bool), None))
    at = np.flatnonzero(has & (kind == "unknown"))
    if not len(at) or vals is None:
        return
    ids, inv = unique_inverse(vals[at].astype(np.str_))
    kind[at] = np.array([copy_kind(str(v)) for v in ids.tolist()], object)[inv]


def _sizes(found: Found, n: int) -> np.ndarray:
    """Each copy's size in bytes (float64, NaN where unknown): :data:`keys.BYTES`, else
    :data:`SIZE` (MTIA's)."""
    size = _numbers(found, keys.BYTES, n)
    if SIZE in found:
        size = np.where(np.isnan(size), _numbers(found, SIZE, n), size)
    return size


class PerCopy(NamedTuple):
    """The copies and fills of a trace (or window), one entry per copy."""

    rows: np.ndarray  # event rows
    plane: np.ndarray  # plane index
    kind: np.ndarray  # index into KINDS
    dur: np.ndarray  # ns counted: in a time window that cuts the copy, its part inside
    size: np.ndarray  # bytes, float64, NaN where unknown: the whole copy's (its size class)
    gbps: np.ndarray  # bandwidth of the copy, NaN where it has no size or no duration
    pageable: np.ndarray  # bool
    moved: np.ndarray  # bytes counted: ``size``, or for a copy a time window cuts, its share inside


def per_copy(trace: Trace, window: WindowArg = None) -> PerCopy:
    """Every copy and fill the ``window`` counts; see :func:`copies`. A copy's bandwidth is
    the source's own (:data:`BANDWIDTH`) where it gives one, else size / duration. Made
    once per trace and window (the table and the copy findings read it)."""
    return cache.memo(view(trace, window), "per_copy", _per_copy)


def _per_copy(trace: Trace) -> PerCopy:
    v = device_view(trace)
    sel = np.flatnonzero(v.counted & ((v.cls == MEMCPY) | (v.cls == MEMSET)))
    rows = v.rows[sel]
    kinds = trace.kinds[rows]
    own = (kinds == Kind.MEMCPY) | (kinds == Kind.MEMSET)  # not XLA's copy ops run as kernels
    sel, rows = sel[own], rows[own]
    whole = (v.end[sel] - v.start[sel]).astype(np.int64)
    dur = counted_ns(trace, v.start[sel], v.end[sel], whole)  # (a time window's cut copy: its part inside)
    found = _stats(trace, rows)
    size = _sizes(found, len(rows))
    kind, pageable = _kinds(trace, rows, v.cls[sel] == MEMSET, found)
    size[kind == "map"] = np.nan  # (the size mapped, not bytes known to have moved: no bandwidth)
    code = {k: i for i, k in enumerate(KINDS)}
    timed = ~np.isnan(size) & (whole > 0)
    gbps = np.full(len(rows), np.nan)
    gbps[timed] = size[timed] / whole[timed]
    told = _numbers(found, BANDWIDTH, len(rows)) * np.where(np.isnan(size), np.nan, 1.0)
    moved = np.where(dur < whole, size * dur / np.maximum(whole, 1), size)  # (at the copy's own rate)
    return PerCopy(rows, v.plane[sel].astype(np.int64), np.array([code[k] for k in kind.tolist()], np.int64), dur,
                   size, np.where(told > 0, told, gbps), pageable, moved)


def copies(trace: Trace, window: WindowArg = None) -> Table:
    """Memory copies and fills, one row per (device, kind); see the module doc.

    Columns: ``device`` (plane), ``kind``, ``count``, ``total_bytes`` (of those whose size
    is known), ``total_ns`` (their summed duration, all of them), ``bandwidth_gbps``
    (achieved: ``total_bytes`` / ``sized_ns``; GB/s = 1e9 bytes/s = bytes/ns),
    ``min_gbps``, ``median_gbps``, ``max_gbps`` (over the copies with a size and a
    duration; a copy's own is the source's where it gives one: Kineto's ``memory
    bandwidth (GB/s)``, which CUPTI's ns timestamps made before the file rounded them),
    ``small`` (copies under :data:`SMALL_BYTES`, 1 MiB), ``pageable`` (copies to or from
    pageable host memory, where the trace says: each waits for a staging copy and
    cannot overlap), ``unsized`` (copies whose size the trace does not give),
    ``sized_ns`` (the duration of those with a size). With a ``window``, the copies
    launched in its steps; in a time window (``polyprof run --delay/--duration``), those
    running in it, one its edges cut for its part inside: that part's time in
    ``total_ns`` and ``sized_ns`` (as "Device time" covers it), its bytes in proportion in
    ``total_bytes`` (the bytes moved inside at the copy's own rate, so ``bandwidth_gbps``
    stays the copies' rate), its size class (``small``) and bandwidth (``*_gbps``) its
    whole copy's. Sorted by ``total_ns``, largest first.
    """
    c = per_copy(trace, window)
    if not len(c.rows):
        return frame({c: np.zeros(0, object if c in ("device", "kind") else np.float64 if c.endswith("gbps")
                                  else np.int64) for c in COLUMNS})
    key = group_keys(c)
    sized = ~np.isnan(c.size)
    g = group_stats(key, c.dur)
    starts, order = g["starts"], g["order"]

    def total(x: np.ndarray) -> np.ndarray:
        return group_reduce(order, starts, x, np.add)

    nbytes = np.round(total(np.where(sized, c.moved, 0.0))).astype(np.int64)
    sized_ns = total(np.where(sized, c.dur, 0))
    have = ~np.isnan(c.gbps)
    bw = group_stats(key[have], c.gbps[have])
    at = np.searchsorted(g["key"], bw["key"])
    per = {s: np.full(len(g["key"]), np.nan) for s in ("min", "median", "max")}
    for s in per:
        per[s][at] = bw[s]
    device, kind = key_labels(g["key"], [p.name for p in trace.planes])
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = np.where(sized_ns > 0, nbytes / np.maximum(sized_ns, 1), np.nan)
    return frame({
        "device": device, "kind": kind, "count": g["count"], "total_bytes": nbytes,
        "total_ns": g["total"].astype(np.int64), "bandwidth_gbps": achieved, "min_gbps": per["min"],
        "median_gbps": per["median"], "max_gbps": per["max"],
        "small": total((sized & (np.nan_to_num(c.size, nan=SMALL_BYTES) < SMALL_BYTES)).astype(np.int64)),
        "pageable": total(c.pageable.astype(np.int64)), "unsized": total((~sized).astype(np.int64)),
        "sized_ns": sized_ns.astype(np.int64)}, order=order_desc(g["total"]))


def group_keys(c: PerCopy) -> np.ndarray:
    """The (device, kind) group of each copy as one int64: the same across windows of a
    rank (whose planes are the rank's), for ``ranks/window_values.py``."""
    return c.plane * len(KINDS) + c.kind


def key_labels(keys: np.ndarray, planes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(device, kind) of :func:`group_keys`' keys (``planes``: the plane names)."""
    plane, kind = np.divmod(np.asarray(keys, np.int64), len(KINDS))
    return (np.array([planes[int(p)] for p in plane.tolist()], object),
            np.array([KINDS[int(k)] for k in kind.tolist()], object))
