"""polyprof export: write a trace in another format."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import load_trace, output_path

FORMATS = {
    "chrome": "polyprof.formats.chrome:write",
    "polyprof": "polyprof.formats.native:save",
    "xspace": "polyprof.formats.xspace:write",  # .xplane.pb (TensorBoard / XProf)
    "tensorboard": "polyprof.formats.xspace:write_logdir",  # -o is a log directory
    "kineto": "polyprof.formats.kineto_writer:write",
    "parquet": "polyprof.formats.parquet:write",  # the event table, for DuckDB / pandas / polars
    "perfetto": "polyprof.formats.perfetto:write",  # Perfetto protobuf, streamed (no 2 GB JSON limit)
}


def register(sub: Any) -> None:
    p = sub.add_parser("export", help="convert a trace (chrome = Perfetto / chrome://tracing)",
                       description="Read any supported trace and write it in another format. "
                                   "A .gz output name gzips Chrome JSON.")
    p.add_argument("file", help="input trace (.polyprof, Kineto/Chrome JSON, XSpace)")
    p.add_argument("-f", "--format", choices=sorted(FORMATS), default="chrome")
    p.add_argument("-o", "--output", required=True, help="output path")
    p.add_argument("--derive", action="store_true",
                   help="add the derived lines per device first (Steps, Sections, Framework Ops, ...)")
    from ..store.commands import add_rank_arg

    add_rank_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import importlib

    from ..store import commands as store

    trace = store.load_rank(args) if store.handles(args) else load_trace(args.file)
    if getattr(args, "derive", False):
        from ..derive import derive

        trace = derive(trace)
    mod, fn = FORMATS[args.format].split(":")
    out = getattr(importlib.import_module(mod), fn)(trace, output_path(args.output))
    print(f"polyprof: wrote {out or args.output}", file=sys.stderr)
    return 0
