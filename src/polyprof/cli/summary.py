"""polyprof summary: where the time went, as terminal tables (or JSON with --json)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import Subparsers, add_peak_arg, add_window_args, apply_peak, count, load_trace, window_from
from .ranks import add_executor_args, analyze_ranks, is_job


def register(sub: Subparsers) -> None:
    p = sub.add_parser("summary", help="print where the time went in a trace",
                       description="Device time breakdowns, top kernels / ops / sections, steps, launches and "
                                   "findings for any supported trace file.")
    p.add_argument("file", nargs="+", help="trace file (any format polyprof reads) or a store (polyprof "
                                          "convert); several files or a directory: the ranks of one job, side by "
                                          "side on one clock")
    p.add_argument("-n", "--top", type=count, default=15, help="rows per table (default 15)")
    p.add_argument("--json", action="store_true",
                   help="print every table and finding as JSON (for scripts and CI)")
    add_executor_args(p)
    add_window_args(p)
    add_peak_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    apply_peak(args)
    job = is_job(args.file)  # several files, a directory or a store: one job, whatever its ranks are in
    _check_memory(args.file, window_from(args) == "auto")
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


def _check_memory(files: list[str], windows: bool = True) -> None:
    """One line, before reading, where a rank will not fit in memory (ranks/fits.py): a
    Kineto/Chrome JSON file given alone, each rank of a store not summarised window by
    window (with ``windows``: the default steps, ranks/stepwise.py)."""
    from pathlib import Path

    from .ranks import is_store

    if len(files) == 1 and is_store(files[0]):
        from ..ranks import fits  # only for a store or a JSON trace: an XSpace needs no bound
        from ..store.manifest import read_manifest

        root = Path(files[0])
        for r in read_manifest(root)["ranks"]:
            events = int(r.get("events", 0))
            p = None
            if windows and fits.store_rank_bytes(events) > fits.memory_bound():
                from ..ranks.stepwise import by_windows, check_plan  # the windows: only for a rank above the bound

                p = by_windows(root / r["path"], events)
                if p is not None:
                    check_plan(p, f"{root}: rank {r['rank']}")
            if p is None:
                fits.check_store_rank(root, r["rank"], events)
    elif len(files) == 1 and Path(files[0]).is_file():
        from ..formats.detect import detect

        if detect(files[0]) in ("kineto", "chrome-json"):
            from ..ranks import fits  # only for a store or a JSON trace: an XSpace needs no bound

            fits.check_file(files[0])
