"""The terminal summary: where the time went, what limits the run, what to try."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..analyze.critical_path import on_path_totals
from ..analyze.frames import column, labels, order_desc
from ..analyze.table import Table
from ..analyze.units import fmt_bytes, fmt_ns, fmt_num, fmt_pct, fmt_rate, fmt_size, number_ranges  # noqa: F401 (fmt_* used by importers)
from ..analyze.window import WindowArg, selection
from ..trace.categories import Kind, kind_of
from ..trace.core import Trace
from . import extension_tables, idle_text
from .efficiency_text import mfu_line
from .path_text import path_line
from .tables import Report, build
from .textout import (Boxed, Fit, Item, Lines, Para, Piece, _cells, cell_len, cell_sizes, one_cell,  # noqa: F401
                      plain_terminal, representable, set_cell_size, to_rich)
from .names import fit_names
from .grid import _table

if TYPE_CHECKING:
    from rich.console import Console

#: where each part of a summary goes, in order
Out = Callable[[Item], None]


def _short(s: object, n: int = 70) -> str:
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "…"


def _event_text(e: object, name: str = "") -> str:
    """A finding's event: its name (``name``: as shortened with the others') and values."""
    if not isinstance(e, dict):
        return _short(e, 60)
    parts = [name or _short(e["name"], 50)] if "name" in e else []
    for k, v in e.items():
        if k == "name":
            continue
        if k.endswith("_ns"):
            parts.append(f"{k[:-3]}={fmt_ns(v)}")
        elif (k == "bytes" or k.endswith("_bytes")) and isinstance(v, (int, float)) and not isinstance(v, bool):
            parts.append(f"{k}={fmt_size(v)}")  # (the key kept: "total" may be a time's)
        elif k.endswith("_per_s") and isinstance(v, float):
            parts.append(f"{k}={fmt_rate(k, v)}")
        elif isinstance(v, float):  # as the evidence's (a share of 50.97777773702112 reads 50.98)
            parts.append(f"{k}={v:.4g}")
        else:  # (a long value, as a chain of a hundred ops, in short: the JSON keeps it whole)
            parts.append(f"{k}={_short(v, 60)}")
    return " ".join(parts)


#: an evidence list longer than this is shown in short (the JSON keeps it whole)
LIST_ITEMS = 8


def _listed(v: object) -> object:
    """An evidence value; a long list in short: integers as runs ("0-127"), others as
    "first, ..., last (N)" (a merged finding's ranks and planes at hundreds of ranks)."""
    if not isinstance(v, (list, tuple)) or len(v) <= LIST_ITEMS:
        return v
    if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return number_ranges(sorted(set(v))) + f" ({len(set(v))})"
    return f"{v[0]}, ..., {v[-1]} ({len(v)})"


def _finding_lines(findings: list) -> list[Para]:
    """Each finding: a title line, then evidence / top events / what to try, each indented
    so wrapped lines stay under their label."""
    out: list[Para] = []
    for f in findings:
        color = {"high": "red", "medium": "yellow"}.get(f.severity, "cyan")
        ev = ", ".join(f"{k[:-3]}={fmt_ns(v)}" if k.endswith("_ns") else
                       f"{k[:-6]}={fmt_size(v)}" if k.endswith("_bytes") and isinstance(v, (int, float)) else
                       f"{k}={fmt_rate(k, v)}" if k.endswith("_per_s") and isinstance(v, float) else
                       f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={_listed(v)}" for k, v in f.evidence.items())
        out.append(Para(((f"● {f.severity}", color), (" ", None), (f.title, "bold")), hang=2))
        parts = [("evidence", ev)]
        if f.events:  # their names in 50 cells, told apart (report/names.py)
            events = f.events[:3]
            names = iter(fit_names([str(e["name"]) for e in events if isinstance(e, dict) and "name" in e], 50))
            parts.append(("top", "; ".join(_event_text(e, next(names) if isinstance(e, dict) and "name" in e else "")
                                           for e in events)))
        parts.append(("try", f.suggestion))
        for label, text in parts:
            out.append(Para(((f"{label}: ", "dim"), (text, None)), indent=2))
    return out


#: the analyses the terminal summary neither prints nor reads (``--json`` and the HTML
#: report have them): :func:`print_summary` and ``polyprof summary`` do not compute them,
#: but as another's input (``launch_stats``, a row per launch, lives only while
#: ``launch_summary`` is made: ``registry.Tables._need``)
NOT_SHOWN = ("launch_stats", "device_op_breakdown", "kernel_efficiency")


def print_summary(trace: Trace, top: int = 15, console: Console | None = None, window: WindowArg = "auto") -> None:
    """The terminal summary of the steps ``window`` selects (``analyze/window.py``;
    default: without the warm-up step)."""
    render(build(trace, window, leave_out=NOT_SHOWN), top, console)


def render(report: Report, top: int = 15, console: Console | None = None) -> None:
    """Print a report (``report/tables.py: build``): the overview, the findings, then
    one table per analysis that has rows, problems last (:func:`print_parts`)."""
    print_parts(lambda out, width: _parts(out, report, top, width), console)


def print_parts(parts: Callable[[Out, int], None], console: Console | None = None) -> None:
    """Print the items ``parts(out, width)`` gives for a width: written by
    ``report/textout.py`` where it prints what rich would, else through rich's Console
    (``console``, or one on stdout)."""
    term = plain_terminal(sys.stdout) if console is None else None
    items: list[Item] = []
    parts(items.append, term.width if term else _rich_console(console).width)
    if term is not None and representable(items):
        from .textout import render as text  # the parts as rich prints them, without rich

        sys.stdout.write(text(items, term))
        sys.stdout.flush()
        return
    console = _rich_console(console)
    if term is not None and console.width != term.width:  # laid out again at rich's width
        items.clear()
        parts(items.append, console.width)
    from rich.console import Group  # rich prints what textout does not

    # ":name:" in a kernel or op name stays as it is; styles are explicit, so no repr
    # highlighting (its regexes are compiled in every fresh process). Every part
    # is printed in one call (each call costs rich a set-up)
    console.print(Group(*(to_rich(x) for x in items)), emoji=False, highlight=False, crop=False)


def _rich_console(console: Console | None) -> Console:
    if console is not None:
        return console
    from rich.console import Console  # rich only where textout cannot print the summary

    return Console(file=sys.stdout)


def _parts(out: Out, report: Report, top: int, W: int) -> None:
    """Each part of the summary, in order, to ``out``."""
    ov = report.overview
    has_device = bool(ov["correlation"].get("device_activities"))
    _overview(out, ov)
    mfu = mfu_line(report)  # FLOPs, rate and MFU, or why no MFU (no peak known)
    if mfu is not None:
        out(mfu)
    if report.findings:
        out(Boxed("Findings", tuple(_finding_lines(report.findings))))
    if top:  # (-n 0: the headline and findings only)
        _tables(out, report, top, W, has_device)
    for err in ov["plugin_errors"]:
        out(Para(((f"plugin {err['plugin']} failed in {err['phase']}", "red"), (f": {err['error']}", None))))
    for w in ov.get("warnings", []):
        out(Para((("warning", "yellow"), (f": {w}", None))))


def _tables(out: Out, report: Report, top: int, W: int, has_device: bool) -> None:
    """The summary's tables, ``top`` rows each."""
    T = report.tables
    _device_tables(out, T, top, W, getattr(selection(report.trace), "hta", False))
    _op_tables(out, T, top, W, has_device)
    _section_tables(out, T["section_stats"], top, W, has_device)
    _memory_tables(out, report, top, W)
    _step_tables(out, T, top, W, has_device)
    _critical_path_table(out, T.get("critical_path"), top, W, getattr(selection(report.trace), "timed", False))
    comm_tables(out, T, top, W)
    cg = T.get("cuda_graphs")
    if cg is not None and len(cg):
        out(_table("CUDA/HIP graphs", cg, [("graph", "graph", None), ("replays", "replays", _int),
                                          ("device_ns", "device / replay", fmt_ns),
                                          ("kernels_per_replay", "kernels / replay", _int),
                                          ("first_kernel", "first kernel", None, True)], top, W))
    cc = T.get("cupti_counters")
    if cc is not None and len(cc):
        out(_table("CUPTI counter ranges by op", cc, [
            ("top_op", "top op", None), ("bottom_op", "bottom op", None), ("flops", "FLOPs (counted)", _num),
            ("name", "kernel", None)], top, W))
    _other_events(out, T, top, W)
    _counter_table(out, T.get("counter_stats"), top, W)
    extension_tables.parts(out, T, top, W, _table)  # other packages' tables, after polyprof's


def _int(x: float) -> str:
    return f"{int(x)}"


def comm_tables(out: Out, T: dict[str, Table], top: int, W: int) -> None:
    """Collectives (per op and size), point-to-point transfers (who to whom): a trace's or a job's."""
    cs, tr, bw = T.get("collective_stats"), T.get("transfers"), lambda x: "-" if x != x else f"{x:.2f}"
    who, size = (lambda x: "?" if int(x) < 0 else f"{int(x)}"), (lambda x: fmt_size(x) if x else "-")
    if cs is not None and len(cs):
        out(_table("Collectives", cs, [
            ("op", "op", None), ("bytes", "size", size), ("count", "count", _int), ("ranks", "ranks", _int, 2),
            ("total_ns", "total", fmt_ns), ("mean_ns", "mean", fmt_ns), ("max_ns", "max", fmt_ns, True),
            ("algbw_gbps", "algbw GB/s", bw, True), ("busbw_gbps", "busbw GB/s", bw)], top, W))
    if tr is not None and len(tr):
        job = "send_ns" in tr.columns
        out(_table("Transfers (point-to-point)", tr, [
            ("src", "from", who), ("dst", "to", who), *([] if job else [("op", "op", None)]),
            ("bytes", "size", size), ("count", "count", _int), ("bytes_per_step", "bytes/step", size),
            *([("send_ns", "send", fmt_ns, 1), ("recv_ns", "recv", fmt_ns, 1)] if job else [("time_ns", "time", fmt_ns, 1)]),
            ("time_per_step_ns", "time/step", fmt_ns), ("blocking_ns", "blocked", fmt_ns)], top, W))


def _num(x: float | None) -> str:
    return "" if x is None or x != x else f"{float(x):.3g}"


def _recorded_in_span(ov: dict[str, Any]) -> str:
    """" (X of it recorded)" where a schedule's cycles left unrecorded steps in the
    analysed span (the analyses count the recorded stretches only), else ""."""
    rec, span = ov.get("recorded_in_span_ns"), ov["analysed_span_ns"]
    return f" ({fmt_ns(rec)} of it recorded)" if isinstance(rec, int) and 0 < rec < span else ""


def _overview(out: Out, ov: dict[str, Any]) -> None:
    """What the trace holds, the analysed window, and how device activity was matched."""
    out(Para((("polyprof summary", "bold"), (f": {ov['events']} events on {len(ov['planes'])} plane(s), "
              f"{ov['tracks']} track(s), trace span {fmt_ns(ov['trace_span_ns'])}, analysed span "
              f"{fmt_ns(ov['analysed_span_ns'])}" + _recorded_in_span(ov) + (f", {ov['steps']} step{'s' if ov['steps'] != 1 else ''} ({ov['step_source']})"
                                                     if ov["steps"] else ", no steps"), None))))
    if ov.get("window"):
        out(Para((("analysed window", "bold"), (f": {ov['window']}", None))))
    for plane, why in (ov.get("unsynchronised") or {}).items():
        out(Para((("not synchronised", "red"), (f": {plane}: {why}; left out of findings that compare it "
                                                "with the host", None))))
    c = ov["correlation"]
    if c.get("device_activities") and not c.get("launch_calls"):
        out(Para(((f"correlation: {c['device_activities']} device activities; "
                   + ov.get("no_launch_calls", "no host launch calls in this trace, so none to match"), None),)))
    elif c.get("device_activities"):
        out(Para((
            (f"correlation: {c['device_activities']} device activities; matched by id "
             f"{c['matched_by_correlation_id']}, by flow {c['matched_by_flow']}, in order {c['matched_in_order']}; ",
             None),
            (f"unmatched {c['unmatched_device_activities']}", "red" if c["unmatched_device_activities"] else "green"),
            (f"; launch calls without device activity {c['launch_calls_without_device_activity']} of "
             f"{c['launch_calls']}" + (f"; {g} recorded into CUDA/HIP graphs (their work runs under the graphs' launches)"
                                       if (g := c.get("launch_calls_recorded_into_graphs")) else "")
             + f"; with a framework op {c['device_activities_with_framework_op']}", None),
            *(((f"; no launch call (correlation id 0, as unified-memory migrations) {n_free}", None),)
              if (n_free := c.get("device_activities_without_launch_call")) else ()))))
    left = ov.get("calls_not_kept") or {}
    if left:
        top = sorted(left.items(), key=lambda kv: -kv[1])
        out(Para(((f"query calls: {sum(left.values())} counted, not kept as events (" +
                   ", ".join(f"{k} {n}" for k, n in top[:3]) + (", ..." if len(top) > 3 else "") +
                   "); the cupti plugin's option query_calls keeps them", None),)))


def _device_tables(out: Out, T: dict[str, Table], top: int, W: int, hta: bool = False) -> None:
    """Device time, idle time by cause (``hta``: HTA's, report/idle_text.py), communication overlap."""
    tb = T["temporal_breakdown"]
    if not len(tb):
        return
    i = _int
    out(_table("Device time (analysed span)", tb, [
        ("plane", "device", None), ("stream", "stream", None), ("span_ns", "span", fmt_ns),
        ("compute_pct", "compute", fmt_pct), ("non_compute_pct", "non-compute", fmt_pct),
        ("idle_pct", "idle", fmt_pct), ("activities", "activities", i, True)], 4 * top, W))
    it, notes = idle_text.shown(T["idle_time_breakdown"], tb, hta)
    out(_table("Idle time by cause", it, [
        ("plane", "device", None), ("stream", "stream", None), ("idle_ns", "idle", fmt_ns),
        ("host_wait_pct", "host-wait", fmt_pct), ("kernel_wait_pct", "kernel-wait", fmt_pct),
        ("other_pct", "other", fmt_pct), ("gaps", "gaps", i, True)], 4 * top, W))
    for note in notes:
        out(Para(((note, "dim"),)))
    ks = T.get("kernel_state_breakdown")
    if ks is not None and len(ks):
        out(_table("Kernel-type states (exclusive)", ks, [
            ("plane", "device", None), ("state", "state", None), ("time_ns", "time", fmt_ns),
            ("span_pct", "of span", fmt_pct), ("busy_pct", "of busy", fmt_pct),
            ("segments", "stretches", i, True)], 4 * top, W))
    ql = T.get("queue_length_summary")
    if ql is not None and len(ql):
        out(_table("Queue length per stream (launched, not started)", ql, [
            ("plane", "device", None), ("stream", "stream", None), ("time_mean", "mean (time)", _num),
            ("mean", "mean (changes)", _num, True), ("max", "max", _num), ("p50", "median", _num),
            ("changes", "changes", i, True)], 2 * top, W))
    cp, bw = T.get("copies"), (lambda x: "-" if x != x else f"{x:.0f}" if x >= 100 else f"{x:.3g}")
    if cp is not None and len(cp):  # (small: under analyze.copies.SMALL_BYTES)
        out(_table("Memory copies and fills", cp.with_columns(bytes_shown=_copy_bytes(cp)), [
            ("device", "device", None), ("kind", "kind", None), ("count", "count", i),
            ("bytes_shown", "bytes", None), ("total_ns", "time", fmt_ns), ("bandwidth_gbps", "GB/s", bw),
            ("median_gbps", "median GB/s", bw, True), ("small", "< 1 MiB", i, True),
            ("pageable", "pageable", i, True)], 2 * top, W))
    ov_ = T["comm_comp_overlap"]
    comm = np.flatnonzero(column(ov_, "communication_ns") > 0)
    if len(comm):
        out(_table("Communication / compute overlap", ov_, [
            ("plane", "device", None), ("communication_ns", "communication", fmt_ns),
            ("overlap_ns", "overlapped", fmt_ns), ("overlap_pct", "overlap", fmt_pct)], top, W, comm))


def _copy_bytes(cp: Table) -> np.ndarray:
    """The copies table's bytes as shown: ``?`` for a row whose copies all have no size
    (an RPD fill without its rocpd_copyapi row, rocprofv3's copies without a size column:
    unknown, not 0 B), ``≥`` before the bytes of a row where only some have one."""
    nbytes, n = column(cp, "total_bytes"), column(cp, "count")
    unsized = column(cp, "unsized") if "unsized" in labels(cp) else np.zeros(len(cp), np.int64)
    return np.array(["?" if u >= c and c else ("≥" if u else "") + fmt_size(b)
                     for b, c, u in zip(nbytes.tolist(), n.tolist(), unsized.tolist())], object)


def _op_tables(out: Out, T: dict[str, Table], top: int, W: int, has_device: bool) -> None:
    """Top device activity and top framework ops (the device they caused: with a device)."""
    i = _int
    kb = T["kernel_breakdown"]
    if len(kb):
        out(_table("Top device activity", kb, [
            ("name", "name", None), ("kind", "kind", None), ("count", "count", i), ("total_ns", "total", fmt_ns),
            ("mean_ns", "mean", fmt_ns), ("max_ns", "max", fmt_ns, True), ("share_pct", "share", fmt_pct)], top, W))
    ops = T["op_stats"]
    if len(ops):
        dev_cols = [("device_ns", "device caused", fmt_ns), ("launches", "launches", i)] if has_device else []
        out(_table("Top framework ops (host)", ops, [
            ("name", "name", None), ("count", "count", i), ("total_ns", "total", fmt_ns),
            ("self_ns", "self", fmt_ns), *dev_cols], top, W))


def _section_tables(out: Out, sec: Table, top: int, W: int, has_device: bool) -> None:
    """Sections (host time, and the device time they caused), then memory per section."""
    if not len(sec):
        return
    i = _int
    dev_cols = [("device_ns", "device", fmt_ns), ("projected_ns", "projected", fmt_ns, True),
                ("device_util_pct", "util", fmt_pct, True)] if has_device else []
    table = _table("Sections", sec, [
        ("name", "name", None), ("count", "count", i), ("total_ns", "total", fmt_ns),
        ("mean_ns", "mean", fmt_ns), ("min_ns", "min", fmt_ns), ("max_ns", "max", fmt_ns),
        ("median_ns", "median", fmt_ns, 2), ("p99_ns", "p99", fmt_ns, 2), *dev_cols], top, W)
    out(table)
    shown = set(table.headers)
    hosts = [h for h in ("total", "mean", "min", "max", "median", "p99") if h in shown]  # (a narrow one: fewer)
    host = f"{hosts[0]}..{hosts[-1]}" if len(hosts) > 1 else (hosts or ["total"])[0]
    notes = [f"{host} = host time"] + [text for col, text in (
        ("device", "device = device time its launches caused"),
        ("projected", "projected = first to last device activity caused"),
        ("util", "util = device busy within the projection"),
        ) if col in shown]
    out(Para((("; ".join(notes), "dim"),)))
    _section_memory(out, sec, top, W)


def _step_tables(out: Out, T: dict[str, Table], top: int, W: int, has_device: bool) -> None:
    """Steps, and launches per launch call."""
    i = _int
    ss = T["step_stats"]
    if len(ss):
        cols: list[tuple] = [("step", "step", i), ("plane", "device", None), ("host_ns", "host", fmt_ns)]
        if has_device:
            cols += [("busy_ns", "busy", fmt_ns), ("compute_ns", "compute", fmt_ns), ("idle_ns", "idle", fmt_ns),
                     ("launch_count", "launches", i), ("launch_mean_ns", "launch mean", fmt_ns, True),
                     ("launch_max_ns", "launch max", fmt_ns, True)]
        else:
            cols = [c for c in cols if c[0] != "plane"]
        out(_table("Steps", ss, cols, 2 * top, W))
        if has_device:  # (two windows in one row: say which is which)
            out(Para((("busy, compute, idle = device time within the step's host span; launches = the "
                       "step's launch calls", "dim"),)))
    ls = T["launch_summary"]
    if len(ls):
        # a call that launches many activities (a CUDA graph): calls and activities apart
        calls = [("launches", "calls", i)] if (column(ls, "launches") != column(ls, "count")).any() else []
        out(_table("Launches", ls, [
            ("plane", "device", None), ("launch_name", "launch call", None), *calls,
            ("count", "activities" if calls else "count", i), ("cpu_mean_ns", "CPU mean", fmt_ns), ("device_mean_ns", "device mean", fmt_ns),
            ("delay_median_ns", "delay median", fmt_ns), ("delay_p99_ns", "delay p99", fmt_ns, True)], top, W))


def _critical_path_table(out: Out, cp: Table | None, top: int, W: int, timed: bool = False) -> None:
    """What the steps' critical paths ran through (analyze/critical_path.py); ``timed``:
    a time window's (``path_text.path_line``)."""
    if cp is None or not len(cp):
        return
    t = on_path_totals(cp)
    if len(t):
        out(_table("Critical path", t, [("name", "name", None), ("kind", "kind", None),
                                        ("on_path_ns", "on path", fmt_ns), ("share_pct", "share", fmt_pct),
                                        ("steps", "steps", _int, True)], top, W))
        out(Para(((path_line(cp, timed), "dim"),), indent=2))


def _other_events(out: Out, T: dict[str, Table], top: int, W: int) -> None:
    """Events no table above shows (all events by total time when there is no device)."""
    other = T["event_stats"]
    has_kernels = bool(len(T["kernel_breakdown"]))
    if has_kernels:  # device activity, framework ops and launch calls have their own tables above
        shown = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.COLLECTIVE, Kind.RUNTIME, Kind.CPU_OP,
                 Kind.ANNOTATION, Kind.STEP, Kind.DEVICE_ANNOTATION, Kind.DERIVED)
    cats = column(other, "category").tolist()
    if has_kernels:
        keep = np.fromiter((kind_of(str(c)) not in shown for c in cats), bool, len(cats))
    else:  # as ~isin([...]): exact matches
        keep = np.fromiter((c not in ("section", "user_annotation", "step") for c in cats), bool, len(cats))
    rows = np.flatnonzero(keep)
    if len(rows):
        out(_table("Other events by total time" if has_kernels else "Top events by total time", other, [
            ("category", "category", None), ("name", "name", None), ("count", "count", _int),
            ("total_ns", "total", fmt_ns), ("mean_ns", "mean", fmt_ns), ("min_ns", "min", fmt_ns, 2),
            ("max_ns", "max", fmt_ns, 1)], top, W, rows))


def _with(df: Table, **more: np.ndarray) -> Table:
    """``df`` with ``more`` columns (``df`` a Table, or a DataFrame of the ranks' tables)."""
    return Table({**{c: column(df, c) for c in labels(df)}, **more})


def _counter_table(out: Out, cs: Table | None, top: int, W: int) -> None:
    """Counters: bytes as bytes, everything else as a number."""
    if cs is None or not len(cs):
        return
    names = column(cs, "name").tolist()
    shown_cs = _with(cs, **{c: np.array([fmt_size(v) if str(n).endswith("_bytes") else fmt_num(v)
                                         for n, v in zip(names, column(cs, c).tolist())], dtype=object)
                            for c in ("first", "last", "min", "max", "mean")})
    out(_table("Counters", shown_cs, [
        ("plane", "plane", None), ("name", "name", None), ("samples", "samples", _int),
        ("first", "first", None), ("last", "last", None), ("min", "min", None, 2),
        ("max", "max", None, 1), ("mean", "mean", None, 3)], top, W))  # the peak (max) kept longest


def _section_memory(out: Out, sec: Table, top: int, W: int) -> None:
    """Memory per section, when the trace has any (allocators, else process RSS)."""
    # (the labels as a list: "in sec" builds their hash table)
    if "mem_source" not in labels(sec) or not (~np.isnan(column(sec, "mem_delta_bytes").astype(np.float64))).any():
        return
    rss = "allocator" not in set(column(sec, "mem_source").tolist())
    cols: list[tuple] = [("name", "name", None), ("mem_delta_bytes", "Δ held", fmt_bytes),
                         ("mem_min_bytes", "min", fmt_size, 1), ("mem_max_bytes", "max", fmt_size),
                         ("mem_mean_bytes", "mean", fmt_size, 1)]
    if not rss:
        cols.insert(1, ("alloc_bytes", "allocated", fmt_size))
    bysize = order_desc(column(sec, "mem_max_bytes"))  # as sort_values(ascending=False, kind="stable")
    out(_table("Memory by section" + (" (process RSS)" if rss else ""), sec, cols, top, W, bysize))
    out(Para((("held = " + ("process RSS" if rss else "bytes allocated and not yet freed, every device added up")
               + "; Δ held = at exit - at entry, overlapping instances once; min/max/mean = during the section", "dim"),)))


def _memory_tables(out: Out, report: Report, top: int, W: int) -> None:
    """The peak per device and allocator, and the allocations live at it."""
    T = report.tables
    mp = T.get("memory_peak")
    if mp is None or not len(mp):
        return
    origin = report.trace.span_ns[0]
    mp = _with(mp, when=column(mp, "peak_ns") - origin)
    out(_table("Memory peak", mp, [
        ("device", "device", None), ("allocator", "allocator", None), ("start_bytes", "start", fmt_size),
        ("peak_bytes", "peak", fmt_size), ("when", "at", fmt_ns), ("end_bytes", "end", fmt_size),
        ("live_at_peak_bytes", "live at peak", fmt_size, 1), ("allocations", "allocations", str, 2)], top, W))
    live = T.get("memory_at_peak")
    if live is not None and len(live):
        many = int(column(mp, "live_at_peak").sum())  # (the table keeps the largest few of each peak)
        out(_table(f"Allocations live at the peak: the largest of {many:,}", live, [
            ("device", "device", None, 2), ("bytes", "bytes", fmt_size), ("op", "op", None),
            ("section", "section", None), ("stack", "stack", None, 1)], min(top, 10), W))
