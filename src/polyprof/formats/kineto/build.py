"""The Trace of a collector's columns: planes and tracks, B/E pairs, flows, counters, metadata."""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from .. import kineto_memory
from ...errors import TraceFormatError
from ...lowlevel.heap import TRIM_BYTES, trim
from ...trace.core import Trace
from ...trace import keys
from .args import _EAGER_KEYS, arg_batches
from .codes import _distinct, _is_id
from . import ascend, asyncs, jax_chrome, legacy, lenient, onnxruntime, rocprof_v1, tf_timeline
from .deferred import DeferredArgs
from .events import BLANK
from .devices import categorise_device_events, device_planes, legacy_plane, shared_host_pairs, tf_line
from .flows import bind_flows, bind_v2
from .progress import _Progress
from .toplevel import not_read
from ..export_notes import CARRIED, recorded_notes
from ..slice_lanes import LANE
from ...trace import metadata_keys as mkeys
from ...trace.sorting import median

if TYPE_CHECKING:
    from .collector import _Collector

#: a device thread torch 1.8-1.9 named by text (``"tid": "stream 7"``)
_STREAM = re.compile(r"^\s*stream (\d{1,9})\s*$")

log = logging.getLogger("polyprof")


def build_trace(col: "_Collector", top: dict[str, Any], progress: _Progress) -> Trace:
    """The Trace of a collector's columns: planes, tracks, B/E pairs, flows, counters, metadata."""
    b = col.b
    progress.stage("build", 5)
    pid_c, tid_c, cat_c = _column(col, "pid"), _column(col, "tid"), _column(col, "cat")
    base = base_ns(top)

    pid_vals = col.id_values[id(col.pids)]
    tid_vals = col.id_values[id(col.tids)]
    progress.advance(1)
    planes = device_planes(col, top, pid_vals, pid_c, cat_c)
    name_c = _column(col, "name")
    categorise_device_events(col, planes, pid_c, tid_c, cat_c, name_c)
    # tracks: one per (pid, tid) pair that has events or flow endpoints
    ntid = max(len(tid_vals), 1)
    pair = pid_c.astype(np.int64, copy=False)  # made in place: the load's peak memory is near
    pair *= ntid
    pair += tid_c
    del pid_c, tid_c
    ts, dur = _column(col, "ts"), _column(col, "dur")
    ts += base
    n = len(ts)
    col.cols = {}
    if n * 8 >= TRIM_BYTES:  # the slices' columns, freed: their pages back before the Trace's are made
        trim()  # (a smaller load's pages are reused by the build: a trim would only cost it faults)
    uniq = _distinct(pair)
    host_threads = shared_host_pairs(col, planes, uniq, pair, cat_c, ntid) if col.device_label else set()
    track_of_pair = pair_tracks(col, planes, uniq, ntid, _written_by_polyprof(top), host_threads)
    track = _row_tracks(pair, uniq, np.array([track_of_pair[u] for u in uniq.tolist()], np.int32))
    progress.advance(1)

    # B/E pairs
    if col.b_rows or col.ends:
        z = np.zeros(0, np.int64)
        _match_ends(col, np.concatenate(col.b_rows) if col.b_rows else z,
                    np.concatenate(col.b_pos) if col.b_pos else z, pair, ts, dur, ntid, base)
    del pair
    # the flows first, then the events handed to the builder (which copies some columns):
    # the flows' sorts are the peak, and the rows they bind to are these events' (the first)
    bind_flows(col, track, ts, dur, cat_c, track_of_pair, ntid, base)
    bind_v2(col, ts, cat_c)
    progress.advance(1)
    last = int((ts + dur).max()) if n else base
    b.events(track, name_c, ts, dur, cat_c, copy=False)  # (none of them changed after: the Trace's own)
    del track, name_c, cat_c
    asyncs.build(col, planes, base, last)
    progress.advance(1)
    add_counters(col, planes, base)
    b.metadata.update(_metadata(col, top, base, ts))
    progress.advance(1)
    trace = b.build()
    anchor_host(trace, top)
    if col.lazy_args is not None:
        make, first = col.lazy_args
        args = DeferredArgs(lambda: _lazy_batches(make, first), col.late_args)
        trace.stats.defer(args.decode, _EAGER_KEYS | kineto_memory.MEMORY_KEYS, args.may_hold, args.rows,
                          args.columns)
    elif col.arg_batches or col.late_args:
        args = DeferredArgs(col.arg_batches, col.late_args, col.taken)
        trace.stats.defer(args.decode, _EAGER_KEYS | kineto_memory.MEMORY_KEYS, args.may_hold, args.rows,
                          args.columns)
        if _written_by_polyprof(top):  # (else no look: it walks every batch's arg names)
            _type_modules(trace, args)
    if ascend.is_ascend(col):  # msprof's / MindInsight's: an NPU's tasks by their Task Type
        ascend.classify(trace, ascend.track_roles(col, track_of_pair, ntid))
    elif rocprof_v1.is_rocprof_v1(col):  # whole µs in ts/dur: the exact ns from the args
        rocprof_v1.exact_times(trace, base)
    elif onnxruntime.is_onnxruntime(trace):  # an inference session's runs and operators
        onnxruntime.classify(trace)
    elif legacy.has_cuda_functions(col):  # torch's legacy export: its ops' CUDA intervals
        legacy.link(trace)
    elif tf_timeline.is_timeline(col):  # TensorFlow 1.x's timeline: its GPU work to its ops by node name
        tf_timeline.link(trace)
    elif not _written_by_polyprof(top) and jax_chrome.is_jax_cpu(col, trace):  # JAX's Chrome export (CPU)
        jax_chrome.classify(trace)
    trim()  # the pages the build freed go back: what stays resident is about the Trace
    return trace


