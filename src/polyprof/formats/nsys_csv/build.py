"""``nsys stats`` trace reports' columns -> parts -> the Trace, laid out as the SQLite
export's reader lays it out (formats/nsys/build.py): a source per process, a
``/host:CPU`` plane with a track per thread, a ``/device:GPU:<n>`` plane per device with
a track per stream, the same categories, names and stat keys, a flow from each CUDA
call to the device work with its correlation id."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...errors import TraceFormatError
from ...trace import keys
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from ..nsys.build import add_flows, add_part, fill_process
from ..nsys.tables import CAT_DRIVER, CAT_NVTX, CAT_RUNTIME
from ..parts import Part, group_rows, set_stat, triples, zeros
from .sections import Columns

_VERSION = re.compile(r"_v\d+$")
_DEVICE = re.compile(r"^(.*?)\s*\((\d+)\)\s*$")
_MEMCPY, _MEMSET = "[CUDA memcpy", "[CUDA memset"
#: nsys 2023+ spells copy kinds out (``Host-to-Device``); the export's short names
_ENDS = {"host": "H", "device": "D", "array": "A", "peer": "P"}


def _copy_kind(name: str) -> str:
    """``[CUDA memcpy Host-to-Device]`` / ``[CUDA memcpy HtoD]`` -> ``HtoD``."""
    inner = name[len(_MEMCPY):].strip().rstrip("]").strip()
    unified = inner.startswith("Unified ")
    body = inner[len("Unified "):] if unified else inner
    m = re.fullmatch(r"(\w+)-to-(\w+)", body)
    if m and m.group(1).lower() in _ENDS and m.group(2).lower() in _ENDS:
        body = f"{_ENDS[m.group(1).lower()]}to{_ENDS[m.group(2).lower()]}"
    return ("Unified " if unified else "") + (body or "Unknown")


def devices(cols: Columns) -> tuple[np.ndarray, dict[int, dict[str, Any]]]:
    """Device index of each row and the properties known of each (its name): nsys
    writes ``NVIDIA A100-SXM4-40GB (0)``."""
    codes, vals = cols.texts("device")
    ids: list[int] = []
    props: dict[int, dict[str, Any]] = {}
    for v in vals:
        m = _DEVICE.match(v)
        if m:
            d = int(m.group(2))
            if m.group(1):
                props[d] = {"name": m.group(1), "id": d}
        else:
            digits = re.search(r"(\d+)\s*$", v)
            d = int(digits.group(1)) if digits else 0
        if d >= 1 << 31:
            raise TraceFormatError(cols.path, f"{cols.table.report or cols.table.kind}: device {v[:80]!r}: its "
                                              "index is beyond 2**31")
        ids.append(d)
    return np.array(ids, np.int64)[codes] if len(codes) else np.zeros(0, np.int64), props


def gpu_parts(cols: Columns) -> tuple[list[Part], dict[int, dict[str, Any]]]:
    """Kernels, memcpys and memsets of a ``cuda_gpu_trace`` table."""
    n = cols.n
    start = cols.time("start")
    end = start + cols.time("duration")  # one that ends before it starts: Part.forward_times
    ncodes, nvals = cols.texts("name")
    kind_of = np.array([2 if v.startswith(_MEMSET) else 1 if v.startswith(_MEMCPY) else 0 for v in nvals], np.int8)
    kind = kind_of[ncodes] if n else np.zeros(0, np.int8)
    dev, props = devices(cols)
    corr, stream = cols.ints("corrid"), cols.ints("strm")
    common: dict[str, Any] = {keys.STREAM: stream, keys.DEVICE: dev}
    set_stat(common, keys.CORRELATION_ID, corr)
    set_stat(common, "context", cols.ints("ctx"))
    set_stat(common, "green context", cols.ints("greenctx"))
    whole = Part("cuda_gpu_trace", True, start, end, np.full(n, -1, np.int64), stream, dev, ncodes, nvals,
                 zeros(n), [""], common, corr)
    parts = []
    for k, category in enumerate((keys.CAT_KERNEL, keys.CAT_MEMCPY, keys.CAT_MEMSET)):
        rows = kind == k
        if not rows.any():
            continue
        p = whole.take(rows) if not rows.all() else Part(whole.table, True, whole.start, whole.end, whole.gpid,
                                                          whole.tid, whole.dev, whole.names, whole.name_values,
                                                          whole.category, [], dict(whole.stats), whole.corr)
        p.categories = [category]
        p.category = zeros(len(p))
        sub = _Sub(cols, rows)
        if k == 0:
            _kernel_stats(p, sub)
        else:
            _transfer(p, sub, k == 1)
        parts.append(p)
    return parts, props


class _Sub:
    """Some rows of a table's columns."""

    def __init__(self, cols: Columns, rows: np.ndarray):
        self.cols, self.rows = cols, rows

    def ints(self, key: str) -> np.ndarray:
        return self.cols.ints(key)[self.rows]

    def size(self, key: str) -> np.ndarray:
        return self.cols.size(key)[self.rows]

    def texts(self, key: str) -> tuple[np.ndarray, list[str]]:
        codes, vals = self.cols.texts(key)
        return codes[self.rows], vals


