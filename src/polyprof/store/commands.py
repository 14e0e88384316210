"""What ``summary``, ``sql``, ``report``, ``export`` and ``diff`` do when given a store
instead of a trace file; the commands call in here when their input is a store directory."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Iterator


log = logging.getLogger("polyprof")


def add_executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dask", metavar="SPEC",
                   help="run the per-rank work on Dask: 'local' (a LocalCluster for this command) or a "
                        "scheduler address (tcp://host:8786); needs polyprof[dask]")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="ranks worked on at once: worker processes (trace files: default one per core; a store: "
                        "default 1, one rank in memory at a time); with --dask local, the number of Dask "
                        "workers (default 2)")


def add_rank_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rank", type=int, help="with a store: the rank to use (default: the first)")


def is_store(path: Any) -> bool:
    """store.manifest.is_store, imported on use: the CLI imports this module to build
    its parser, and the manifest's module imports pyarrow (`polyprof run` need not)."""
    from .manifest import is_store as check

    return check(path)


def handles(args: argparse.Namespace) -> bool:
    return is_store(args.file)


def summary(args: argparse.Namespace) -> int:
    from .analyze import rank_rows, write_json

    from ..cli.common import window_from

    dask, jobs = getattr(args, "dask", None), getattr(args, "jobs", None) or 1
    window = window_from(args)
    if args.json:
        write_json(args.file, sys.stdout.buffer, dask=dask, jobs=jobs, window=window)
        sys.stdout.flush()
        return 0
    overview, kernels, job, findings = rank_rows(args.file, dask=dask, jobs=jobs, window=window)
    _render(str(args.file), overview, kernels, args.top, job, findings)
    return 0


def _render(root: str, overview: Any, kernels: Any, top: int, job: dict[str, Any], findings: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..analyze.findings import Finding
    from ..report.ranks_terminal import render_job
    from ..report.terminal import fmt_ns, fmt_pct

    con = Console(file=sys.stdout)
    render_job(job, [Finding(**{k: v for k, v in f.items() if k != "rank"}) for f in findings], top, con)
    t = Table(title=f"polyprof summary of store {root}: {len(overview)} ranks", title_justify="left")
    for c in ("rank", "events", "trace span", "analysed span", "steps", "compute (mean over streams)", "findings"):
        t.add_column(c, justify="right")
    for r in overview.itertuples(index=False):
        t.add_row(str(r.rank), str(r.events), fmt_ns(r.trace_span_ns), fmt_ns(r.analysed_span_ns), str(r.steps),
                  fmt_pct(r.compute_pct), str(r.findings))
    con.print(t, highlight=False, emoji=False)
    if len(kernels):
        k = Table(title="Top kernels across ranks", title_justify="left")
        for c in ("name", "ranks", "count", "total", "min rank", "max rank"):
            k.add_column(c, justify="left" if c == "name" else "right", overflow="ellipsis", no_wrap=True,
                         max_width=60 if c == "name" else None)
        for r in kernels.head(top).itertuples(index=False):
            k.add_row(str(r.name), str(r.ranks), str(r.count), fmt_ns(r.total_ns), fmt_ns(r.min_rank_ns),
                      fmt_ns(r.max_rank_ns))
        con.print(k, highlight=False, emoji=False)
    print("polyprof: per-rank tables with a rank column: polyprof summary STORE --json", file=sys.stderr)


def sql(args: argparse.Namespace) -> Any:
    from .store import Store

    return Store(args.file).sql(args.query, memory_limit=getattr(args, "memory_limit", None) or "1GB",
                                allow_external=getattr(args, "allow_external", False))


def store_traces(path: Any) -> Iterator[Any] | None:
    """The ranks of the store at ``path`` as Traces, one in memory at a time (None: not a store)."""
    if not is_store(path):
        return None
    from .store import Store

    st = Store(path)  # checks the manifest now, before the first rank is needed
    return (trace for _, trace in st.traces())


def load_rank(args: argparse.Namespace) -> Any:
    """The Trace of ``--rank`` (default: the first rank) of the store ``args.file``."""
    from .store import Store

    st = Store(args.file)
    rank = args.rank if getattr(args, "rank", None) is not None else st.ranks[0]
    if getattr(args, "rank", None) is None and len(st.ranks) > 1:
        log.warning("%s holds %d ranks; using rank %d (choose with --rank)", args.file, len(st.ranks), rank)
    return st.load(rank)