def _type_modules(trace: Trace, args: DeferredArgs) -> None:
    """The compiled module of each XLA op (``keys.MODULE_STATS``: ``hlo_module``,
    ``module``, ``kernel_module``, the args polyprof's Chrome and Kineto exports of an
    XSpace carry) typed at load, as the XSpace reader types them: the analyses name an op
    ``module/op`` from the loaded columns alone (``analyze.common.module_codes``), and XLA
    names ops uniquely within a module only; asked of polyprof's own exports only
    (:func:`_written_by_polyprof`), and one that has them decodes those args alone."""
    for key in keys.MODULE_STATS:
        if args.may_hold(key):
            trace.stats.get(key)  # (a lookup materialises the key's column)


def _written_by_polyprof(top: Mapping[str, object]) -> bool:
    """Whether the file is one of polyprof's own exports (the Kineto writer's ``polyprof``
    key, the Chrome writer's ``otherData.origin_ns``): those carry an XSpace's modules in
    args. Asking other files whether their args hold a module would walk every batch's
    arg names at load (``DeferredArgs.may_hold``), which a lookup of a few rows avoids."""
    other = top.get("otherData")
    return "polyprof" in top or (isinstance(other, dict) and "origin_ns" in other)


def _row_tracks(pair: np.ndarray, uniq: np.ndarray, tracks: np.ndarray) -> np.ndarray:
    """The track of each event from its (pid, tid) pair code (``uniq``: the distinct codes,
    ascending; ``tracks``: theirs): a lookup table where the codes are dense, as
    ``_distinct`` counts them, else a search. Int32, made in one pass."""
    if not len(pair):
        return np.zeros(0, np.int32)
    hi = int(uniq[-1])
    if hi <= 4 * len(pair) + 4096:
        table = np.zeros(hi + 1, np.int32)
        table[uniq] = tracks
        return table[pair]
    return tracks[np.searchsorted(uniq, pair)]


