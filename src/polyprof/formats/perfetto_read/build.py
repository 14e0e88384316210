"""The columns read -> the Trace: slices closed, clocks converted, tracks laid out.

Begin/end pairs become slices (``slices.match``); a slice never ended is kept, ending
at the trace's last timestamp, with the ``incomplete`` stat (Perfetto shows it as not
terminated). Times go onto one clock (``clocks.py``). Track codes become planes and
tracks (``tracks.py``); counters are scaled by their unit multiplier (incremental ones
were summed per sequence while reading). What was skipped is said in the trace's
``warnings``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ...lowlevel.heap import TRIM_BYTES, trim
from ...trace import keys
from ...trace import metadata_keys as mkeys
from ...trace.core import Trace
from ..export_notes import HOST_NAME, PERFETTO_NOTES, recorded_notes
from ..device_list import FLOW_CATEGORY_SHIFT, PERFETTO_DERIVED_COUNTERS, PERFETTO_FLOW_CATEGORIES, PERFETTO_PLANES
from ..native import bytes_back
from ..safety import TIME_LIMIT_NS
from .clocks import Clocks
from .collector import Collector
from .kinds import END
from .slices import link, match
from ...trace.sorting import unique

log = logging.getLogger("polyprof")


def _concat(parts: list[dict[str, np.ndarray]], spec: dict[str, type]) -> dict[str, np.ndarray]:
    """The runs' columns joined, key by key; each key's parts are dropped once joined (the
    parts and the joined columns are held together one column at a time), and ``parts``
    is empty after."""
    out = {k: np.concatenate([p.pop(k) for p in parts]) if parts else np.zeros(0, t) for k, t in spec.items()}
    parts.clear()
    return out


def build(col: Collector, path: Path) -> Trace:
    b = col.b
    warnings: list[str] = []
    ev = _concat(col.parts, {"kind": np.int8, "track": np.int64, "ts": np.int64, "clock": np.int64,
                             "dur": np.int64, "name": np.int32, "cat": np.int32})
    ct = _concat(col.counter_parts, {"track": np.int64, "ts": np.int64, "clock": np.int64, "value": np.float64})
    ct = _described(col, ct)
    if len(ev["kind"]) * 8 >= TRIM_BYTES:  # the runs' freed parts back before the pairing's columns
        trim()
    clocks: Clocks = col.clocks
    ts, unlinked = clocks.convert(ev.pop("clock"), ev.pop("ts"))
    cts, unlinked_c = clocks.convert(ct["clock"], ct["ts"])
    for c in sorted(set(unlinked) | set(unlinked_c)):
        warnings.append(f"clock {c} is in no clock snapshot with the trace clock: its times are kept as they are")
    kind, track = ev["kind"], ev["track"]
    dur = ev.pop("dur")  # the joined column: changed in place
    beyond = _beyond(kind, ts, dur, warnings)  # rows left out (kind 0: no begin or end to pair), or None
    ct, cts = _counters_within(ct, cts, warnings)

    begins, ends, orphans = match(kind, track, ts)  # per track in time order, as Perfetto sorts
    tg, dg = (ts, dur) if beyond is None else (ts[~beyond], dur[~beyond])
    last = int(max(tg.max(), (tg + dg).max())) if len(tg) else 0
    del tg, dg
    closed = ends >= 0
    dur[begins[closed]] = ts[ends[closed]] - ts[begins[closed]]
    open_rows = begins[~closed]
    dur[open_rows] = last - ts[open_rows]
    if orphans:
        warnings.append(f"{orphans:,} slice ends closed no open slice on their track")
    if len(open_rows):
        warnings.append(f"{len(open_rows):,} slices never ended: they end at the trace's last timestamp "
                        f"(stat '{keys.INCOMPLETE}')")
    if (dur < 0).any():
        warnings.append(f"{int((dur < 0).sum()):,} slices end before they begin (timestamps out of order): "
                        "their duration is 0")
        np.maximum(dur, 0, out=dur)

    keep = (kind != END) & (kind != _LEFT_OUT)
    new_row = np.cumsum(keep) - 1
    rows = np.flatnonzero(keep)
    used, first = np.unique(track[rows], return_index=True)
    first_names = {int(c): b.strings[int(n)] for c, n in zip(used.tolist(), ev["name"][rows[first]].tolist())}
    derived_id = next((i for i, s in enumerate(b.strings) if s == keys.CAT_DERIVED), -1)
    not_derived = unique(track[rows][ev["cat"][rows] != derived_id])
    layout = col.tracks.layout(b, used, np.setdiff1d(used, not_derived), first_names)
    trace_track = layout.track[track[rows]]
    stats: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # key -> (rows, values)
    if len(open_rows):
        stats[keys.INCOMPLETE] = (new_row[open_rows], np.ones(len(open_rows), np.int64))
    # gathered here, not changed after: the builder keeps them (copy=False)
    b.events(trace_track, ev.pop("name")[rows], ts[rows], dur[rows], ev.pop("cat")[rows], stats=stats, copy=False)
    del trace_track, ts, dur  # every row's columns: the events have theirs now
    for key in list(col.stats):  # each key's parts dropped as soon as they are handed on
        for parts in col.stats.pop(key).values():
            while parts:
                r, v = parts.pop(0)
                if beyond is not None:  # the stats of rows left out go with them
                    sel = keep[r]
                    r, v = r[sel], np.asarray(v)[sel]
                b.add_stat(key, new_row[r], v)

    flows = np.concatenate(col.flow_parts) if col.flow_parts else np.zeros((0, 4), np.int64)
    src, dst, ids = link(flows)
    if len(src):  # a flow on an end event is the flow of the slice it closes
        begin_of = np.arange(len(kind))
        begin_of[(kind == END) | (kind == _LEFT_OUT)] = -1
        begin_of[ends[closed]] = begins[closed]
        src, dst = begin_of[src], begin_of[dst]
        ok = (src >= 0) & (dst >= 0) & (src != dst)
        _flows(b, new_row[src[ok]], new_row[dst[ok]], ids[ok], col.chrome_meta.get(PERFETTO_FLOW_CATEGORIES))

    _counters(b, layout, ct["track"], cts, ct["value"], _derived(col.chrome_meta), col.backwards_counters)
    _devices(b, col.chrome_meta, path)
    for why, n in sorted(col.skipped.items()):
        warnings.append(f"skipped {n:,} {why}")
    if not len(rows) and not len(ct["track"]):  # never silently empty (e.g. ftrace or power data only)
        warnings.append("nothing polyprof reads: every event was skipped (above)" if col.skipped else
                        "nothing polyprof reads: no track events, counters or GPU render stages in its packets "
                        "(polyprof does not read system data: ftrace, power rails, memory profiles)")
    for w in warnings:
        log.warning("%s: %s", path, w)
    anchor = clocks.wall_anchor()
    if anchor:
        b.source(clock={mkeys.SOURCE_WALL_ANCHOR: anchor})
    _notes(b.metadata, col.chrome_meta, warnings)
    trace = b.build()
    host = col.chrome_meta.get(HOST_NAME)  # polyprof's export: the host it was recorded on
    if isinstance(host, str) and host and len(trace.sources) == 1 and not trace.sources[0].host:
        trace.sources[0].host = host
    return trace


def _notes(meta: dict, chrome_meta: dict, warnings: list[str]) -> None:
    """The trace's warnings into ``meta``: those of the trace polyprof exported (its
    Chrome metadata entries ``polyprof_warnings``, ``polyprof_plugin_errors``:
    ``formats/chrome.py: notes``) first, as it had them, then the reader's own."""
    kept = recorded_notes({k: chrome_meta.get(entry) for k, entry in PERFETTO_NOTES.items()})
    said = kept.get(mkeys.WARNINGS, []) + warnings
    if said:
        meta[mkeys.WARNINGS] = said
    for k in (mkeys.PLUGIN_ERRORS, mkeys.SCHEDULE):
        if k in kept:
            meta[k] = kept[k]


