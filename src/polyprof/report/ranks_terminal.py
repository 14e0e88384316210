"""The job's summary in the terminal: ranks side by side, alignment, stragglers,
collectives and findings (a ``polyprof.ranks.report.JobReport``, whatever its ranks
came from: trace files, a store, Traces). Tables are read through the Table API."""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel

from ..analyze.frames import column, order_desc
from .terminal import _finding_lines, _short, _table, fmt_bytes, fmt_ns, fmt_pct


def _bound(x: float) -> str:
    return "not bounded" if x != x else fmt_ns(x)


def _alignment_line(ov: dict[str, Any], bound: Any) -> str:
    """How the ranks were put on one clock, saying plainly when some (or all but the
    reference) were not: their times are then as each rank recorded them."""
    n, aligned, ref = ov["ranks"], ov["aligned_ranks"], ov["reference_rank"]
    if n > 1 and aligned <= 1:
        return (f"not aligned: no collective matched rank {ref}'s, so each rank's times are as it "
                "recorded them (wall clock)")
    text = f"{aligned} of {n} on rank {ref}'s clock from collectives"
    text += f" (bound at most {fmt_ns(bound)})" if bound is not None else ""
    if aligned < n:
        text += f"; {n - aligned} not aligned (times as recorded)"
    return text


def render_ranks(report: Any, top: int = 15, console: Console | None = None) -> None:
    console = console or Console(file=sys.stdout)
    out = partial(console.print, emoji=False, highlight=False)
    T, ov, W = report.tables, report.overview, console.width
    i = lambda x: f"{int(x)}"  # noqa: E731
    bound = ov.get("max_bound_ns")
    out(f"[bold]polyprof summary[/]: {ov['ranks']} ranks, {ov['events']} events; " + _alignment_line(ov, bound))
    if ov.get("window"):
        out(f"[bold]analysed window[/]: {ov['window']}")
    if report.findings:
        out(Panel(Group(*_finding_lines(report.findings[:top])), title="Findings", title_align="left"))
    out(_table("Ranks side by side", T["rank_overview"], [
        # at 80 columns the file and the step count go first: the verdict is in the times and shares
        ("rank", "rank", i), ("file", "file", _short, 3), ("steps", "steps", i, 2),
        ("step_mean_ns", "step mean", fmt_ns), ("step_max_ns", "step max", fmt_ns), ("compute_pct", "compute", fmt_pct),
        ("non_compute_pct", "non-compute", fmt_pct), ("idle_pct", "idle", fmt_pct),
        ("communication_ns", "communication", fmt_ns), ("collectives", "collectives", i, True),
        ("events", "events", i, True)], 4 * top, W))
    render_job(T, [], top, console)
    kb = T.get("kernel_breakdown")
    if kb is not None and len(kb):
        out(_table("Top device activity, per rank", kb, [
            ("rank", "rank", i), ("name", "name", _short), ("count", "count", i), ("total_ns", "total", fmt_ns),
            ("share_pct", "share", fmt_pct)], top, W, rows=order_desc(column(kb, "total_ns"))))


def render_job(T: dict[str, Any], findings: list[Any], top: int, console: Console) -> None:
    """The job's tables (``ranks.report.job_tables``): clock alignment, stragglers and
    collectives, after its findings (if any given)."""
    out = partial(console.print, emoji=False, highlight=False)
    W = console.width
    i = lambda x: f"{int(x)}"  # noqa: E731
    if findings:
        out(Panel(Group(*_finding_lines(findings[:top])), title="Findings for the job", title_align="left"))
    out(_table("Clock alignment (onto the reference rank)", T["rank_alignment"], [
        ("rank", "rank", i), ("offset_ns", "offset", fmt_ns), ("bound_ns", "bound", _bound),
        ("method", "method", None), ("collectives", "matched", i), ("message", "note", _short, True)], 4 * top, W))
    st = T["stragglers"]
    if len(T["straggler_collectives"]):
        out(_table("Stragglers (arrival at collectives)", st, [
            ("rank", "rank", i), ("late_ns", "late (sum)", fmt_ns), ("last_count", "last", i),
            ("caused_wait_ns", "others waited", fmt_ns), ("waited_ns", "waited", fmt_ns),
            ("collectives", "collectives", i, True)], 4 * top, W, rows=order_desc(column(st, "caused_wait_ns"), stable=False)))
    cs = T["collective_stats"]
    if len(cs):
        out(_table("Collectives", cs, [
            ("op", "op", None), ("bytes", "size", fmt_bytes), ("count", "count", i), ("ranks", "ranks", i),
            ("total_ns", "total", fmt_ns), ("mean_ns", "mean", fmt_ns), ("max_ns", "max", fmt_ns, True),
            ("algbw_gbps", "algbw GB/s", lambda x: "-" if x != x else f"{x:.2f}"),
            ("busbw_gbps", "busbw GB/s", lambda x: "-" if x != x else f"{x:.2f}")], top, W))