def _column(col: "_Collector", key: str) -> np.ndarray:
    """One column of the events collected, joined, its slices' parts freed."""
    parts = col.cols.pop(key, None)
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def base_ns(top: Mapping[str, object]) -> int:
    """``baseTimeNanoseconds`` of the document (0 when absent or not a number)."""
    base = top.get("baseTimeNanoseconds")
    return int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) and abs(base) < 2**62 else 0


def pair_tracks(col: "_Collector", planes: list[tuple[int, str]], uniq: np.ndarray, ntid: int,
                ours: bool = False, host_threads: set[int] | frozenset[int] = frozenset()) -> dict[int, int]:
    """The track of each distinct (pid code * ntid + tid code) pair, ascending, made in
    that order (the chunked conversion, chunks.py, makes the same tracks). In one of
    polyprof's own exports (``ours``) a thread ``<name> (overlap k)`` is a lane the Chrome
    writer moved crossing slices to (``formats/slice_lanes.py``): its events go back on
    the track ``<name>`` of its plane, as the Perfetto reader puts them back.
    ``host_threads``: pairs of a device's pid that are a host process's threads
    (``devices.shared_host_pairs``), on the host plane."""
    b = col.b
    pid_vals = col.id_values[id(col.pids)]
    tid_vals = col.id_values[id(col.tids)]
    track_of_pair: dict[int, int] = {}
    pseudo = 0
    lanes: list[tuple[int, str, tuple]] = []
    for u in uniq.tolist():
        p, t = divmod(u, ntid)
        plane, kind = planes[p]
        pv, tv = pid_vals[p], tid_vals[t]
        if u in host_threads:
            plane, kind = col.b.plane(keys.HOST_PLANE, "host", "", 0, pv, col.process.get(pv)), "host"
        if kind == "device":  # the legacy export's CUDA functions: a device per thread
            own = legacy_plane(col, pv, tv)
            if own is not None:
                plane = own
            elif plane < 0:  # (device_planes leaves no other device with events without a plane)
                raise TraceFormatError(col.path, f"no device plane for the events of process {pv!r}")
        info = _thread_info(col, pv, tv)
        tname = info.get("thread_name")
        if _is_id(tv) and not isinstance(pv, str):
            tid = tv
            if not tname and kind == "device":  # TensorFlow 1.x's timeline: a process per stream
                tname = tf_line(col.process.get(pv, {}).get("process_name"))
            if not tname:
                tname = f"stream {tv}" if kind == "device" else f"thread {tv}"
        elif kind == "device" and (stream := _STREAM.match(str(tv))):  # torch 1.8-1.9: tid "stream 7"
            tid, tname = int(stream.group(1)), tname or str(tv).strip()  # (later ones: tid 7, named so)
        else:  # Kineto's pseudo processes ("Spans", "Traces", "") and string tids
            pseudo += 1
            tid = -pseudo
            tname = tname or "/".join(str(x) for x in (pv, tv) if x not in ("", None)) or "global"
        sort = info.get("thread_sort_index")
        made = (plane, str(tname).strip(), "stream" if kind == "device" else "thread", tid,
                sort if isinstance(sort, int) else None)
        lane = LANE.match(made[1]) if ours else None
        if lane:  # (after the tracks it may be a lane of)
            lanes.append((u, lane.group(1), made))
        else:
            track_of_pair[u] = b.track(*made)
    for u, base, made in lanes:
        known = next((tr.id for tr in b.tracks if tr.plane == made[0] and tr.name == base), None)
        track_of_pair[u] = b.track(*made) if known is None else known
    return dict(sorted(track_of_pair.items())) if lanes else track_of_pair  # (ascending: flows.endpoint_tracks)


