"""The summary of a store's rank too big for memory, window by window (docs/store.md,
"Summary of a rank that does not fit").

The rank is cut at quiet points between steps (``store/window.py``) into windows of at
most :func:`fits.window_events` events; each window is read back as a Trace of its own,
analysed as the whole rank's steps in it are (a view whose steps and counting range
are the window's share of the rank's window, and whose analysed span runs from one
quiet point to the next, so the spans tile the rank's), and only its tables are kept;
the tables are then merged (``ranks/table_merge.py``) into the rank's. Each window
hands the next the CUDA graphs captured so far, by value (``analyze.cuda_graphs.Captures``:
a graph captured in one window, replayed in later ones), and each is told the planes the
whole rank has device activity on (``Plan.devices``, ``analyze.common.carry_devices``: a
window of host work alone is not a CPU trace's). Memory: one window, the tables of those
done, and the captured graphs' launches.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..analyze import window as W
from ..analyze.clocks import unsynchronised
from ..analyze.common import analysed_span, carry_devices, recorded_in_span, stretches_ns
from ..analyze.cuda_graphs import Captures, GraphStats, carry_in, graph_stats, graph_table, merge_stats, no_captures
from ..analyze.efficiency import resolve_peak
from ..analyze.frames import column
from ..analyze.finding import Finding
from ..analyze.peaks import Peak
from ..analyze.registry import ANALYSES, Tables, extensions
from ..analyze.table import Table
from ..derive import cache
from ..derive.steps import Steps, renumbered
from ..lowlevel.heap import trim
from ..progress import TaskBar
from ..store.rankfiles import _read, read_header
from ..store.window import Plan, Window, plan, read_window
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from . import fits
from .sources import RankEntry, StoreRank
from .result import RankResult, anchor_of, overview_row, rank_collectives, stated_job
from . import window_findings as wf
from . import window_memory, window_reduce
from . import window_values as values
from .table_merge import MfuPart, concat_collectives, merge_mfu, merge_tables

log = logging.getLogger("polyprof")
_FAR = 1 << 62
#: the tables each window computes: those a job gathers, and the launch table they need.
#: Polyprof's own only: another package's table has no rule to merge its windows' tables
#: (``ranks/table_merge.py``), so a rank summarised window by window has none (said once)
KEPT = tuple(a.name for a in ANALYSES if not a.per_event) + ("launch_stats",)


def summarise_entry(entry: RankEntry) -> RankResult | None:
    """The summary of a store's rank (a ``RankEntry``) window by window, when its plan
    allows; None when it is to be read whole."""
    src = entry.source
    if not isinstance(src, StoreRank):
        return None
    folder = src.folder
    events = int(read_header(folder)["events"])
    p = by_windows(folder, events)
    if p is None:
        if fits.store_rank_bytes(events) > fits.memory_bound():
            log.warning("%s: above the memory bound (%d MiB) but read whole: it cannot be cut into windows of whole "
                        "steps (windows start at ProfilerStep#N events that nothing spans; it needs three steps or "
                        "more, and not a schedule's recording)", entry.label, fits.memory_bound() >> 20)
        return None
    log.info("%s: above the memory bound (%d MiB): summarised in %d windows of whole steps (largest %d events)",
             entry.label, fits.memory_bound() >> 20, len(p.events), p.largest)
    check_plan(p, f"{entry.label}: rank {entry.rank}")
    try:
        return summarise(folder, p, entry.label)
    except StepsDisagree as e:
        log.warning("%s: above the memory bound (%d MiB) but read whole: %s", entry.label, fits.memory_bound() >> 20, e)
        fits.check_store_rank(folder, entry.rank, events)
        return None


class StepsDisagree(Exception):
    """A window holds fewer steps than the plan cut it by (``store/window.py`` counts the
    ``ProfilerStep#N`` events on host planes, as ``derive/steps.py`` does; a safety net
    for any other disagreement): the rank is read whole instead, as the summary of a
    rank the windows cannot cut."""


def by_windows(folder: Path, events: int) -> Plan | None:
    """The plan of a store's rank of ``events`` events when it is above the memory bound
    and can be summarised window by window; None when it is read whole."""
    bound = fits.memory_bound()
    if fits.store_rank_bytes(events) <= bound:
        return None
    return windowed(folder, fits.window_events(bound))


def check_plan(p: Plan, what: str) -> None:
    """Where quiet points are too far apart for the bound (a window between two of them
    holds more events than the bound allows), said in the log; and in one line, before
    reading, where that window would not fit in the memory this process may use."""
    most = fits.window_events(fits.memory_bound())
    if p.largest <= most:
        return
    log.warning("%s: the largest window between quiet points holds %s events, more than the %s the memory bound "
                "(%d MiB) allows: the summary may pass the bound", what, f"{p.largest:,}", f"{most:,}",
                fits.memory_bound() >> 20)
    fits.check_fits(f"{what} (a window of {p.largest:,} events)", fits.window_bytes(p.largest),
                    "the rank has too few quiet points between its steps to be summarised in smaller windows; "
                    "query it with polyprof sql STORE, which is memory-limited")


def windowed(directory: Path, max_events: int) -> Plan | None:
    """The rank's plan when it can be analysed window by window: two windows or more, and
    three steps or more (the default window, every step but the first, then applies; a
    rank recorded by a schedule, whose every step the default window analyses, is read
    whole). Kept for the process (the command's check and its summary ask for it both)."""
    if read_header(directory).get("metadata", {}).get(mkeys.SCHEDULE):
        return None
    key = (str(directory.resolve()), (directory / "events.parquet").stat().st_mtime_ns, max_events)
    if key not in _PLANS:
        p = plan(directory, max_events)
        _PLANS.clear()
        _PLANS[key] = p if len(p.events) > 1 and p.steps >= W.AUTO_MIN_STEPS else None
    return _PLANS[key]


_PLANS: dict[tuple[str, int, int], Plan | None] = {}


def summarise(directory: Path, p: Plan, label: str = "") -> RankResult:
    """The rank's :class:`RankResult` for ``polyprof summary`` (the default window: every
    step but the first) from the windows of ``p``."""
    _release()  # what the plan freed
    header = read_header(directory)
    header["extent_ns"] = values.extent_ns(directory, header)  # (the overview's trace_span_ns)
    strings = _read(directory / "strings.parquet").column("s").to_pylist()  # once for every window
    left = [a.name for a in extensions() if not a.per_event]
    if left:
        log.warning("%s: summarised window by window: the tables of other packages (%s) are left out (polyprof "
                    "cannot merge a table it does not know across windows; with --steps or --all-steps the rank is "
                    "read whole, and has them)", label or directory.name, ", ".join(left))
    got = _Gathered(p.devices)
    with tempfile.TemporaryDirectory(prefix="polyprof-windows-") as tmp, \
            TaskBar(len(p.events), f"{label or directory.name}: windows") as bar:
        spill = Path(tmp)
        for i, (lo, hi) in enumerate(p.windows()):
            got.add(read_window(directory, lo, hi, header, strings), spill, i, i == len(p.events) - 1, lo, hi)
            _release()  # the window's freed memory back to the system before the next is read
            bar.advance()
        empty = read_window(directory, 0, 0, header, strings).trace
        tables = got.tables(empty, spill, header, strings)
    return got.result(empty, tables, header)


class _Gathered:
    """What the windows hand on: their tables, steps, spans, collectives, findings,
    correlation counts, unsynchronised devices, idle edges and launch names."""

    def __init__(self, devices: np.ndarray) -> None:
        self.devices = devices  # the planes the rank has device activity on (Plan.devices)
        self.parts: list[dict[str, Table]] = []
        self.steps: list[Steps] = []
        self.spans: list[tuple[int, int]] = []
        self.coll: list[Table] = []
        self.found: list[dict[int, list[Finding]]] = []
        self.counts: dict[str, int] = {}
        self.unsynced: dict[str, str] = {}
        self.edges: list[dict[tuple, values.Edge]] = []
        self.launch_names: dict[str, int] = {}
        self.graphs: list[GraphStats] = []
        self.mfu: list[MfuPart] = []
        self.peak: Peak | None = None
        self.on_device = False  # a device plane has events in some window (the advice's device or CPU text)
        self.captures: Captures = no_captures()  # the graphs captured so far, for the windows after
        self.live: window_memory.Live = {}  # allocations live at the last window's end (window_memory.carry)
        self.holders: window_memory.Holders = {}  # allocations live at each memory peak (window_memory.carry)
        self.after = 0  # host activity after the last window's last step (its label's words)
        self.recorded = 0  # the windows' analysed stretches, added up (the overview's recorded_in_span_ns)

    def add(self, window: Window, spill: Path, i: int, last: bool, lo: int, hi: int) -> None:
        trace = window.trace
        got = _window(trace, i == 0, last, lo, hi, self.captures, self.devices)
        view = got.view
        self.found.append(wf.window_findings(view, got.tables))
        devices = values.device_planes(trace)
        self.on_device = self.on_device or bool(devices)
        self._efficiency(view, got.tables, i == 0, devices)
        self.captures = values.captures(view, self.captures)
        if len(got.tables.get("cuda_graphs", ())):  # (its table's stats, kept: cuda_graphs.graph_stats)
            self.graphs.append(graph_stats(view))
        values.spill(view, spill, i)
        self.live = window_memory.carry(view, got.tables, self.live, self.holders)
        values.spill_launches(got.tables.pop("launch_stats"), spill, i, self.launch_names)
        self.edges.append(values.edges(view))
        self.parts.append(got.tables)
        self.steps.append(got.steps)
        self.spans.append(got.span)
        self.recorded += stretches_ns(view)  # (its span, the window's tile, less what it did not record)
        if last:
            every = cache.steps(trace)
            self.after = W.host_after(trace, int(every.end[-1])) if len(every) else 0
        coll = got.collectives  # its rows made the rank's rows
        self.coll.append(coll.with_columns(row=window.input_rows[column(coll, "row")]) if len(coll) else coll)
        self.unsynced.update(unsynchronised(trace))
        for k, v in cache.correlation(trace).counts.items():
            self.counts[k] = self.counts.get(k, 0) + int(v)

    def _efficiency(self, view: Trace, tables: dict[str, Table], first: bool, devices: frozenset[int]) -> None:
        """What the merge needs to make the efficiency tables the rank's: the peaks, each
        kernel row's peak FLOP/s, the window's model FLOPs and devices (``devices``: its
        device planes with events), and the kernels and op calls of its replays of graphs
        an earlier window captured (window_values)."""
        if first:
            self.peak = resolve_peak(view, None)
        if "kernel_efficiency" in tables:
            t = tables["kernel_efficiency"]
            tables["kernel_efficiency"] = values.with_carried_kernels(view, t.with_columns(
                _peak=values.kernel_peaks(view, t)))
        if "op_efficiency" in tables:
            tables["op_efficiency"] = values.with_carried_ops(view, tables["op_efficiency"])
        if "mfu" in tables:
            tables["mfu"] = values.fill_mfu(tables["mfu"], view)
            self.mfu.append(values.mfu_part(view, devices))

    def tables(self, empty: Trace, spill: Path, header: dict[str, Any], strings: list[str]) -> dict[str, Table]:
        """The rank's tables: merged, then made exact from what the windows spilled."""
        windows = len(self.parts)
        _number_steps(self.parts, self.steps)
        tables = merge_tables(self.parts, (self.spans[0][0], self.spans[-1][1]),
                              self.peak.bandwidth if self.peak else 0.0, tuple(q["name"] for q in header["planes"]))
        if "mfu" in tables:
            tables["mfu"] = merge_mfu([p["mfu"] for p in self.parts], self.mfu, self.peak)
        graphs = merge_stats(self.graphs)
        if "cuda_graphs" in tables and len(graphs.key):
            tables["cuda_graphs"] = graph_table(graphs)
        self.parts = []
        _release()
        # the rank's launch_summary from the windows' launch reductions (values.spill_launches)
        tables["launch_summary"] = window_reduce.launch_summary(spill, windows)
        values.exact_quantiles(tables, spill, windows, strings)
        plane_of = np.array([t["plane"] for t in header["tracks"]], np.int64)
        tables["queue_length_summary"] = values.queue_summary(
            tables["queue_length_summary"], spill, windows, [t["name"] for t in header["tracks"]],
            [q["name"] for q in header["planes"]], plane_of)
        values.exact_copy_medians(tables, spill, windows, [q["name"] for q in header["planes"]])
        values.join_edges(tables, self.edges, self.spans)
        return tables

    def result(self, empty: Trace, tables: dict[str, Table], header: dict[str, Any]) -> RankResult:
        t0, t1 = self.spans[0][0], self.spans[-1][1]
        every = _joined(self.steps, 0)
        selected = _joined(self.steps, 1)
        collectives = concat_collectives(self.coll)
        n = int(header["events"])
        s0, s1 = header.get("span_ns", [0, 0])
        meta = header.get("metadata", {})
        overview = {
            "events": n, "planes": [q["name"] for q in header["planes"]], "tracks": len(header["tracks"]),
            "trace_span_ns": header["extent_ns"][1] - header["extent_ns"][0], "analysed_span_start_ns": t0, "analysed_span_ns": t1 - t0,
            "steps": len(selected), "step_source": every.describe(),
            "window": W._label(every, np.arange(1, len(every)), W.auto_words(every, self.after, mkeys.CAPTURE in meta)),
            "correlation": self.counts, "unsynchronised": self.unsynced,
            "plugin_errors": list(meta.get(mkeys.PLUGIN_ERRORS, [])),
            "warnings": mkeys.warning_texts(meta),
            **recorded_in_span(self.recorded, t1 - t0),  # (the key and its place as a whole read's)
        }
        shell = wf.shell(empty, (int(s0), int(s1)), (t0, t1), selected, self.unsynced, self.on_device)
        findings = wf.rank_findings(shell, tables, self.found, self.unsynced, self.holders)
        return RankResult(tables, findings, overview, collectives, *anchor_of(shell),
                          overview_row(tables, collectives, n, t1 - t0, t0, overview.get("recorded_in_span_ns")),
                          stated_job(meta))


def _joined(steps: list[Steps], skip: int) -> Steps:
    """The windows' steps end to end, the first ``skip`` left out. Numbers are the
    trace's own (a window may have renumbered its own repeats), told apart as in one
    trace when they repeat across windows (derive/steps.py), before the skip."""
    def cat(f: str) -> np.ndarray:
        return np.concatenate([getattr(s, f) for s in steps])

    own = np.concatenate([s.number if s.original is None else s.original for s in steps])
    every = renumbered(Steps(own, cat("start"), cat("end"), cat("rows"), steps[0].source))
    return Steps(every.number[skip:], every.start[skip:], every.end[skip:], every.rows[skip:], every.source,
                 None if every.original is None else every.original[skip:])


def _number_steps(parts: list[dict[str, Table]], steps: list[Steps]) -> None:
    """Each window's ``step`` columns renumbered as the rank's steps are, when the rank's
    step numbers repeat (a window numbers only its own steps; derive/steps.py)."""
    every = _joined(steps, 0)
    if every.original is None:
        return
    at = 0
    for tables, own in zip(parts, steps):
        local, glob = own.number, every.number[at:at + len(own)]
        at += len(own)
        if not len(local):
            continue
        order = np.argsort(local, kind="stable")
        for name, t in tables.items():
            if "step" not in t or not len(t):
                continue
            col = np.asarray(column(t, "step"), np.int64)
            i = np.minimum(np.searchsorted(local[order], col), len(local) - 1)
            hit = local[order][i] == col
            tables[name] = t.with_columns(step=np.where(hit, glob[order][i], col))


class _Done(NamedTuple):
    """One window analysed: its tables, view, steps, analysed span and collectives."""

    tables: dict[str, Table]
    view: Trace
    steps: Steps
    span: tuple[int, int]
    collectives: Table


def _window(trace: Trace, first: bool, last: bool, lo: int, hi: int, captures: Captures,
            devices: np.ndarray) -> _Done:
    """One window's tables, steps, analysed span, collectives, findings and correlation
    counts, analysed as the rank's default window sees its steps, with the graphs the
    windows before it captured (``captures``) and the planes the rank has device activity
    on (``devices``)."""
    steps = cache.steps(trace)
    if len(steps) < (2 if first else 1):
        where = "its first window" if first else f"its window from {lo:,} ns"
        raise StepsDisagree(f"{where} holds {len(steps)} of its steps, fewer than the windows were cut by (the plan "
                            "counts ProfilerStep#N events on host planes, the window's analyses the steps they find)")
    index = np.arange(len(steps))[1:] if first else np.arange(len(steps))
    c0 = int(steps.start[1]) if first else lo  # events are counted from the rank's second step on
    c1 = _FAR if last else hi
    sel = W.Selection(index, "", True, "steps", c0, min(c1, int(steps.end[-1])) if last else c1)
    view = W._make_view(trace, sel)
    carry_in(view, captures)
    carry_devices(view, devices)
    span = analysed_span(view)
    if not first:
        span = (lo, span[1])
    if not last:
        span = (span[0], hi)
    view.__dict__["_polyprof_memo"]["analysed_span"] = span
    t = Tables(view)
    tables = {name: t[name] for name in KEPT}
    return _Done(tables, view, steps, span, rank_collectives(trace, view))


def _release() -> None:
    """Freed memory back to the system: Arrow's pool's and the C heap's."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim()