def _kernel_stats(p: Part, sub: _Sub) -> None:
    for key, prefix in ((keys.GRID, "grd"), (keys.BLOCK, "blk")):
        xyz = [sub.ints(prefix + a) for a in "xyz"]
        if all(sub.cols.has(prefix + a) for a in "xyz") and all((v >= 0).all() for v in xyz):
            p.stats[key] = triples(*xyz)
    set_stat(p.stats, "registers per thread", sub.ints("regtrd"))
    if sub.cols.has("stcsmem") or sub.cols.has("dymsmem"):
        p.stats["shared memory"] = np.maximum(sub.size("stcsmem"), 0) + np.maximum(sub.size("dymsmem"), 0)


def _transfer(p: Part, sub: _Sub, copy: bool) -> None:
    set_stat(p.stats, keys.BYTES, sub.size("bytes"))
    scodes, svals = sub.texts("srcmemkd")
    dcodes, dvals = sub.texts("dstmemkd")
    inv, uniq = group_rows(p.names, scodes, dcodes)
    names, kinds = [], []
    for nm, s, d in uniq.tolist():
        src, dst = svals[s], dvals[d]
        if copy:
            kind = _copy_kind(p.name_values[nm])
            kinds.append(kind)
            names.append(f"Memcpy {kind}" + (f" ({src} -> {dst})" if src and dst else ""))
        else:
            mem = src or dst  # nsys writes a memset's memory kind as SrcMemKd
            names.append(f"Memset ({mem})" if mem else "Memset")
    p.names, p.name_values = inv.astype(np.int64), names
    if copy:
        p.stats[keys.COPY_KIND] = np.array(kinds, dtype=object)[inv] if len(inv) else np.zeros(0, object)


def api_part(cols: Columns) -> tuple[Part, int, dict[tuple[int, int], str]]:
    """CUDA runtime and driver calls of a ``cuda_api_trace`` table; also the number of rows
    left out as a repeat of a call (same process, thread, name and correlation id: nsys
    2022 exports some calls twice, the second with a backtrace and a wider span)."""
    start = cols.time("start")
    end = start + cols.time("duration")
    pid, tid, corr = cols.ints("pid", 0), cols.ints("tid", 0), cols.ints("corrid")
    raw, raw_vals = cols.texts("name")
    vals = list(dict.fromkeys(_VERSION.sub("", v) for v in raw_vals))  # without nsys's API version suffix
    index = {v: i for i, v in enumerate(vals)}
    codes = np.array([index[_VERSION.sub("", v)] for v in raw_vals], np.int64)[raw] if cols.n else raw
    keep = _first_of_repeats(pid, tid, codes, corr, end - start)
    dropped = int((~keep).sum())
    cat = np.array([v.startswith("cu") and not v.startswith("cuda") for v in vals], np.int64)
    stats: dict[str, Any] = {}
    set_stat(stats, keys.CORRELATION_ID, corr)
    part = Part("cuda_api_trace", False, start, end, pid, tid, zeros(cols.n), codes, vals,
                cat[codes] if cols.n else np.zeros(0, np.int64), [CAT_RUNTIME, CAT_DRIVER], stats, corr)
    return part.take(keep) if dropped else part, dropped, _thread_names(cols, pid, tid)


def _first_of_repeats(pid: np.ndarray, tid: np.ndarray, name: np.ndarray, corr: np.ndarray,
                      dur: np.ndarray) -> np.ndarray:
    """Rows kept: of the calls with the same (process, thread, name, correlation id > 0),
    the shortest."""
    n = len(pid)
    keep = np.ones(n, bool)
    has = np.flatnonzero(corr > 0)
    if len(has) < 2:
        return keep
    inv, uniq = group_rows(pid[has], tid[has], name[has], corr[has])
    if len(uniq) == len(has):
        return keep
    order = np.lexsort((dur[has], inv))
    first = np.ones(len(order), bool)
    first[1:] = inv[order][1:] != inv[order][:-1]
    keep[has[order[~first]]] = False
    return keep


