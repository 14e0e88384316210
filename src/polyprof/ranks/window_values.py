"""What the windows of a rank keep beside their tables so that the rank's tables come out
exact (``ranks/stepwise.py``, ``ranks/table_merge.py``).

- **Quantiles** (``median_ns`` and ``p99_ns`` of ``kernel_breakdown``, ``event_stats``
  and ``section_stats``) are not sums: each window writes the (group, duration) pairs
  its tables grouped to a spill folder on disk, and the rank's quantiles are computed
  from them at the end, a batch of groups at a time, by the very function the tables
  use (``analyze.grouping.group_stats``). A group is named as the table names its row:
  an XLA op of a known module by ``module/op`` (``analyze.common.qualified_names``),
  spilled as a code the windows share (:func:`_name_codes`).
- **Copy bandwidths** (``median_gbps`` of ``copies``): each window writes its copies'
  (device and kind, bandwidth) pairs; the rank's medians are computed from them.
- **Queue lengths and launches** (``queue_length_summary``, ``launch_summary``): each
  window writes per stream, and per (plane, launch call name), a reduction whose merged
  state does not grow with the rank's launches, and the values behind their quantiles
  to raw files read back a chunk at a time (``ranks/window_reduce.py``): the tables read
  whole, to the last digit.
- **Efficiency**: each window's ``kernel_efficiency`` rows get the peak FLOP/s of
  their precision (:func:`kernel_peaks`), so the merged rates' roofline shares are made
  again as the rank's; each window's model FLOPs by precision and active devices
  (:func:`mfu_part`) give the rank's ``mfu`` precision and devices, and its kernel time
  and that in uncounted graph replays the rank's ``uncounted_replay_pct``; a window without
  model FLOPs adds its steps with none (:func:`fill_mfu`).
- **CUDA graphs captured in an earlier window**: each window hands the next the stream
  captures made so far, by value (:func:`captures`: ``analyze.cuda_graphs.Captures``,
  bounded by the captured launches), so its replays of them map to their captured ops as
  in the rank read whole (``cuda_graphs``, ``mfu`` and its uncounted share); the
  kernels and op calls they ran, whose ops are no rows of the window, are added to its
  ``kernel_efficiency`` and ``op_efficiency`` from the captured ops' figures
  (:func:`with_carried_kernels`, :func:`with_carried_ops`).
- **Idle stretches across a window's edge**: a window's analysed span ends at the
  next window's start (a quiet point, ``store/window.py``), so an idle stretch that
  spans it is two gaps in the windows (the tail of one, counted as "other", and the
  lead of the next) and one in the rank (classified by the activity that ends it).
  :func:`edges` records each window's first and last idle time per device stream and
  device; :func:`join_edges` corrects the merged ``idle_time_breakdown`` and the idle
  segments of ``kernel_state_breakdown`` for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator


import numpy as np
import pyarrow.compute as pc

from ..analyze.breakdown import ALL_STREAMS, _groups
from ..analyze.cuda_graphs import Captures
from ..analyze.efficiency import costed_rows, model_precisions, resolve_peak, step_times, uncounted_replay_ns
from ..analyze.kernel_roofline import SIMT_MARKS, TENSOR_CORE_MARKS, counted_kernel_costs, launch_precisions
from ..analyze.flops import SOURCE_NAMES
from ..analyze.graph_costs import carried_replays, carry_out
from ..analyze.common import CLASS_NAMES
from ..analyze.common import analysed_span, device_view, qualified_names
from ..analyze.copies import group_keys, key_labels, per_copy
from ..analyze.frames import column, frame
from ..analyze.grouping import group_reduce, group_stats
from ..analyze.inputs import graph_launches
from ..analyze.queues import _series
from ..analyze.sections import section_rows
from ..analyze.table import Table
from ..analyze.window_counting import host_mask
from ..derive import cache
from ..derive.graph_recording import CAPTURE_BEGIN
from ..store.rankfiles import _read
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import first_and_inverse, unique, unique_rows
from . import window_reduce
from .table_merge import MfuPart

#: a window's idle edges of one stream or device: whether it has activity there, its idle
#: time before the first activity (all of the span without any), whether that
#: activity's launch is known, and its idle time after the last (:func:`edges`)
Edge = tuple[bool, int, bool, int]
#: the tables whose quantiles come from the spilled pairs, and the columns that name a row
QUANTILE_TABLES = {"kernel_breakdown": ("name", "kind"), "event_stats": ("category", "name"),
                   "section_stats": ("name",)}
#: values held at once while the quantiles of a batch of groups are computed
BATCH_VALUES = 1 << 21
#: the spilled name code of the rank's ``i``-th ``module/op`` name (``analyze.common.qualified_names``),
#: past every name id; an ``event_stats`` key is its category id times :data:`NAME_CODES` plus its name code
QUALIFIED_BASE = 1 << 31
NAME_CODES = 1 << 32
#: the windows' ``module/op`` names, in the order of their codes (each window adds its new ones)
QUALIFIED_FILE = "qualified.json"


def spill(view: Trace, folder: Path, i: int) -> None:
    """Write window ``i``'s quantile pairs and queue series into ``folder``."""
    ev = view.events
    t0, t1 = analysed_span(view)
    rows = np.flatnonzero(ev["dur_ns"] > 0)
    rows = rows[(ev["start_ns"][rows] >= t0) & (ev["start_ns"][rows] < t1)]
    _save(folder, "event_stats", i, ev["category"][rows].astype(np.int64) * NAME_CODES + _name_codes(view, folder, rows),
          ev["dur_ns"][rows])
    v = device_view(view)
    c = v.counted
    _save(folder, "kernel_breakdown", i, (_name_codes(view, folder, v.rows[c]) << 8) | v.cls[c].astype(np.int64),
          v.dur[c])
    rows = section_rows(view)
    rows = rows[host_mask(view, ev["start_ns"][rows])]
    _save(folder, "section_stats", i, ev["name"][rows].astype(np.int64), ev["dur_ns"][rows])
    cp = per_copy(view)
    have = ~np.isnan(cp.gbps)
    _save(folder, "copies", i, group_keys(cp)[have], cp.gbps[have])
    window_reduce.spill_queues(*_series(view), folder, i)