def add_counters(col: "_Collector", planes: list[tuple[int, str]], base: int) -> None:
    """The counter samples collected, onto their planes."""
    b = col.b
    if not col.counters:
        return
    cp = np.array([c[0] for c in col.counters])
    names = [c[1] for c in col.counters]
    cts = np.array([c[2] for c in col.counters], np.int64) + base
    vals = np.array([c[3] for c in col.counters], np.float64)
    for name in dict.fromkeys(names):
        m = np.array([x == name for x in names])
        for p in _distinct(cp[m]).tolist():
            mm = m & (cp == p)
            b.counter(planes[p][0], name, cts[mm], vals[mm])


def _lazy_batches(make: Callable[[], list[str]], first: int) -> list[tuple[int, bytes]]:
    batches, lost = arg_batches(make(), first)
    if lost:
        log.warning("kineto: the args of %d events were not valid JSON and are left out", lost)
    return batches


def _thread_info(col: "_Collector", pid: Any, tid: Any) -> dict[str, Any]:
    try:
        return col.threads.get((pid, tid), {})
    except TypeError:
        return {}

def _match_ends(col: "_Collector", b_rows: np.ndarray, b_pos: np.ndarray, pair: np.ndarray, ts: np.ndarray,
                dur: np.ndarray, ntid: int, base: int) -> None:
    """Close each B with the next E on its thread (a stack per thread, in time order; at
    the same time in file order, as Chrome's and Perfetto's importers: ``a`` ending at 10
    and ``b`` starting at 10 are two slices, ``b`` not nested in ``a``). ``b_pos``: the B
    rows' places in the file, as the E events' ``pos``."""
    items = [(int(pair[r]), int(ts[r]), p, 0, int(r), None) for r, p in zip(b_rows.tolist(), b_pos.tolist())]
    items += [(p * ntid + t, t_ns + base, pos, 1, pos, args) for p, t, t_ns, pos, args in col.ends]
    items.sort(key=lambda x: (x[0], x[1], x[2]))
    stacks: dict[int, list[int]] = {}
    unmatched_e = 0
    extra: dict[str, tuple[list, list]] = {}
    for key, t, _, is_end, ref, args in items:
        st = stacks.setdefault(key, [])
        if not is_end:
            st.append(ref)
        elif st:
            row = st.pop()
            dur[row] = max(t - int(ts[row]), 0)
            if isinstance(args, dict):
                for k, v in args.items():
                    group = extra.setdefault(k, ([], []))
                    group[0].append(row)
                    group[1].append(v)
        else:
            unmatched_e += 1
    open_rows = [r for st in stacks.values() for r in st]
    if open_rows:
        last = int((ts + dur).max())
        rows = np.array(open_rows, np.int64)
        dur[rows] = np.maximum(last - ts[rows], 0)
        col.b.add_stat(keys.INCOMPLETE, rows, np.ones(len(rows), np.int64))
        col.unended += len(open_rows)
    for k, (e_rows, vals) in extra.items():
        col._add_stat(k, np.array(e_rows, np.int64), vals)
    if unmatched_e:
        col.skipped["E (no open B)"] = unmatched_e

#: top-level keys of the JSON Object Format left out of the metadata: a sampling
#: profile's stacks and samples (warned about), not facts about the trace
#: top-level keys not copied into the metadata: a sampling profile (warned of), VizTracer's
#: ``file_info`` (the source text of every traced file: megabytes no analysis reads)
_NOT_READ = ("samples", "stackFrames", "file_info")


def _viztracer_overflow(top: dict[str, Any]) -> str:
    """A warning when VizTracer's ring buffer (``--tracer_entries``) wrapped: its oldest
    entries were overwritten, so the trace holds the end of the run only."""
    vm = top.get("viztracer_metadata")
    if not isinstance(vm, dict) or vm.get("overflow") is not True:
        return ""
    return ("viztracer: its buffer overflowed (viztracer_metadata.overflow): the oldest events were overwritten, "
            "the trace holds only the last part of the run (a larger --tracer_entries keeps more)")


