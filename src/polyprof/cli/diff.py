"""polyprof diff: what got slower or faster between two runs (terminal tables or --json)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

#: changes named per direction in the verdict, at most
VERDICT_TOP = 5


def register(sub: Any) -> None:
    p = sub.add_parser("diff", help="compare two runs: what got slower or faster, beyond step-to-step noise",
                       description="Per kernel, framework op and section: counts and total time in run A and "
                                   "run B, the delta, and whether it is beyond step-to-step noise (Mann-Whitney U "
                                   "over per-step totals). A and B are trace files or directories of rank files.")
    p.add_argument("a", metavar="A", help="run A: a trace file, a directory of its ranks' trace files, or a store")
    p.add_argument("b", metavar="B", help="run B: a trace file, a directory of its ranks' trace files, or a store")
    p.add_argument("-n", "--top", type=int, default=15,
                   help="rows per table (default 15; --json has every row); the verdict names at most "
                        f"{VERDICT_TOP} changes each way")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the test (default 0.05)")
    p.add_argument("--raw-names", action="store_true",
                   help="match names exactly (default: normalised, see docs/analysis.md)")
    p.add_argument("--json", action="store_true", help="print the tables and the verdict as JSON")
    from .common import add_window_args

    add_window_args(p, "steps compared, in every trace of both runs (default: every step; --skip-first 1 "
                       "leaves the warm-up out)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analyze.diff import diff
    from .common import window_from

    window = window_from(args, default=None)
    runs = {side: _run_of(path) for side, path in (("a", args.a), ("b", args.b))}
    d = diff(runs["a"][0], runs["b"][0], alpha=args.alpha, normalize=not args.raw_names,
             top=min(args.top, VERDICT_TOP), window=window)
    for side in ("a", "b"):
        d.overview[side]["paths"] = runs[side][1]
    if args.json:
        sys.stdout.buffer.write(to_json(d))
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
        return 0
    render(d, args.top)
    return 0


def _run_of(path: str) -> tuple[Any, list[str]]:
    """One run: ``polyprof.load_ranks`` of the file, directory or store (each rank loaded
    and reduced in a worker); and its paths (a store's ranks: the store)."""
    from ..ranks.traceset import load_ranks

    ts = load_ranks(path)
    return ts, [str(e.path) for e in ts.entries] if all(e.path is not None for e in ts.entries) else [str(path)]


def to_json(d: Any) -> bytes:
    """Overview, step time, verdict (text and the significant changes) and every table."""
    import orjson
    import pandas as pd

    from ..report.tables import _plain

    tables = {}
    for name, df in d.tables.items():
        rec = df.astype(object).where(pd.notna(df), None) if len(df) else df
        tables[name] = {"columns": list(df.columns), "rows": len(df), "records": rec.to_dict(orient="records")}
    doc = {"overview": d.overview, "step_time": d.step_time,
           "verdict": {"text": d.verdict, "changes": d.changes}, "tables": tables}
    return orjson.dumps(doc, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2
                        | orjson.OPT_NON_STR_KEYS)


def _signed_ns(ns: float) -> str:
    from ..report.terminal import fmt_ns

    return fmt_ns(ns) if ns != ns or ns <= 0 else "+" + fmt_ns(ns)


def _rel(x: float) -> str:
    return "new" if x != x else "gone" if x == -1 else f"{100 * x:+.1f}%"


def _p(x: float) -> str:
    return "-" if x != x else f"{x:.2g}"


def render(d: Any, top: int) -> None:
    from functools import partial

    from rich.console import Console, Group
    from rich.markup import escape
    from rich.panel import Panel
    from rich.text import Text

    from ..report.terminal import _short, _table, fmt_ns

    console = Console(file=sys.stdout)
    out = partial(console.print, emoji=False, highlight=False)
    ov = d.overview

    def side(s: str) -> str:
        o = ov[s]
        return f"{o['traces']} trace(s), {o['events']} events, {o['steps']} steps"

    out(f"[bold]polyprof diff[/]: A = {escape(side('a'))}; B = {escape(side('b'))}")
    for s in ("a", "b"):
        if ov[s].get("window"):
            out(f"[bold]analysed window[/] {s.upper()}: {escape(ov[s]['window'])}")
    out(Panel(Group(*(Text(line) for line in d.verdict)), title="Verdict", title_align="left"))
    i = lambda x: f"{int(x)}"  # noqa: E731
    for name, title in (("kernels", "Device activity"), ("ops", "Framework ops (host)"),
                        ("sections", "Sections (host)")):
        df = d.tables[name]
        if not len(df):
            continue
        out(_table(f"{title}, largest change first", df, [
            ("name", "name", _short), ("count_a", "n A", i), ("count_b", "n B", i),
            ("total_ns_a", "total A", fmt_ns), ("total_ns_b", "total B", fmt_ns),
            ("delta_total_ns", "Δ total", _signed_ns), ("rel_change", "Δ%", _rel),
            ("p_value", "p", _p, 2), ("change", "change", None, 1)], top, console.width))
    out(f"[dim]n = count; Δ = B - A; p: {escape(ov['test'])}; change = p < {ov['alpha']:g}[/]")
