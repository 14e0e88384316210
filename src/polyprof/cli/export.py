"""polyprof export: write a trace in another format."""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import PolyprofError
from .. import logs
from ..formats.registry import by_name, for_output, writers
from .common import (Subparsers, add_peak_arg, add_window_args, apply_peak, check_output, load_trace,
                     names_directory, output_path, trace_stem, window_from)


#: what ``polyprof export --help`` ends with
EXAMPLES = [
    ("polyprof export train.polyprof -o train.pftrace", "Perfetto protobuf (ui.perfetto.dev, trace_processor)"),
    ("polyprof export trace.xplane.pb -o t.pt.trace.json", "Kineto JSON, for HTA and TensorBoard's torch plugin"),
    ("polyprof export train.polyprof -f tensorboard -o logs/", "an XProf/TensorBoard log directory"),
    ("polyprof export report.sqlite -o events.parquet", "the event table as Parquet (pandas, DuckDB, polars)"),
    ("polyprof export --critical-path train.polyprof -o t.json.gz",
     "Chrome JSON with each step's critical path as a track"),
]


def register(sub: Subparsers) -> None:
    p = sub.add_parser("export", examples=EXAMPLES, help="convert a trace (chrome = Perfetto / chrome://tracing)",
                       description="Read any supported trace and write it in another format: "
                                   + "; ".join(f"{f.name}: {f.summary}" for f in writers())
                                   + ". Without -f, the output name's ending picks the format "
                                   "(else chrome).")
    p.add_argument("file", help="input trace (any format polyprof reads), or a job's directory of "
                                "ranks or store: every rank on the aligned clock, one process per rank (-f kineto "
                                "or tensorboard: a file per rank in the directory -o names; --rank: that rank alone)")
    names = [f.name for f in writers()]
    p.add_argument("-f", "--format", choices=names, default=None, metavar="FORMAT",
                   help=f"output format: {', '.join(names)} (default: from the output name, else chrome)")
    p.add_argument("-o", "--output", required=True,
                   help="output path (ending with /: a directory to write into, the file named as the input "
                        "without its ending: -o out/ -> out/run.json); a file there is replaced only if "
                        "polyprof wrote it (a trace of that format, or polyprof's own)")
    p.add_argument("--force", action="store_true",
                   help="replace a file at the output that polyprof did not write, or write through a symbolic "
                        "link there (both refused by default)")
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


#: formats that HTA, TensorBoard and XProf read one rank (one host) a file: a job's ranks
#: are written a file each, into the directory -o names (docs/ranks.md)
PER_RANK = ("kineto", "tensorboard")
#: a format of one host's profile in one named file: a job is refused (-f tensorboard, or --rank)
ONE_HOST = ("xspace",)


def run(args: argparse.Namespace) -> int:
    from .ranks import is_job, rank_of_job

    apply_peak(args)
    job_path = None
    if is_job(args.file, args.rank) and args.rank is None:  # a store (or directory) of one rank: that rank, as
        from ..ranks.traceset import load_ranks  # it was converted (the merged form's process per rank read back
        # as a device: its kernels on pid "rank 0", the launches matched to none)

        listed = load_ranks(args.file)
        if len(listed) == 1:
            args.rank = listed.ranks[0]
    from .memory_check import check_memory  # (light: imports fits only for a JSON trace or a store)

    into = names_directory(args.output)  # (-o out/: a file named as the input in it, or the directory itself)
    fmt = by_name(args.format) if args.format else by_name("chrome") if into else for_output(args.output)
    if fmt is None:  # (a name of no format's ending: t.json.xz, t.pftrace.gz, out)
        fmt = by_name("chrome")
        logs.kept().warning("%s: no format polyprof writes ends so; writing Chrome JSON (give -f FORMAT, or an "
                            "ending: .json, .json.gz, .pftrace, .xplane.pb, .parquet...)", args.output)
    per_rank = is_job(args.file, args.rank) and args.rank is None and fmt.name in PER_RANK + ONE_HOST
    if into and not fmt.directory and not per_rank:
        args.output = os.path.join(args.output, trace_stem(os.path.abspath(args.file))
                                   + (fmt.suffixes or (".json",))[0])
    # before anything is read: neither an input nor a file polyprof did not write (a
    # directory's files: each as it is written)
    check_output(args.output, [args.file], None if fmt.directory or per_rank else fmt.name, args.force)
    check_memory(f"export:{fmt.name}", [args.file], rank=args.rank)  # (its need is the format's)
    if per_rank:
        return export_ranks(args, fmt.name)
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
        from ..analyze.window import label
        from ..analyze.window_counting import restrict

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
    out = fmt.write(trace, output_path(args.output), force=args.force)
    print(f"polyprof: wrote {out}", file=sys.stderr)
    return 0


