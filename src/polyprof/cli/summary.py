"""polyprof summary: where the time went, as terminal tables (or JSON with --json)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import load_trace


def register(sub: Any) -> None:
    p = sub.add_parser("summary", help="print where the time went in a trace",
                       description="Device time breakdowns, top kernels / ops / sections, steps, launches and "
                                   "findings for any supported trace file.")
    p.add_argument("file", help="trace file (.polyprof, Kineto/Chrome JSON, XSpace) or a store (polyprof convert)")
    p.add_argument("-n", "--top", type=int, default=15, help="rows per table (default 15)")
    p.add_argument("--json", action="store_true",
                   help="print every table and finding as JSON (for scripts and CI)")
    from ..store.commands import add_executor_args

    add_executor_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..store import commands as store

    if store.handles(args):
        return store.summary(args)
    from ..report.tables import build, to_json

    report = build(load_trace(args.file))
    if args.json:
        sys.stdout.buffer.write(to_json(report))
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
        return 0
    from ..report.terminal import render

    render(report, top=args.top)
    return 0