def _name_codes(view: Trace, folder: Path, rows: np.ndarray) -> np.ndarray:
    """The name code of each event of ``rows``, as the rank's spills share it: its name id,
    or for an op of a known module (named ``module/op`` by the tables) :data:`QUALIFIED_BASE`
    plus the name's index in the folder's :data:`QUALIFIED_FILE`, which it is added to
    (the windows are spilled one after the other)."""
    codes, labels, _ = qualified_names(view, rows)
    n = len(view.strings)
    if len(labels) == n:
        return codes
    path = folder / QUALIFIED_FILE
    index = {t: k for k, t in enumerate(json.loads(path.read_text()) if path.exists() else [])}
    known = len(index)
    to = np.array([index.setdefault(t, len(index)) for t in labels[n:].tolist()], np.int64) + QUALIFIED_BASE
    if len(index) > known:
        path.write_text(json.dumps(list(index)))
    q = codes >= n
    codes[q] = to[codes[q] - n]
    return codes


def kernel_peaks(view: Trace, table: Table) -> np.ndarray:
    """Per row of the window's ``kernel_efficiency`` (``table``): the peak FLOP/s its
    roofline share was measured against, that of the precision of the op that launched
    the name's first kernel (0: none known)."""
    out = np.zeros(len(table))
    pk = resolve_peak(view, None)
    if pk is None or not len(table):
        return out
    rows, _, _ = counted_kernel_costs(view)  # (as the table: ascending rows, a name's first is its first)
    codes, labels, _ = qualified_names(view, rows)  # (its names: module/kernel for an XLA kernel)
    first, _ = first_and_inverse(codes)
    prec = launch_precisions(view, rows[first])
    peak = {str(n): pk.flops(str(p)) for n, p in zip(labels[codes[first]].tolist(), prec.tolist())}
    return np.array([peak.get(n, 0.0) for n in column(table, "name").tolist()], np.float64)


