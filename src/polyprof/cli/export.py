"""polyprof export: write a trace in another format."""

from __future__ import annotations

import argparse
import sys

from ..errors import PolyprofError
from ..formats.registry import by_name, for_output, writers
from .common import (Subparsers, add_peak_arg, add_window_args, apply_peak, load_trace, output_path,
                     refuse_over_inputs, window_from)


def register(sub: Subparsers) -> None:
    p = sub.add_parser("export", help="convert a trace (chrome = Perfetto / chrome://tracing)",
                       description="Read any supported trace and write it in another format: "
                                   + "; ".join(f"{f.name}: {f.summary}" for f in writers())
                                   + ". Without -f, the output name's ending picks the format "
                                   "(else chrome).")
    p.add_argument("file", help="input trace (any format polyprof reads), or a job's directory of "
                                "ranks or store: every rank on the aligned clock, one process per rank (--rank: "
                                "that rank alone)")
    names = [f.name for f in writers()]
    p.add_argument("-f", "--format", choices=names, default=None, metavar="FORMAT",
                   help=f"output format: {', '.join(names)} (default: from the output name, else chrome)")
    p.add_argument("-o", "--output", required=True, help="output path")
    p.add_argument("--force", action="store_true",
                   help="write through a symbolic link at the output path (refused by default)")
    p.add_argument("--derive", action="store_true",
                   help="add the derived lines per device first (Steps, Sections, Framework Ops, ...)")
    p.add_argument("--critical-path", action="store_true",
                   help="add a 'critical path' track: each step's critical path (of a job: through every rank, "
                        "joined at their collectives; docs/analysis.md)")
    add_window_args(p, "the steps to write (default: the whole trace; --steps or --skip-first: only the events "
                       "the analyses of that window count)")
    add_peak_arg(p)  # the device peaks an XSpace export gives XProf's roofline (writers/xprof_costs.py)
    from .ranks import add_rank_arg

    add_rank_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .ranks import is_job, rank_of_job

    apply_peak(args)
    refuse_over_inputs(args.output, [args.file])  # before anything is read
    job_path = None
    from .memory_check import check_memory  # (light: imports fits only for a JSON trace or a store)

    check_memory("export", [args.file], rank=args.rank)
    if is_job(args.file, args.rank) and args.rank is None:
        from ..ranks.processes import one_process_per_rank
        from ..ranks.traceset import load_ranks

        ts = load_ranks(args.file)
        trace = one_process_per_rank(ts.merged())
        if getattr(args, "critical_path", False):  # the ranks joined through their collectives
            job_path = dict(ts.traces())
        print(f"polyprof: {len(ts)} ranks on rank {ts.ranks[0]}'s clock, one process each", file=sys.stderr)
    else:
        if args.rank is not None and not is_job(args.file, args.rank):
            raise PolyprofError(f"--rank {args.rank}: {args.file} is one trace, not the ranks of a job")
        trace = rank_of_job(args.file, args.rank) if is_job(args.file, args.rank) else load_trace(args.file)
    window = window_from(args, default=None)
    path_window: str | None = "auto"  # the path of the steps the summary analyses, on each rank (written whole)
    if window is not None:
        from ..analyze.window import label, restrict

        print(f"polyprof: writing {label(trace, window)}", file=sys.stderr)
        trace = restrict(trace, window)
        path_window = None  # (what is written is the window: its path is all of it)
        if job_path is not None:  # each rank's path over the same steps
            job_path = {r: restrict(t, window) for r, t in job_path.items()}
    elif job_path is not None:
        from ..analyze.window import view

        job_path = {r: view(t, path_window) for r, t in job_path.items()}
    if getattr(args, "derive", False):
        from ..derive import derive

        trace = derive(trace)
    if job_path is not None:
        from ..ranks.critical_path import align
        from ..ranks.critical_path_track import with_job_critical_path

        trace = with_job_critical_path(trace, job_path, align(job_path))
    elif getattr(args, "critical_path", False):
        from ..analyze.critical_path_track import with_critical_path

        trace = with_critical_path(trace, path_window)
    fmt = by_name(args.format) if args.format else (for_output(args.output) or by_name("chrome"))
    out = fmt.write(trace, output_path(args.output), force=args.force)
    print(f"polyprof: wrote {out}", file=sys.stderr)
    return 0