def _thread_names(cols: Columns, pid: np.ndarray, tid: np.ndarray) -> dict[tuple[int, int], str]:
    if not cols.has("threadname") or not cols.n:
        return {}
    codes, vals = cols.texts("threadname")
    inv, uniq = group_rows(pid, tid, codes)
    return {(int(p), int(t)): vals[int(c)] for p, t, c in uniq.tolist() if vals[int(c)]}


def nvtx_part(cols: Columns, projected: bool) -> tuple[Part, int]:
    """NVTX ranges of an ``nvtx_pushpop_trace`` table, or the host ranges of an
    ``nvtx_gpu_proj_trace`` one (its ``Orig Start`` / ``Orig Duration``); also the number
    of ranges left out because they have no end (an empty ``End``/``Duration``)."""
    length = "origduration" if projected else "end" if cols.has("end") else "duration"
    ended = cols.ended(length)
    if not ended.all():
        cols = cols.take(ended)
    if projected:
        start = cols.time("origstart")
        end = start + cols.time("origduration")
    else:
        start = cols.time("start")
        end = cols.time("end") if cols.has("end") else start + cols.time("duration")
    codes, vals = cols.texts("name")
    stats: dict[str, Any] = {}
    # nsys 2025 on writes "<domain>:<text>" (":text" in the default domain)
    if vals and any(v.startswith(":") for v in vals) and all(":" in v for v in vals if v):
        split = [v.split(":", 1) for v in vals]
        doms = np.array([d for d, _ in split], dtype=object)
        vals = [t for _, t in split]
        rows = np.flatnonzero(doms[codes] != "") if cols.n else np.zeros(0, np.int64)
        if len(rows):
            stats["domain"] = (rows, doms[codes[rows]])
    vals = [v if v else "[unnamed NVTX range]" for v in vals]
    n = cols.n
    return Part(cols.table.kind, False, start, end, cols.ints("pid", 0), cols.ints("tid", 0),
                zeros(n), codes, vals, zeros(n), [CAT_NVTX], stats), int((~ended).sum())


def _ambiguous(launches: list[tuple[np.ndarray, np.ndarray]], device: list[np.ndarray]) -> int:
    """Device rows whose correlation id is that of calls in more than one process."""
    if not launches or not device:
        return 0
    pairs = np.unique(np.stack([np.concatenate([c for _, c in launches]),
                                np.concatenate([g for g, _ in launches])]), axis=1)
    ids, count = np.unique(pairs[0][pairs[0] > 0], return_counts=True)
    many = ids[count > 1]
    return int(sum(np.isin(c, many).sum() for c in device)) if len(many) else 0


def build(parts: list[Part], gpus: dict[int, dict[str, Any]], tnames: dict[tuple[int, int], str], name: str,
          md: dict[str, Any]) -> Trace:
    """The Trace of the parts (host calls first: device rows take their process by
    correlation id, as the export's device tables without ``globalPid`` do)."""
    b = TraceBuilder()
    source_of: dict[int, int] = {}
    launches = [(p.gpid, p.corr) for p in parts if not p.device and p.corr is not None]
    shared = _ambiguous(launches, [p.corr for p in parts if p.device and p.corr is not None])
    if shared:
        md.setdefault("warnings", []).append(
            f"{shared} device rows have a correlation id that calls of several processes have (cuda_gpu_trace "
            "names no process): each is given to the first of them")
    linked: list[tuple[bool, np.ndarray, np.ndarray, np.ndarray]] = []
    known = {int(x) for q in parts if not q.device for x in np.unique(q.gpid).tolist()}
    for p in parts:  # in the export reader's order: calls, kernels, copies, fills, NVTX
        fill_process(p, launches, known)
        rows = add_part(b, p, source_of, gpus, lambda g, pid: b.source(pid=pid, label=f"pid {pid}"),
                        pid_of=lambda g: max(g, 0), host_properties=lambda g: None,
                        thread_name=lambda g, t: tnames.get((g, t), ""))
        if p.corr is not None:
            linked.append((p.device, p.gpid, p.corr, rows))
    for s in b.sources:
        s.label = f"{name} pid {s.pid}" if len(b.sources) > 1 else ""
    add_flows(b, linked)
    if gpus:
        md["deviceProperties"] = [gpus[k] for k in sorted(gpus)]
    b.metadata.update(md)
    return b.build()
