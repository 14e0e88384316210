"""The event table as Parquet: for notebooks, DuckDB, polars and Spark, out of core."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow.parquet as pq

from ..trace.core import Trace


def write(trace: Trace, path: str | Path) -> Path:
    """One row per event (see ``Trace.to_arrow``); trace metadata in the file's key/value
    metadata under ``polyprof``."""
    path = Path(path)
    table = trace.to_arrow()
    meta = dict(table.schema.metadata or {})
    meta[b"polyprof"] = orjson.dumps(trace.metadata, default=str, option=orjson.OPT_NON_STR_KEYS)
    pq.write_table(table.replace_schema_metadata(meta), path, compression="zstd")
    return path