def export_ranks(args: argparse.Namespace, fmt: str) -> int:
    """A job's ranks written one file each into the directory ``-o``: ``-f kineto``, a
    Kineto file per rank named as Kineto names them, each with its rank and the world
    size in ``distributedInfo`` (HTA reads the directory as the job's ranks); ``-f
    tensorboard``, one XProf run of a host per rank (``<host>_rank<N>.xplane.pb``)."""
    from ..outfile import write_file  # only a writer's command writes
    from ..ranks.result import stated_job  # the world size a rank's trace states
    from ..ranks.traceset import load_ranks

    out = Path(args.output)
    what = f"a job ({args.file}) exported as {fmt}"
    ts = load_ranks(args.file)  # (its ranks listed, not read: a directory of no traces says so first)
    if fmt in ONE_HOST:
        raise PolyprofError(f"{args.output}: an XSpace file holds one host's profile, not the ranks of {args.file}: "
                            "export them with -f tensorboard -o DIR (a host per rank, as XProf reads a job), or one "
                            "rank with --rank N")
    if getattr(args, "critical_path", False):
        raise PolyprofError(f"--critical-path of {what}: the job's path joins its ranks in one trace; export it "
                            "with -f perfetto or -f chrome, or one rank's path with --rank N")
    if out.suffix and not out.is_dir() and fmt == "kineto":
        raise PolyprofError(f"{args.output}: {what} is a file per rank, as HTA reads a job: -o names the directory "
                            "to write them into (not a file), or --rank N exports one rank to a file")
    if out.exists() and not out.is_dir():
        raise PolyprofError(f"{args.output}: not a directory; {what} writes a file per rank into the directory -o names")
    window = window_from(args, default=None)
    run_name = time.strftime("%Y_%m_%d_%H_%M_%S")  # one XProf run for every rank
    for rank, trace in ts.traces():
        trace = _windowed(args, trace, window)
        if fmt == "kineto":
            from ..writers.kineto import rank_file_name, write  # the format's writer, when it is the one asked

            path = out / rank_file_name(trace, rank)
            check_output(path, [args.file, *(e.path for e in ts.entries if e.path is not None)], fmt, args.force)
            path = output_path(path)
            world = (stated_job(trace.metadata) or {}).get("world_size")  # (a 128-rank job's 2 ranks: 128)
            info = {"rank": rank, "world_size": world if isinstance(world, int) and world > rank else len(ts)}
            write_file(path, partial(write, trace, distributed=info), args.force)
        else:
            from ..writers.xspace import hostnames, write_logdir  # (as above)

            host = next(iter(hostnames(trace)), "") or "host"
            path = write_logdir(trace, out, run=run_name, host=f"{host}_rank{rank}", force=args.force)
        print(f"polyprof: wrote rank {rank}: {path}", file=sys.stderr)
    print(f"polyprof: {len(ts)} rank{'s' if len(ts) != 1 else ''}, a file each, in {out}", file=sys.stderr)
    return 0


def _windowed(args: argparse.Namespace, trace: Any, window: Any) -> Any:
    """One rank's trace over the window of the options, with its derived lines (--derive)."""
    if window is not None:
        from ..analyze.window_counting import restrict

        trace = restrict(trace, window)
    if getattr(args, "derive", False):
        from ..derive import derive

        trace = derive(trace)
    return trace
