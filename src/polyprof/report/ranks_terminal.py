"""The job's summary in the terminal: ranks side by side, alignment, stragglers,
collectives and findings (a ``polyprof.ranks.report.JobReport``, whatever its ranks
came from: trace files, a store, Traces). Tables are read through the Table API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analyze.frames import column, order_desc
from ..analyze.table import Table
from . import extension_tables
from .grid import _table
from .terminal import (Out, _finding_lines, _int, _short, comm_tables, fmt_ns, fmt_pct, number_ranges,
                       print_parts)
from .textout import Boxed, Para

if TYPE_CHECKING:
    from rich.console import Console

    from ..ranks.report import JobReport


def _bound(x: float) -> str:
    return "not bounded" if x != x else fmt_ns(x)


def _alignment_line(ov: dict[str, Any], bound: float | None, why: str = "", placed: str = "") -> str:
    """How the ranks were put on one clock (from collectives, transfers), saying plainly
    when some (or all but the reference) were not, and why, and where their times then
    are (``placed``: :func:`_not_aligned`)."""
    n, aligned, ref = ov["ranks"], ov["aligned_ranks"], ov["reference_rank"]
    if n == 1:  # a store or directory of one rank: its own clock, nothing aligned to it
        return f"rank {ref} alone, on its own clock"
    placed = placed or "each rank keeps its times as recorded"
    if n > 1 and aligned <= 1:
        why = why or f"no collective matched rank {ref}'s"
        return f"not aligned: {why}, so {placed}"
    by = " and ".join(ov.get("aligned_by") or ["collectives"])
    text = f"{aligned} of {n} on rank {ref}'s clock from {by}"
    text += f" (bound at most {fmt_ns(bound)})" if bound is not None else ""
    if aligned < n:
        text += f"; {n - aligned} not aligned ({placed})"
    return text


#: where the fallback (ranks/align.py) leaves a rank's times, by its method: (one rank,
#: several), after the ranks' names
_PLACED = {"wall anchors": ("is placed by its wall-clock anchor", "are placed by their wall-clock anchors"),
           "recorded clock": ("keeps its times as recorded (wall clock)", "keep their times as recorded (wall clock)"),
           "own clock": ("keeps its times as recorded, on its own clock (no wall-clock anchor)",
                         "keep their times as recorded, each on its own clock (no wall-clock anchor)")}


def _ranks(ranks: list[int]) -> str:
    """``rank 2``, ``ranks 1-3, 5``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {number_ranges(sorted(ranks))}"


def _not_aligned(al: Table) -> tuple[str, str]:
    """Why the unaligned ranks were not aligned (each distinct reason, their messages up
    to the colon; ranks that recorded no collective named together), and where their
    times are: per method of the fallback, which ranks, in ascending order."""
    if not len(al):
        return "", ""
    rows = sorted((int(r), str(m), str(x)) for r, m, x, a in zip(
        column(al, "rank"), column(al, "message"), column(al, "method"), column(al, "aligned")) if not a)
    silent = [r for r, m, _ in rows if m.split(":")[0] == f"rank {r} recorded no collective"]
    why = [f"{_ranks(silent)} recorded no collective"] if silent else []
    why += [m.split(":")[0] for r, m, _ in rows if r not in silent]
    by: dict[str, list[int]] = {}
    for r, _, x in rows:
        by.setdefault(x, []).append(r)
    placed = [f"{_ranks(rs)} {_PLACED[x][len(rs) > 1]}" if x in _PLACED else f"{_ranks(rs)}: {x}"
              for x, rs in by.items()]
    return "; ".join(dict.fromkeys(why)), "; ".join(placed)


def render_ranks(report: JobReport, top: int = 15, console: Console | None = None) -> None:
    """Print a job's summary (written without rich where it can be: ``terminal.print_parts``)."""
    print_parts(lambda out, width: _rank_parts(out, report, top, width), console)


def _rank_parts(out: Out, report: JobReport, top: int, W: int) -> None:
    """Each part of a job's summary, in order, to ``out``."""
    T, ov = report.tables, report.overview
    bound = ov.get("max_bound_ns")
    out(Para((("polyprof summary", "bold"), (f": {ov['ranks']} rank{'s' if ov['ranks'] != 1 else ''}, "
                                             f"{ov['events']} events; "
                                             + _alignment_line(ov, bound, *_not_aligned(T["rank_alignment"])),
                                             None))))
    if ov.get("window"):
        out(Para((("analysed window", "bold"), (f": {ov['window']}", None))))
    if report.findings:  # (-n 0: every finding, and no table)
        out(Boxed("Findings", tuple(_finding_lines(report.findings[:top] if top else report.findings))))
    if not top:
        return
    out(_table("Ranks side by side", T["rank_overview"], [
        # at 80 columns the file and the step count go first: the verdict is in the times and shares
        ("rank", "rank", _int), ("file", "file", _short, 3), ("steps", "steps", _int, 2),
        ("step_mean_ns", "step mean", fmt_ns), ("step_max_ns", "step max", fmt_ns), ("compute_pct", "compute", fmt_pct),
        ("non_compute_pct", "non-compute", fmt_pct), ("idle_pct", "idle", fmt_pct),
        ("communication_ns", "communication", fmt_ns), ("communication_pct", "comm.", fmt_pct, True),
        ("collectives", "collectives", _int, True), ("transfers", "transfers", _int, True),
        ("events", "events", _int, True)], 4 * top, W))
    _job_tables(out, T, top, W)
    kb = T.get("kernel_breakdown")
    if kb is not None and len(kb):
        out(_table("Top device activity, per rank", kb, [
            ("rank", "rank", _int), ("name", "name", _short), ("count", "count", _int), ("total_ns", "total", fmt_ns),
            ("share_pct", "share", fmt_pct)], top, W, rows=order_desc(column(kb, "total_ns"))))
    extension_tables.parts(out, T, top, W, _table)  # other packages' tables, each rank's rows


def _job_tables(out: Out, T: dict[str, Table], top: int, W: int) -> None:
    """The job's tables (``ranks.report.job_tables``): clock alignment, stragglers and
    collectives."""
    out(_table("Clock alignment (onto the reference rank)", T["rank_alignment"], [
        ("rank", "rank", _int), ("offset_ns", "offset", fmt_ns), ("bound_ns", "bound", _bound),
        ("method", "method", None), ("collectives", "matched", _int), ("message", "note", _short, True)], 4 * top, W))
    st = T["stragglers"]
    if len(T["straggler_collectives"]):
        out(_table("Stragglers (arrival at collectives)", st, [
            ("rank", "rank", _int), ("late_ns", "late (sum)", fmt_ns), ("last_count", "last", _int),
            ("caused_wait_ns", "others waited", fmt_ns), ("waited_ns", "waited", fmt_ns),
            ("collectives", "collectives", _int, True)], 4 * top, W, rows=order_desc(column(st, "caused_wait_ns"), stable=False)))
    comm_tables(out, T, top, W)
