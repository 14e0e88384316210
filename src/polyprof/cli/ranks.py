"""What the commands that take the ranks of a job share: which inputs mean several
ranks, and the per-rank analysis on the executor the options name. (Not a command.)"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


def is_many(files: list[str]) -> bool:
    """Several files, or one directory that is not a store: the ranks of a job."""
    from ..store.manifest import is_store

    return len(files) > 1 or (len(files) == 1 and Path(files[0]).is_dir() and not is_store(files[0]))


def analyze_ranks(args: argparse.Namespace) -> Any:
    """``load_ranks(args.file).analyze(...)`` on ``--dask`` / ``-j`` (default: one worker
    process per core)."""
    from ..ranks.traceset import default_executor, load_ranks
    from ..store.executor import executor
    from .common import window_from

    ts = load_ranks(args.file)
    dask = getattr(args, "dask", None)
    if not dask:
        ts.prefetch()  # reading ranks while the analyses import (ranks/prefetch.py)
    window = window_from(args)
    if not dask:  # the default pool (forked, or from a fork server, preloaded); -j 1: in this process
        ex = default_executor(args.jobs or min(len(ts), os.cpu_count() or 1))
        try:
            return ts.analyze(ex, window=window)
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
    with executor(dask, args.jobs or 1) as ex:
        return ts.analyze(ex if ex is not None else "serial", window=window)