#: the kind of a row left out (:func:`_beyond`): neither a begin nor an end, not kept
_LEFT_OUT = 0


def _beyond(kind: np.ndarray, ts: np.ndarray, dur: np.ndarray, warnings: list[str]) -> np.ndarray | None:
    """The rows whose time or end (on the trace clock) is beyond +-2**62 ns, marked left
    out (their kind: ``_LEFT_OUT``) and counted in ``warnings``, as every reader treats
    such times (``safety.TIME_LIMIT_NS``: damage, not a clock; spans past it overflow
    int64); None where there are none."""
    lim = TIME_LIMIT_NS
    if not len(ts):
        return None
    bad = (ts < -lim) | (ts > lim) | (dur > lim - np.clip(ts, 0, lim))
    if not bad.any():
        return None
    kind[bad] = _LEFT_OUT
    warnings.append(f"{int(bad.sum()):,} event records (begins, ends, slices) left out: times beyond +-2**62 ns "
                    "(a damaged file)")
    return bad


def _counters_within(ct: dict[str, np.ndarray], cts: np.ndarray, warnings: list[str]
                     ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The counter samples less those whose time is beyond +-2**62 ns (:func:`_beyond`)."""
    ok = (cts >= -TIME_LIMIT_NS) & (cts <= TIME_LIMIT_NS)
    if ok.all():
        return ct, cts
    warnings.append(f"{int((~ok).sum()):,} counter samples left out: times beyond +-2**62 ns (a damaged file)")
    return {k: v[ok] for k, v in ct.items()}, cts[ok]


def _described(col: Collector, ct: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The counter samples less those of GPU counter ids no legacy descriptor describes
    (Perfetto's ``GraphicsEventModule`` drops them; the skipped count says how many);
    the legacy GPU counters given their descriptors' GPUs and names."""
    undescribed, backwards = col.tracks.describe_gpu_counters()
    col.backwards_counters |= backwards
    drop = np.isin(ct["track"], np.fromiter(undescribed, np.int64, len(undescribed)))
    if not drop.any():
        return ct
    ids = sorted({undescribed[c] for c in np.unique(ct["track"][drop]).tolist()})
    listed = ", ".join(map(str, ids[:5])) + (f" and {len(ids) - 5:,} more" if len(ids) > 5 else "")
    why = f"GPU counter samples whose counter id no GpuCounterDescriptor describes ({listed}), as Perfetto drops them"
    col.skipped[why] = col.skipped.get(why, 0) + int(drop.sum())
    return {k: v[~drop] for k, v in ct.items()}


def _flows(b, src: np.ndarray, dst: np.ndarray, ids: np.ndarray, categories: object) -> None:
    """The flows, with the categories polyprof's export numbers in their ids' high bits
    (``device_list.FLOW_CATEGORY_SHIFT``) where the file lists them; other files' ids as
    they are."""
    if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories) or not len(ids):
        b.flows(src, dst, ids)
        return
    code = ids.astype(np.uint64) >> np.uint64(FLOW_CATEGORY_SHIFT)
    low = (ids.astype(np.uint64) & np.uint64((1 << FLOW_CATEGORY_SHIFT) - 1)).astype(np.int64)
    for c in np.unique(code).tolist():
        sel = code == c
        name = categories[c - 1] if 0 < c <= len(categories) else ""
        b.flows(src[sel], dst[sel], low[sel] if name or c == 0 else ids[sel], category=name)


