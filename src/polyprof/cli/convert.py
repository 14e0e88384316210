"""polyprof convert: traces (one per rank) into an on-disk store for jobs bigger than memory."""

from __future__ import annotations

import argparse
import sys

from .ranks import add_executor_args
from .common import Subparsers, positive


#: what ``polyprof convert --help`` ends with
EXAMPLES = [
    ("polyprof convert logs/*.json -o job.store",
     "one job's rank traces into a store (Parquet per rank, bounded memory)"),
    ("polyprof summary job.store", "then summary, report, sql and export read the store"),
]


def register(sub: Subparsers) -> None:
    p = sub.add_parser("convert", examples=EXAMPLES,
                       help="convert traces (one per rank) into a store (Parquet per rank)",
                       description="Read traces of any supported format, one per rank, and write a store: "
                                   "Parquet files per rank, events sorted by time (within each row group), and a "
                                   "manifest. summary, sql, report and export accept the store. Kineto/Chrome "
                                   "JSON is streamed in chunks of events (memory: a chunk, whatever the rank's "
                                   "size); other inputs are bounded by one rank per worker. See docs/store.md.")
    p.add_argument("inputs", nargs="+", metavar="IN",
                   help="the ranks: trace files (any format polyprof reads), a directory of them, or a store")
    p.add_argument("-o", "--output", required=True, help="the store directory to write")
    p.add_argument("--chunk-rows", type=positive, default=None,
                   help="events per Parquet row group; Kineto/Chrome JSON is streamed a chunk of this many events "
                        "at a time, a row group each (default 65536; memory about 1 KB per event of a chunk), "
                        "other inputs are read whole (default 262144)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a store already at -o (the new store is built beside it and swapped in when "
                        "complete: a failed convert leaves the old one as it was; room for both is needed)")
    add_executor_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..ranks.traceset import load_ranks

    from ..store.writer import check_inputs  # with load_ranks: the command's own imports, when it runs

    check_inputs(Path(args.output), args.inputs)  # before anything is read
    ts = load_ranks(args.inputs, rank_by=args.rank_by)
    out = ts.convert(args.output, args.dask, jobs=args.jobs or 1, chunk_rows=args.chunk_rows,
                     overwrite=args.overwrite)
    print(f"polyprof: wrote store {out} ({len(ts)} rank{'s' if len(ts) != 1 else ''})", file=sys.stderr)
    return 0
