"""polyprof demo: profile a bundled workload and show the summary."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

from ..collect.output import shown_path, written_line
from ..collect.session import Session
from .common import Subparsers, add_plugin_args, plugin_list, print_summary


#: bundled workloads; ``auto`` takes the first whose needs are met here, so a newcomer
#: with an OpenCL device sees device tracks, and everyone else still sees a profile
WORKLOADS = {
    "opencl": "polyprof.demo.opencl_pipeline",   # image pipeline on an OpenCL device
    "threads": "polyprof.demo.threaded_pipeline",  # loader thread + training loop on the CPU
}


def register(sub: Subparsers) -> None:
    p = sub.add_parser("demo", help="profile a bundled workload and print the summary",
                       description="Profile a bundled workload and print the summary. "
                                   "opencl: an image pipeline (upload, blur, gradient, reduce, "
                                   "download) on the first OpenCL device; threads: a loader thread "
                                   "feeding a NumPy training loop. auto picks opencl when pyopencl "
                                   "and a device are present, else threads.")
    p.add_argument("-o", "--output", default="polyprof-demo.polyprof",
                   help="trace file to write (default: polyprof-demo.polyprof)")
    p.add_argument("-w", "--workload", choices=["auto", *WORKLOADS], default="auto",
                   help="which workload to profile (default: auto)")
    add_plugin_args(p)
    p.set_defaults(func=run)


def pick(workload: str) -> tuple[str, ModuleType]:
    """The workload's name and module; ``auto`` falls back past workloads that can't run here."""
    names = list(WORKLOADS) if workload == "auto" else [workload]
    errors = []
    for name in names:
        try:
            return name, importlib.import_module(WORKLOADS[name])
        except ImportError as e:
            errors.append(f"{name}: {e}")
            if workload == "auto":  # say why in one line, then fall back to the next workload
                print(f"polyprof demo: the {name} workload can't run here ({e})", file=sys.stderr)
    from ..errors import PolyprofError

    raise PolyprofError("no demo workload can run here (" + "; ".join(errors) + ")")


def run(args: argparse.Namespace) -> int:
    name, mod = pick(args.workload)
    print(f"polyprof demo: profiling the {name} workload ({mod.__name__}; -w to choose)", file=sys.stderr)
    with Session(plugin_list(args), output=Path(args.output), collect_timeout=args.collect_timeout or 30.0) as s:
        mod.main([])
    trace = s.stop()
    print_summary(trace)
    line = written_line(s.written, trace.n_events)  # where it really went (a full disk: /tmp, said so)
    if s.written is None or s.written.path is None:
        print(line, file=sys.stderr)
        return 1
    out = shown_path(s.written.path)
    print(f"{line}; try `polyprof report {out} -o demo.html`, or "
          f"`polyprof export {out} -f chrome -o demo.json.gz` and open it in Perfetto", file=sys.stderr)
    return 0
