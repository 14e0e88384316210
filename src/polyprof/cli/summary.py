"""polyprof summary: where the time went, as terminal tables (or JSON with --json)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..formats.registry import FORMATS
from .common import Subparsers, add_peak_arg, add_window_args, apply_peak, count, load_trace, window_from
from .ranks import add_executor_args, analyze_ranks, is_job


#: what ``polyprof summary --help`` ends with
EXAMPLES = [
    ("polyprof summary train.polyprof", "where the time went: breakdowns, top tables, steps, findings"),
    ("polyprof summary trace.pt.trace.json.gz -n 5", "any format polyprof reads (here Kineto JSON); 5 rows per table"),
    ("polyprof summary logs/", "a directory of one job's rank traces, on one clock"),
    ("polyprof summary --steps 10:20 report.sqlite", "steps 10 to 19 of an Nsight Systems SQLite export"),
    ("polyprof summary --json train.polyprof > s.json", "every table and finding as JSON"),
    ("polyprof summary --window hta trace.json", "the numbers as HTA computes them"),
]


def register(sub: Subparsers) -> None:
    p = sub.add_parser("summary", examples=EXAMPLES, help="print where the time went in a trace",
                       description="Device time breakdowns, top kernels / ops / sections, steps, launches and "
                                   "findings for any supported trace file.",
                       epilog="Formats read, told by their content (the names an unrecognised file's error lists; "
                              "docs/formats.md; other packages' formats: polyprof plugins): "
                              + "; ".join(f"{f.name}: {f.summary}" for f in FORMATS if f.reader) + ".")
    p.add_argument("file", nargs="+", help="trace file (any format polyprof reads) or a store (polyprof "
                                          "convert); several files or a directory: the ranks of one job, side by "
                                          "side on one clock")
    p.add_argument("-n", "--top", type=count, default=15,
                   help="rows per table (default 15; 0: the headline and findings only)")
    p.add_argument("--json", action="store_true",
                   help="print every table and finding as JSON (for scripts and CI)")
    add_executor_args(p)
    add_window_args(p)
    add_peak_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    apply_peak(args)
    job = is_job(args.file)  # several files, a directory or a store: one job, whatever its ranks are in
    from .memory_check import check_memory  # (light: imports fits only for a JSON trace or a store)

    check_memory("summary-json" if args.json else "summary", args.file, windows=window_from(args) == "auto",
                 jobs=getattr(args, "jobs", None), rank_by=getattr(args, "rank_by", "auto"))
    if job:
        report: Any = analyze_ranks(args)  # imports the analyses once ranks are being read
    else:
        from ..report.tables import build
        from ..report.terminal import NOT_SHOWN  # (imported for the render below anyway)

        report = build(load_trace(args.file[0]), window_from(args), leave_out=() if args.json else NOT_SHOWN)
    from ..report.tables import to_json

    if args.json:
        sys.stdout.buffer.write(to_json(report))
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
        return 0
    if job:
        from ..report.ranks_terminal import render_ranks

        render_ranks(report, top=args.top)
        return 0
    from ..report.terminal import render

    render(report, top=args.top)
    return 0

