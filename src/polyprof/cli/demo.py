"""polyprof demo: profile a bundled workload and show the summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..collect.session import Session
from .common import add_plugin_args, plugin_list, print_summary

#: bundled workloads, run in this order; a module whose needs are missing is skipped
WORKLOADS = ["polyprof.demo.threaded_pipeline", "polyprof.demo.opencl_pipeline"]


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="profile a bundled workload and print the summary")
    p.add_argument("-o", "--output", default="polyprof-demo.polyprof", help="trace file to write")
    add_plugin_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import importlib

    with Session(plugin_list(args), output=Path(args.output), collect_timeout=args.collect_timeout) as s:
        for name in WORKLOADS:
            try:
                mod = importlib.import_module(name)
            except ImportError as e:
                print(f"polyprof demo: skipping {name}: {e}", file=sys.stderr)
                continue
            mod.main([])
    print_summary(s.trace)
    print(f"polyprof: trace written to {args.output}; try `polyprof export {args.output} -f chrome "
          f"-o demo.json.gz` and open it in Perfetto", file=sys.stderr)
    return 0
