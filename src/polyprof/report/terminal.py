"""The terminal summary: what ran, top sections and events, plugin problems."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from ..analyze.events import event_stats
from ..analyze.sections import section_stats
from ..trace.core import Trace


def fmt_ns(ns: float) -> str:
    """Human time: 1.23 s, 4.56 ms, 7.89 µs, 12 ns."""
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) < 100 * scale else f"{ns / scale:.0f} {unit}"
    return f"{ns:.0f} ns"


def _stats_table(title: str, df: Any, top: int, first: str = "name") -> Table:
    t = Table(title=title, title_justify="left")
    extra = ["category"] if "category" in df.columns else []
    for c in [*extra, first, "count", "total", "mean", "min", "max"]:
        t.add_column(c, justify="left" if c in (first, "category") else "right", overflow="fold")
    for _, r in df.head(top).iterrows():
        cells = [str(r[c]) for c in extra]
        t.add_row(*cells, str(r[first]), f"{int(r['count'])}", fmt_ns(r["total_ns"]), fmt_ns(r["mean_ns"]),
                  fmt_ns(r["min_ns"]), fmt_ns(r["max_ns"]))
    return t


def print_summary(trace: Trace, top: int = 15, console: Console | None = None) -> None:
    console = console or Console(file=sys.stdout)
    t0, t1 = trace.span_ns
    console.print(f"[bold]polyprof summary[/]: {trace.n_events} events on {len(trace.planes)} plane(s), "
                  f"{len(trace.tracks)} track(s), span {fmt_ns(t1 - t0)}")
    sec = section_stats(trace)
    if len(sec):
        console.print(_stats_table("Sections (host time)", sec, top))
    other = event_stats(trace)
    other = other[~other["category"].isin(["section", "user_annotation", "step"])]
    if len(other):
        console.print(_stats_table("Top events by total time", other, top))
    for err in trace.metadata.get("plugin_errors", []):
        console.print(f"[red]plugin {err['plugin']} failed in {err['phase']}[/]: {err['error']}")