def device_planes(trace: Trace) -> frozenset[int]:
    """The ids of ``trace``'s device planes with events (found once per window: whether the
    rank ran on a device, and the devices its ``mfu`` counts)."""
    busy = set(unique(trace.event_planes()).tolist()) if trace.n_events else set()
    return frozenset(p.id for p in trace.planes if p.kind == "device" and p.id in busy)


def mfu_part(view: Trace, devices: frozenset[int]) -> MfuPart:
    """The window's model FLOPs by precision and its device planes with activity
    (``devices``: :func:`device_planes`; what ``analyze.efficiency.mfu`` chooses its
    precision and counts its devices by), and its kernel time in graph replays whose FLOPs
    are not counted, of all its kernel time."""
    return MfuPart(model_precisions(view, fallback=False), devices, *uncounted_replay_ns(view))


def captures(view: Trace, before: Captures) -> Captures:
    """What the windows after ``view`` need of the graphs captured so far (``before``: the
    earlier windows'), with its own captures' ops' costs (``graph_costs.carry_out``, given
    the costed host ops ``efficiency.model_rows`` starts from), and the graphs its replays
    claimed (one first replayed before any capture claims none, as read whole)."""
    if not (len(view.rows_named(*CAPTURE_BEGIN)) or len(before.at) or graph_launches(view)):
        return before
    rows, on_device, c = costed_rows(view)
    host = ~np.isnan(c.flops) & ~on_device
    return carry_out(view, rows[host], c.flops[host], c.precision[host])


def with_carried_kernels(view: Trace, table: Table) -> Table:
    """A window's ``kernel_efficiency`` (with its ``_peak``) and rows of the kernels its
    replays of graphs captured in an earlier window ran, as ``kernel_roofline.kernel_costs``
    counts a replayed kernel: its captured op's FLOPs and bytes shared among that op's
    kernels of the replay by duration, the kernels the window counts (the merge adds
    the rows of one name)."""
    got = carried_replays(view)
    if got is None:
        return table
    caps, rows, replay, at = got
    sel = (view.kinds[rows] == Kind.KERNEL) & (caps.op[at] >= 0)
    rows, replay, at = rows[sel], replay[sel], at[sel]
    dur = view.events["dur_ns"][rows].astype(np.float64)
    _, _, inv = unique_rows(caps.op[at], replay)  # an op's kernels of one replay
    total = np.bincount(inv, weights=dur, minlength=inv.max() + 1 if len(inv) else 0)
    count = np.bincount(inv, minlength=len(total)).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total[inv] > 0, dur / total[inv], 1.0 / np.maximum(count[inv], 1))
    flops, nbytes = caps.flops[at] * share, caps.bytes[at] * share
    corr = cache.correlation(view)
    keep = (~np.isnan(flops) | ~np.isnan(nbytes)) & device_view(view).counted[np.searchsorted(corr.device_rows, rows)]
    if not keep.any():
        return table
    rows, at, flops, nbytes, dur = rows[keep], at[keep], flops[keep], nbytes[keep], dur[keep]
    codes, labels, modules = qualified_names(view, rows)
    g = group_stats(codes, dur)  # (as kernel_efficiency groups them)
    o, s = g["order"], g["starts"]
    first = at[o[s]]
    own = view.names(rows[o[s]]).tolist()  # (a kernel's own name, for its tensor-core marks)
    f, b = (np.where(group_reduce(o, s, (~np.isnan(x)).astype(np.int64), np.add) > 0,
                     group_reduce(o, s, np.nan_to_num(x), np.add), np.nan) for x in (flops, nbytes))
    names = labels[g["key"]]
    pk = resolve_peak(view, None)
    n = len(names)
    extra = frame({
        "name": names, "module": modules[g["key"]], "count": g["count"], "flops": f, "bytes": b, "device_ns": g["total"].astype(np.float64),
        "flops_per_s": np.full(n, np.nan), "bytes_per_s": np.full(n, np.nan), "intensity": np.full(n, np.nan),
        "roofline_pct": np.full(n, np.nan), "bound_by": np.full(n, "", object), "op": caps.op_name[first],
        "tensor_core": np.array([any(m in x.lower() for m in TENSOR_CORE_MARKS) and
                                 not any(m in x.lower() for m in SIMT_MARKS) for x in own], bool),
        "_peak": np.array([pk.flops(str(p)) if pk else 0.0 for p in caps.precision[first].tolist()], np.float64)})
    return _append(table, extra)


