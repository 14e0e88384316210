"""polyprof report: one self-contained HTML file with the timeline, breakdowns and findings."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import PolyprofError
from .common import (HTML, Subparsers, add_peak_arg, add_window_args, apply_peak, check_output, load_trace,
                     names_directory, output_path, trace_stem, window_from)
from ..trace import metadata_keys as mkeys
from .ranks import add_executor_args, add_rank_arg, analyze_ranks, is_job, is_store


#: events from which the report shows its phases on a terminal (about 2 s of work here)
BIG_TRACE = 300_000


#: what ``polyprof report --help`` ends with
EXAMPLES = [
    ("polyprof report train.polyprof -o train.html", "one HTML file: timeline, breakdowns, tables, findings"),
    ("polyprof report logs/ -o job.html", "a job's ranks on one page"),
]


def register(sub: Subparsers) -> None:
    p = sub.add_parser("report", examples=EXAMPLES, help="write an HTML report (one file, works offline)",
                       description="Per-device timeline overview, time breakdowns, top kernels / ops / "
                                   "sections, steps and findings, in one self-contained HTML file.")
    p.add_argument("file", nargs="+", help="trace file (any format polyprof reads) or a store; several "
                                          "files or a directory: the ranks of one job side by side")
    p.add_argument("-o", "--output",
                   help="HTML file to write (default: in this directory, FILE's name without its trace ending + "
                        ".html: traces/h_1.17.pt.trace.json.gz -> h_1.17.html; several files: ranks.html; -o DIR/: "
                        "that name in DIR); a file there is replaced only if it is a polyprof "
                        "page")
    p.add_argument("--force", action="store_true",
                   help="replace a file at the output that is not a polyprof page, or write through a symbolic "
                        "link there (both refused by default)")
    add_rank_arg(p)
    add_executor_args(p)
    add_window_args(p)
    add_peak_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    apply_peak(args)
    out = output_of(args)
    check_output(out, args.file, HTML, args.force)  # before anything is read
    ranks = parts = marks = highlight = None
    window = window_from(args)  # the summary's: the tables' and the timeline's critical path
    if is_job(args.file, args.rank):  # several files, a directory or a store: the same page for the same ranks
        from ..ranks.traceset import load_ranks  # not at import: the parser of every command loads this module

        _above_bound(args.file, args.rank)
        if not is_store(args.file[0]):  # a store's ranks: _above_bound
            from .memory_check import check_memory  # (light: imports fits only for JSON traces)

            check_memory("report", args.file, rank=args.rank, jobs=getattr(args, "jobs", None), rank_by=args.rank_by)

        ranks = analyze_ranks(args)
        from ..report.timeline_job import collective_names, job_parts  # after the ranks, as report.html below

        ref = ranks.ranks[0] if args.rank is None else args.rank
        if ref not in ranks.ranks:
            raise PolyprofError(f"--rank {ref}: the job has ranks {ranks.ranks}")
        ts = load_ranks(args.file, rank_by=args.rank_by)
        trace = ts.load(ref)
        parts, marks = job_parts(ranks, ts.load, [(ref, trace)], window)
        highlight = collective_names(ranks)
        trace.metadata[mkeys.TITLE] = f"{len(ranks.ranks)} ranks (rank {ref} in detail)"
    else:
        args.file = args.file[0]
        if args.rank is not None:
            raise PolyprofError(f"--rank {args.rank}: {args.file} is one trace, not the ranks of a job")
        from .memory_check import check_memory  # (light: imports fits only for a JSON trace)

        check_memory("report", [args.file])
        trace = load_trace(args.file)
        trace.metadata[mkeys.TITLE] = Path(args.file).name
    from ..report.html import write  # after the ranks: they are read while it imports
    from ..report.tables import build

    from ..progress import TaskBar  # with the report's modules

    out = output_path(out)
    # analyses, timeline, page: a bar where that takes seconds (a job, a big trace)
    phases = 3 if parts or trace.n_events >= BIG_TRACE else 1
    with TaskBar(phases, f"report {out.name}") as bar:
        report = build(trace, window)
        bar.advance()
        write(trace, out, report=report, ranks=ranks, force=args.force, parts=parts, marks=marks,
              highlight=highlight, step=bar.advance)
        bar.advance()
    print(f"polyprof: wrote {out}", file=sys.stderr)
    return 0


def output_of(args: argparse.Namespace) -> Path:
    """The page to write: ``-o``; else, in this directory (in ``-o``'s when it ends with
    a separator), the trace's name without its trace ending (``cli/common.trace_stem``:
    the files of one process, ``host_pid.<ms>.pt.trace.json``, keep their pages apart)
    + ``.html``, ``ranks.html`` for several files."""
    if args.output and not names_directory(args.output):
        return Path(args.output)
    name = "ranks" if len(args.file) != 1 else trace_stem(os.path.abspath(args.file[0])) or "report"
    return Path(args.output or ".") / f"{name}.html"


def _above_bound(files: list[str], rank: int | None) -> None:
    """A store's rank shown in detail above the memory bound (ranks/fits.py): said in the
    log (the page shows the rank's events, so the rank is read whole, while its tables
    are summarised window by window as by ``summary``), and refused in one line where it
    would not fit."""
    if len(files) != 1 or not is_store(files[0]):
        return
    import logging

    from ..ranks import fits  # with the ranks, as load_ranks above
    from ..store.manifest import read_manifest  # the same

    root = Path(files[0])
    entries = sorted(read_manifest(root)["ranks"], key=lambda r: r["rank"])
    entry = next((r for r in entries if r["rank"] == rank), entries[0] if entries and rank is None else None)
    if entry is None:
        return
    events = int(entry.get("events", 0))
    if fits.store_rank_bytes(events) > fits.memory_bound():
        logging.getLogger("polyprof").warning(
            "%s: rank %d (%s events) is above the memory bound (%d MiB): the report shows its events, so it "
            "reads the rank whole (about %.1f GiB); polyprof summary %s keeps to the bound", root, entry["rank"],
            f"{events:,}", fits.memory_bound() >> 20, fits.store_need(events, "report") / 2**30, root)
        fits.check_store_rank(root, entry["rank"], events, "report")
