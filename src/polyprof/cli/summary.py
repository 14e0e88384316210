"""polyprof summary: where the time went, as terminal tables."""

from __future__ import annotations

import argparse
from typing import Any

from .common import load_trace, print_summary


def register(sub: Any) -> None:
    p = sub.add_parser("summary", help="print where the time went in a trace",
                       description="Top sections and events by time, for any supported trace file.")
    p.add_argument("file", help="trace file (.polyprof, Kineto/Chrome JSON, XSpace)")
    p.add_argument("-n", "--top", type=int, default=15, help="rows per table (default 15)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print_summary(load_trace(args.file), top=args.top)
    return 0
