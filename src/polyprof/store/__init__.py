"""The on-disk trace store: Parquet partitioned by rank, read one rank at a time, and
SQL over every rank. The format only: which traces go in, and where the per-rank work
runs, is the job's (``polyprof.load_ranks(...).convert(STORE)``; docs/store.md).

    st = polyprof.store.Store("job.store")
    trace = st.load(0)                      # one rank back as a Trace, as it was written
    st.sql("SELECT rank, count(*) FROM events GROUP BY rank")   # DuckDB, memory-limited
"""

from __future__ import annotations

from .._lazy import lazy_names

# names -> the module that defines them, imported on first use (pyarrow is not needed
# to tell a store from a trace file)
_LAZY = {"SCHEMA_VERSION": "manifest", "is_store": "manifest", "Store": "store", "open_store": "store",
         "read_rank": "rankfiles", "write_rank": "rankfiles"}

__all__ = sorted(_LAZY)

__getattr__ = lazy_names(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
