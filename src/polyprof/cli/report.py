"""polyprof report: one self-contained HTML file with the timeline, breakdowns and findings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import load_trace


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="write an HTML report (one file, works offline)",
                       description="Per-device timeline overview, time breakdowns, top kernels / ops / "
                                   "sections, steps and findings, in one self-contained HTML file.")
    p.add_argument("file", help="trace file (.polyprof, Kineto/Chrome JSON, XSpace)")
    p.add_argument("-o", "--output", help="HTML file to write (default: FILE's name + .html)")
    from ..store.commands import add_rank_arg

    add_rank_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..report.html import write

    from ..store import commands as store

    trace = store.load_rank(args) if store.handles(args) else load_trace(args.file)
    trace.metadata["title"] = Path(args.file).name
    out = Path(args.output) if args.output else Path(Path(args.file).name.split(".")[0] + ".html")
    write(trace, out)
    print(f"polyprof: wrote {out}", file=sys.stderr)
    return 0