def _file_anchor(top: dict[str, Any], base: int) -> dict[str, Any] | None:
    """The wall anchor of the file's times that polyprof's Chrome export keeps in
    ``otherData`` (``wall_anchor``, for ``ts`` µs as the file has them: formats/chrome.py),
    for the times as read (``baseTimeNanoseconds`` added); None without one."""
    other = top.get("otherData")
    a = other.get("wall_anchor") if isinstance(other, dict) else None
    if not isinstance(a, dict) or not all(isinstance(a.get(k), int) and not isinstance(a.get(k), bool)
                                          for k in ("mono_ns", "wall_ns")):
        return None
    # (the numbers only: the metadata's anchor holds integers; its host is the source's, finish_source)
    out = {k: v for k, v in a.items() if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63}
    return {**out, "mono_ns": a["mono_ns"] + base}


def anchor_host(trace: Trace, top: dict[str, Any]) -> None:
    """The host named by the file's ``otherData.wall_anchor`` (polyprof's Chrome export),
    else by its top-level ``host_name`` (recent torch's Kineto files, polyprof's exports),
    as its one source's host, when that has none (ranks/result.anchor_of names it)."""
    other = top.get("otherData")
    a = other.get("wall_anchor") if isinstance(other, dict) else None
    host = a.get("host") if isinstance(a, dict) else None
    if not (isinstance(host, str) and host):
        host = top.get("host_name")
    if isinstance(host, str) and host and len(trace.sources) == 1 and not trace.sources[0].host:
        trace.sources[0].host = host


def _recorded(meta: dict[str, Any]) -> dict[str, Any]:
    """The warnings, plugin errors and schedule of the trace polyprof exported (the Chrome export's
    ``otherData``, the Kineto export's ``polyprof`` key: ``formats/chrome.py: notes``),
    taken out of those keys' verbatim copies in ``meta``: the metadata holds them once."""
    out: dict[str, Any] = {}
    for key in ("otherData", "polyprof"):
        held = meta.get(key)
        if isinstance(held, dict) and any(k in held for k in CARRIED):
            for k, v in recorded_notes(held).items():
                out[k] = out.get(k, []) + v if isinstance(v, list) else v
            meta[key] = {k: v for k, v in held.items() if k not in CARRIED}
    return out


#: the first records of a Triton Inference Server trace (``tritonserver --trace-file``,
#: its default mode): per request id, its timestamps, each a name and ``ns``
_TRITON = re.compile(rb'^\s*\[\s*\{\s*"id"\s*:\s*\d+\s*,\s*"(?:timestamps|model_name)"')


def _known_list(path: str | os.PathLike | None) -> str:
    """What a JSON list of records that are no events is, where its first bytes say."""
    try:
        with open(path or "", "rb") as f:
            head = f.read(256)
    except OSError:
        return ""
    if _TRITON.match(head):
        return ("; it is a Triton Inference Server trace (tritonserver --trace-file: each request's "
                "timestamps), which polyprof does not read")
    return ""


