"""polyprof convert: traces (one per rank) into an on-disk store for jobs bigger than memory."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    from ..store.commands import add_executor_args

    p = sub.add_parser("convert", help="convert traces (one per rank) into a store (Parquet per rank)",
                       description="Read traces of any supported format, one per rank, and write a store: "
                                   "Parquet files per rank, events sorted by time, and a manifest. "
                                   "summary, sql, report and export accept the store; memory stays bounded "
                                   "by one rank per worker. See docs/store.md.")
    p.add_argument("inputs", nargs="+", metavar="IN", help="trace files (Kineto/Chrome JSON, XSpace, .polyprof)")
    p.add_argument("-o", "--output", required=True, help="the store directory to write")
    p.add_argument("--rank-by", choices=("auto", "trace", "order"), default="auto",
                   help="rank numbers from the traces (Kineto distributedInfo), from the order of the inputs, "
                        "or auto: the traces' when every input names a distinct rank (default)")
    p.add_argument("--chunk-rows", type=int, default=None, help="events per Parquet row group (default 262144)")
    p.add_argument("--overwrite", action="store_true", help="replace a store already at -o")
    add_executor_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..store.convert import convert
    from ..store.rankfiles import CHUNK_ROWS

    out = convert(args.inputs, args.output, dask=args.dask, jobs=args.jobs or 1,
                  chunk_rows=args.chunk_rows or CHUNK_ROWS, rank_by=args.rank_by, overwrite=args.overwrite)
    print(f"polyprof: wrote store {out} ({len(args.inputs)} ranks)", file=sys.stderr)
    return 0