def with_carried_ops(view: Trace, table: Table) -> Table:
    """A window's ``op_efficiency`` and, as ``efficiency.op_efficiency`` counts the ops
    captured into a graph, a device call of each costed op of a capture carried from an
    earlier window per replay of it in the window: its figures, the device time its
    replayed activities ran, no host time."""
    got = carried_replays(view)
    if got is None:
        return table
    caps, rows, replay, at = got
    sel = caps.op[at] >= 0
    pairs, _, inv = unique_rows(replay[sel], caps.op[at][sel])
    ns = np.bincount(inv, weights=view.events["dur_ns"][rows[sel]].astype(np.float64), minlength=len(pairs))
    op = pairs[:, 1] if len(pairs) else np.zeros(0, np.int64)
    costed = ~(np.isnan(caps.flops[op]) & np.isnan(caps.bytes[op]))
    op, ns = op[costed], ns[costed]
    if not len(op):
        return table
    ran = ns > 0  # (a call whose kernels took no time counts on the host, as op_efficiency's)
    g = group_stats(caps.op_key[op, 2] * 2 + ran, ns)  # (as op_efficiency groups calls: name, where)
    o, s = g["order"], g["starts"]
    first = op[o[s]]
    f, b = (np.where(group_reduce(o, s, (~np.isnan(x)).astype(np.int64), np.add) > 0,
                     group_reduce(o, s, np.nan_to_num(x), np.add), np.nan) for x in (caps.flops[op], caps.bytes[op]))
    on_dev = (g["key"] & 1).astype(bool)
    device_ns = g["total"].astype(np.float64)
    pk = resolve_peak(view, None)
    peak = np.array([pk.flops(str(p)) if pk else 0.0 for p in caps.precision[first].tolist()], np.float64)
    n = len(first)
    nan = np.full(n, np.nan)
    extra = frame({
        "name": caps.op_name[first], "module": np.full(n, "", object), "category": np.full(n, "", object), "count": g["count"], "flops": f,
        "bytes": b, "flops_source": SOURCE_NAMES[caps.source[first]], "precision": caps.precision[first],
        "device_ns": device_ns, "host_ns": np.zeros(n, np.int64), "time_ns": np.where(on_dev, device_ns, 0.0),
        "where": np.where(on_dev, "device", "host").astype(object), "flops_per_s": nan, "bytes_per_s": nan, "intensity": nan,
        "peak_flops_per_s": np.where(peak > 0, peak, np.nan), "roofline_pct": nan,
        "bound_by": np.full(n, "", object), "kernels": np.full(n, "", object)})
    return _append(table, extra)


def _append(table: Table, extra: Table) -> Table:
    """``table``'s rows then ``extra``'s (their columns of ``table``'s types where it has rows)."""
    if not len(table):
        return extra.select([c for c in table.columns if c in extra.columns]) if len(table.columns) else extra
    return Table.concat([table, extra.with_columns(**{c: np.asarray(column(extra, c)).astype(column(table, c).dtype)
                                                      for c in table.columns if c in extra.columns})])