def _metadata(col: "_Collector", top: dict[str, Any], base: int, ts: np.ndarray) -> dict[str, Any]:
    blank = col.skipped.pop(BLANK, 0)  # objects with no field read: in a document's traceEvents, ``{}``
    if blank and top.get("__list__"):  # (JAX's end marker, skipped as Perfetto does); a list's other records
        col.skipped["None"] = col.skipped.get("None", 0) + blank
    if top.get("__list__") and not len(ts) and not col.counters and set(col.skipped) == {"None"}:
        # a JSON list of records none of which is an event (e.g. TraceLens' execution_details.json)
        raise TraceFormatError(col.path, f"not a Chrome/Kineto trace: a JSON list of {col.skipped['None']} "
                                         "objects, none with 'ph' (an event's phase)" + _known_list(col.path))
    meta: dict[str, Any] = {}
    for k, v in top.items():
        if k not in ("traceEvents", "__list__", *_NOT_READ):
            meta[k] = v
    epoch_like = bool(base) or (len(ts) and int(median(ts)) > 10 ** 17)
    meta[mkeys.CLOCK_NAME] = "wall" if epoch_like or not len(ts) else "unknown"
    meta[mkeys.FILE_SOURCE] = {"format": "kineto" if not top.get("__list__") else "chrome-json",
                      "path": str(col.path)}
    anchor = _file_anchor(top, base)
    if anchor is not None:
        meta[mkeys.WALL_ANCHOR] = anchor
    di = top.get("distributedInfo")
    if isinstance(di, dict):
        for k in ("rank", "world_size", "backend"):
            if k in di:
                meta[k] = di[k]
    warnings = []
    repaired = top.get("__repaired__") or {}
    meta.pop("__repaired__", None)
    skipped = meta.pop("__not_read__", None) or {}  # top-level values too long to read (toplevel.py)
    # one line: what was left out and why (phases not read, lenient.Dropped's reasons), and what was repaired
    left_out = [f"{n} x ph={p}" for p, n in sorted(col.skipped.items())]
    left_out += [f"{n} {r}" for r, n in sorted(col.dropped.counts.items())]
    fixed = ", ".join(f"{n} {what}" for what, n in sorted(repaired.items()))
    if left_out:
        warnings.append("kineto: events not imported: " + ", ".join(left_out) +
                        (f" (JSON repaired: {fixed})" if fixed else ""))
    elif fixed:
        warnings.append(f"kineto: JSON repaired: {fixed}")
    warnings += [not_read(k, n) for k, n in skipped.items()]
    samples = top.get("samples")
    if isinstance(samples, list) and samples:  # a sampling profile's (Chrome's, Hermes') CPU samples
        warnings.append(f"kineto: the file's {len(samples)} CPU samples ('samples', 'stackFrames') are not read; "
                        "only its trace events are")
    if col.lost_args:
        warnings.append(f"kineto: the args of {col.lost_args} events were not valid JSON and are left out")
    if col.unbound_flows:
        warnings.append(f"kineto: {col.unbound_flows} flow endpoints matched no event")
    if col.unended:  # (Chrome writes the slices still open when tracing stopped as B events without an E)
        warnings.append(f"kineto: {col.unended} slices never ended (B or b events without their E or e): "
                        f"they end at the trace's last timestamp (stat '{keys.INCOMPLETE}')")
    overflow = _viztracer_overflow(top)
    if overflow:
        warnings.append(overflow)
    for w in warnings:
        log.info("%s: %s", col.path, w)
    if col.dropped.counts.get(lenient.NO_TS):  # damage: said as the negative durations below are
        log.warning("%s: kineto: %d events without a ts left out (a damaged file?)", col.path,
                    col.dropped.counts[lenient.NO_TS])
    if col.backwards:  # damage, not a way of writing: a warning, as the SQLite readers give
        backwards = (f"kineto: {col.backwards} events end before they start (a negative dur: a damaged file): "
                     "kept at their start, 0 ns long")
        log.warning("%s: %s", col.path, backwards)
        warnings.append(backwards)
    # never silently empty (tlparse's [] of no compiles); async slices alone are events (Triton's request traces)
    if not len(ts) and not col.counters and not col.asyncs and not left_out:
        warnings.insert(0, "nothing polyprof reads: the trace has no events (no slices, instants or counters)")
        log.warning("%s: %s", col.path, warnings[0])
    kept = _recorded(meta)
    warnings = kept.get(mkeys.WARNINGS, []) + warnings  # the recording's first, as it had them
    if warnings:
        meta[mkeys.WARNINGS] = warnings
    for k in (mkeys.PLUGIN_ERRORS, mkeys.SCHEDULE):
        if k in kept:
            meta[k] = kept[k]
    if col.other_meta:
        meta[mkeys.CHROME_METADATA_EVENTS] = col.other_meta
    return meta
