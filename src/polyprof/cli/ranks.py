"""What the commands that take the ranks of a job share: their options, which inputs
are a job (several files, a directory, a store), the job's report on the executor the
options name, and one rank of a job. (Not a command.)"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING
from .common import positive

if TYPE_CHECKING:
    from ..ranks.report import JobReport
    from ..trace.core import Trace

log = logging.getLogger("polyprof")


def add_executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dask", metavar="SPEC", type=executor_spec,
                   help="run the per-rank work on Dask: 'local' (a LocalCluster for this command) or a "
                        "scheduler address (tcp://host:8786); needs polyprof[dask]")
    p.add_argument("-j", "--jobs", type=positive, default=None,
                   help="ranks worked on at once: worker processes (default: one per core; 1 for a store, and "
                        "for trace files too small to be worth forking for, about 2 MiB in all on two cores; "
                        "-j 1: one rank in memory at a time, in this process); with --dask local, the number of "
                        "Dask workers (default 2)")
    add_rank_by_arg(p)


def executor_spec(text: str) -> str:
    """argparse type of ``--dask``: an executor ``ranks/executor.py`` makes, checked as the
    options are read (a single trace runs on none and would not say)."""
    from ..ranks.executor import ExecutorError, check_spec  # (only where --dask is given)

    try:
        check_spec(text)
    except ExecutorError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_rank_by_arg(p: argparse.ArgumentParser) -> None:
    """``--rank-by``: how a job's ranks are numbered (``load_ranks(..., rank_by=)``), for
    every command that reads a job (docs/ranks.md)."""
    p.add_argument("--rank-by", choices=("auto", "trace", "order"), default="auto",
                   help="rank numbers from the traces (Kineto distributedInfo), from the order of the inputs "
                        "(a directory's: its file names in order), or auto (default): the traces', else the "
                        "numbers in the file names, else the order")


def add_rank_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rank", type=int, help="with the ranks of a job (a store, a directory): the rank to use "
                                            "(default: the first)")


def is_store(path: str | Path) -> bool:
    if not Path(path).is_dir():  # a store is a directory: a trace file needs not the store's module
        return False
    from ..store.manifest import is_store as check  # no pyarrow: the CLI asks this of every input

    return check(path)


def is_job(files: list[str] | str, rank: int | None = None) -> bool:
    """Several files, a directory or a store: the ranks of a job. A directory holding one
    trace is that trace, unless a ``--rank`` is asked of it (a job of one rank)."""
    if isinstance(files, str):
        files = [files]
    if len(files) == 1 and Path(files[0]).is_dir():
        from ..formats.nsys_csv import runs_in as nsys_runs  # one run's nsys stats CSVs: one trace
        from ..formats.rocprof_csv import runs_in  # one process's rocprofv3 CSVs: one trace

        from ..ranks.sources import one_source_in  # a directory's listing: only for a directory

        runs = runs_in(Path(files[0])) or nsys_runs(Path(files[0]))
        return len(runs) != 1 if runs else rank is not None or one_source_in(files[0]) is None
    return len(files) > 1


def analyze_ranks(args: argparse.Namespace) -> JobReport:
    """The job report of ``args.file`` (``load_ranks(...).analyze``) on ``--dask`` / ``-j``
    (default: local processes, one per core), over the window of the options."""
    from ..ranks.traceset import load_ranks
    from .common import window_from

    ts = load_ranks(args.file, rank_by=getattr(args, "rank_by", "auto"))
    dask = getattr(args, "dask", None)
    ts.prefetch(dask)  # reading ranks while the analyses import (ranks/executor.py)
    return ts.analyze(dask, window=window_from(args), jobs=getattr(args, "jobs", None))


def rank_of_job(path: str, rank: int | None) -> Trace:
    """The Trace of ``rank`` (default: the first, with a warning when there are more) of
    the job at ``path`` (a store or a directory of ranks)."""
    from ..ranks.traceset import load_ranks

    ts = load_ranks(path)
    if rank is None:
        rank = ts.ranks[0]
        if len(ts) > 1:
            log.warning("%s holds %d ranks; using rank %d (choose with --rank)", path, len(ts), rank)
    return ts.load(rank)