def fill_mfu(table: Table, view: Trace) -> Table:
    """A window's ``mfu``; where it has no model FLOPs (an empty table), a row of none for
    each of its steps (the rank's table has a row for every step when it has FLOPs)."""
    steps = cache.steps(view)
    if len(table) or not len(steps):
        return table
    n = len(steps)
    z = np.zeros(n)
    return frame({"step": steps.number.astype(np.int64), "flops": z, "time_ns": step_times(view, steps),
                  "flops_per_s": z, "precision": np.full(n, "", object), "devices": np.ones(n, np.int64),
                  "peak_flops_per_s": np.full(n, np.nan), "mfu_pct": np.full(n, np.nan),
                  "device": np.full(n, "", object), "uncounted_replay_pct": np.full(n, np.nan)})


def spill_launches(launches: Table, folder: Path, i: int, names: dict[str, int]) -> None:
    """Write window ``i``'s launch table (one row per launched activity) reduced as
    ``launch_summary`` groups it (``window_reduce.spill_launches``; ``names``: the codes of
    the planes and launch call names, shared by the windows)."""
    window_reduce.spill_launches(launches, folder, i, names)


def _save(folder: Path, name: str, i: int, keys: np.ndarray, values: np.ndarray) -> None:
    np.save(folder / f"{name}-k-{i}.npy", np.asarray(keys, np.int64))
    np.save(folder / f"{name}-v-{i}.npy", np.asarray(values))


def _label(name: str, keys: np.ndarray, strings: list[str], qualified: list[str]) -> list[tuple]:
    """The row names of ``name``'s groups ``keys`` (as the table writes them; ``qualified``:
    the ``module/op`` names of the codes from :data:`QUALIFIED_BASE`)."""
    s, qs = np.asarray(strings, dtype=object), np.asarray(qualified, dtype=object)

    def text(codes: np.ndarray) -> list[str]:
        q = codes >= QUALIFIED_BASE
        out = np.empty(len(codes), object)
        out[~q] = s[codes[~q]]
        out[q] = qs[codes[q] - QUALIFIED_BASE]
        return out.tolist()

    if name == "kernel_breakdown":
        return list(zip(text(keys >> 8), CLASS_NAMES[keys & 0xFF].tolist()))
    if name == "event_stats":
        cat, nm = np.divmod(keys, NAME_CODES)
        return list(zip(text(cat), text(nm)))
    return [(x,) for x in text(keys)]