def _devices(b, meta: dict, path: Path) -> None:
    """The device planes' properties and vendors, a host plane's bytes (an XSpace's HLO
    modules), and the ``deviceProperties`` list, as polyprof's export keeps them in
    Chrome metadata (``writers/perfetto.py``): the peaks and occupancy of the efficiency
    tables are matched from them, the FLOPs of XLA ops counted from the HLO."""
    by_name = {p.name: p for p in b.planes}
    entries = meta.get(PERFETTO_PLANES)
    if isinstance(entries, list):
        bytes_back(path, {"planes": entries}, PERFETTO_PLANES)
    for e in entries or []:
        p = by_name.get(e.get("plane")) if isinstance(e, dict) else None
        if p is None:  # the export writes a process for every plane: only an edited file
            continue
        if isinstance(e.get("properties"), dict):
            p.properties.update(e["properties"])
        if isinstance(e.get("vendor"), str) and e["vendor"]:
            p.vendor = e["vendor"]
    listed = meta.get(mkeys.DEVICE_PROPERTIES)
    if isinstance(listed, list):
        b.metadata[mkeys.DEVICE_PROPERTIES] = listed
    info = meta.get(mkeys.DISTRIBUTED_INFO)
    if isinstance(info, dict):
        b.metadata[mkeys.DISTRIBUTED_INFO] = info


def _derived(meta: dict) -> set[tuple[str, str]]:
    """(plane name, counter name) of the counters polyprof's export made of the trace's
    memory series (``PERFETTO_DERIVED_COUNTERS``): the memory events are read again."""
    pairs = meta.get(PERFETTO_DERIVED_COUNTERS)
    return {(str(x[0]), str(x[1])) for x in pairs if isinstance(x, list) and len(x) == 2} \
        if isinstance(pairs, list) else set()


def _counters(b, layout, track: np.ndarray, ts: np.ndarray, value: np.ndarray,
              derived: set[tuple[str, str]], backwards: set[int]) -> None:
    """Each counter track's samples in time order. On a ``backwards`` track (GPU
    counters) a sample's value is the counter's over the interval that ends at it: as
    Perfetto's parser, each value moves to the sample before, the last sample is 0 and
    the first value (of the time before the trace) is dropped."""
    if not len(track):
        return
    order = np.lexsort((ts, track))
    track, ts, value = track[order], ts[order], value[order]
    cut = np.flatnonzero(track[1:] != track[:-1]) + 1
    for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, len(track)].tolist()):
        plane, name, mult = layout.counter(int(track[lo]))
        if derived and (b.planes[plane].name, name) in derived:
            continue
        if int(track[lo]) in backwards:
            value[lo:hi - 1] = value[lo + 1:hi]
            value[hi - 1] = 0.0
        b.counter(plane, name, ts[lo:hi], value[lo:hi] * mult)