def _batches(folder: Path, name: str, windows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(keys, values) of every window for batches of groups of at most BATCH_VALUES values
    (a group larger than that is a batch of its own)."""
    files = [(folder / f"{name}-k-{i}.npy", folder / f"{name}-v-{i}.npy") for i in range(windows)]
    counts: dict[int, int] = {}
    for kf, _ in files:
        u, n = np.unique(np.load(kf, mmap_mode="r"), return_counts=True)
        for k, c in zip(u.tolist(), n.tolist()):
            counts[k] = counts.get(k, 0) + c
    batch: list[int] = []
    size = 0
    for k in sorted(counts):
        if batch and size + counts[k] > BATCH_VALUES:
            yield _gather(files, np.array(batch, np.int64))
            batch, size = [], 0
        batch.append(k)
        size += counts[k]
    if batch:
        yield _gather(files, np.array(batch, np.int64))


def _gather(files: list[tuple[Path, Path]], keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ks, vs = [], []
    for kf, vf in files:
        k = np.load(kf, mmap_mode="r")
        take = np.flatnonzero(np.isin(k, keys))
        ks.append(np.asarray(k[take]))
        vs.append(np.asarray(np.load(vf, mmap_mode="r")[take]))
    return np.concatenate(ks), np.concatenate(vs)


def exact_quantiles(tables: dict[str, Table], folder: Path, windows: int, strings: list[str]) -> None:
    """Replace the merged quantile columns of :data:`QUANTILE_TABLES` by the rank's own."""
    path = folder / QUALIFIED_FILE
    qualified = json.loads(path.read_text()) if path.exists() else []
    for name, key_cols in QUANTILE_TABLES.items():
        t = tables.get(name)
        if t is None or not len(t):
            continue
        rows = {k: i for i, k in enumerate(zip(*(column(t, c).tolist() for c in key_cols)))}
        cols = ["median_ns", "p99_ns"] if "p99_ns" in t.columns else ["median_ns"]
        out = {c: np.array(column(t, c), np.float64) for c in cols}
        for keys, values in _batches(folder, name, windows):
            g = group_stats(keys, values)
            at = np.array([rows.get(k, -1) for k in _label(name, g["key"], strings, qualified)], np.int64)
            ok = at >= 0
            for c in cols:
                out[c][at[ok]] = g[c[:-3]][ok]
        tables[name] = t.with_columns(**out)


def exact_copy_medians(tables: dict[str, Table], folder: Path, windows: int, planes: list[str]) -> None:
    """Replace the merged ``median_gbps`` of ``copies`` by the rank's own (the windows'
    bandwidths per copy, spilled by :func:`spill`)."""
    t = tables.get("copies")
    if t is None or not len(t):
        return
    at = {k: i for i, k in enumerate(zip(column(t, "device").tolist(), column(t, "kind").tolist()))}
    out = np.array(column(t, "median_gbps"), np.float64)
    for keys, vals in _batches(folder, "copies", windows):
        g = group_stats(keys, vals)
        for k, m in zip(zip(*(x.tolist() for x in key_labels(g["key"], planes))), g["median"].tolist()):
            if k in at:
                out[at[k]] = m
    tables["copies"] = t.with_columns(median_gbps=out)


def queue_summary(table: Table, folder: Path, windows: int, trace_tracks: list[str], planes: list[str],
                  track_plane: np.ndarray) -> Table:
    """``queue_length_summary`` of the windows' series end to end (as the table makes it),
    from their reductions (``window_reduce.queue_summary``)."""
    return window_reduce.queue_summary(table, folder, windows, trace_tracks, planes, track_plane)


def edges(view: Trace) -> dict[tuple, Edge]:
    """Per (plane, stream, track_id) row of ``idle_time_breakdown``: whether the window has
    activity there, its idle time before the first activity (all of the span without
    any), whether that activity's launch is known, and its idle time after the last."""
    v = device_view(view)
    ev = view.events
    t0, t1 = v.span
    out = {}
    for plane, track, sel, _ in _groups(view):
        idx = np.flatnonzero(sel & (v.end > t0) & (v.start < t1))
        key = (view.planes[plane].name, view.tracks[track].name if track >= 0 else ALL_STREAMS, track)
        if not len(idx):
            out[key] = (False, t1 - t0, False, 0)
            continue
        s = np.minimum(np.maximum(v.start[idx], t0), t1)
        e = np.minimum(np.maximum(v.end[idx], t0), t1)
        first = idx[np.argmin(s)] if len(s) else -1
        known = bool(v.launch[first] >= 0) and int(ev["start_ns"][v.launch[first]]) >= t0
        out[key] = (True, int(s.min()) - t0, known, t1 - int(e.max()))
    return out


def join_edges(tables: dict[str, Table], parts: list[dict[tuple, Edge]],
               spans: list[tuple[int, int]]) -> None:
    """Correct the merged ``idle_time_breakdown`` (idle, host-wait and other time, gaps)
    and the idle of ``kernel_state_breakdown`` for the idle stretches that span a
    window's edge, and for the windows (``spans``) in which a stream or device had no
    activity at all, and so no row (see the module doc)."""
    it = tables.get("idle_time_breakdown")
    if it is None or not len(it):
        return
    keys = list(zip(column(it, "plane").tolist(), column(it, "stream").tolist(), column(it, "track_id").tolist()))
    cols = {c: np.array(column(it, c), np.int64) for c in ("idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns",
                                                           "gaps")}
    plane_fix: dict[str, tuple[int, int]] = {}
    for r, key in enumerate(keys):
        added, pieces, moved, fewer = _join(parts, spans, key)
        cols["idle_ns"][r] += added
        cols["other_ns"][r] += added - moved
        cols["host_wait_ns"][r] += moved
        cols["gaps"][r] += pieces - fewer
        if key[2] == -1:
            plane_fix[key[0]] = (added, pieces - fewer)
    idle = cols["idle_ns"].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = {f"{k}_pct": np.where(idle > 0, 100.0 * cols[f"{k}_ns"] / np.where(idle > 0, idle, 1), np.nan)
               for k in ("host_wait", "kernel_wait", "other")}
    tables["idle_time_breakdown"] = it.with_columns(**cols, **pct)
    ks = tables.get("kernel_state_breakdown")
    if ks is not None and len(ks):
        time = np.array(column(ks, "time_ns"), np.int64)
        seg = np.array(column(ks, "segments"), np.int64)
        planes = column(ks, "plane")
        for r in np.flatnonzero(column(ks, "state") == "idle").tolist():
            added, segments = plane_fix.get(planes[r], (0, 0))
            time[r] += added
            seg[r] += segments
        span = float(spans[-1][1] - spans[0][0])
        busy = {p: float(time[(planes == p) & (column(ks, "state") != "idle")].sum()) for p in set(planes.tolist())}
        with np.errstate(divide="ignore", invalid="ignore"):
            span_pct = 100.0 * time / span if span else np.full(len(time), np.nan)
        busy_pct = np.array([np.nan if st == "idle" else (100.0 * t / busy[p] if busy[p] else np.nan)
                             for t, p, st in zip(time.tolist(), planes.tolist(), column(ks, "state").tolist())])
        tables["kernel_state_breakdown"] = ks.with_columns(time_ns=time, segments=seg, span_pct=span_pct,
                                                           busy_pct=busy_pct)


def _join(parts: list[dict[tuple, Edge]], spans: list[tuple[int, int]],
          key: tuple) -> tuple[int, int, int, int]:
    """For one row: (idle time of the windows without the row, their idle pieces, idle
    time that moves from "other" to host-wait, gaps fewer once pieces across edges join)."""
    added = extra = moved = fewer = 0
    pending_ns = pieces = 0
    for p, (t0, t1) in zip(parts, spans):
        if key in p:
            has, lead, known, tail = p[key]
        else:  # no activity, no row: the window's span is idle, one piece, not counted yet
            has, lead, known, tail = False, t1 - t0, False, 0
            added += lead
            extra += 1 if lead > 0 else 0
        if not has:
            if lead > 0:
                pending_ns += lead
                pieces += 1
            continue
        if pieces:
            if known:
                moved += pending_ns
            fewer += pieces if lead > 0 else pieces - 1
        pending_ns, pieces = (tail, 1) if tail > 0 else (0, 0)
    if pieces > 1:
        fewer += pieces - 1
    return added, extra, moved, fewer


def extent_ns(directory: Path, header: dict) -> tuple[int, int]:
    """The rank's ``Trace.extent_ns`` (the overview's ``trace_span_ns``): its events' span
    (``span_ns`` in ``rank.json``) widened to its counter samples. Before, a windowed
    summary gave the events' span alone (a gloo rank whose RSS samples run past its last
    event: 8.822 s against 8.893 s read whole)."""
    s0, s1 = (int(x) for x in header.get("span_ns", [0, 0]))
    ts = _read(directory / "counters.parquet", ["ts_ns"]).column("ts_ns")
    if not len(ts):
        return s0, s1
    lo, hi = int(pc.min(ts).as_py()), int(pc.max(ts).as_py())
    return (lo, hi) if not int(header.get("events", 0)) else (min(s0, lo), max(s1, hi))
