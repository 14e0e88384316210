"""The on-disk trace store: Parquet partitioned by rank, read one rank at a time.

    polyprof.store.convert(["rank0.json.gz", "rank1.json.gz"], "job.store")
    st = polyprof.store.Store("job.store")
    trace = st.load(0)                      # one rank back as a Trace
    st.sql("SELECT rank, count(*) FROM events GROUP BY rank")   # DuckDB, memory-limited
    polyprof.store.summary(st, dask="local")                     # per-rank tables + rank column

See docs/store.md.
"""

from __future__ import annotations

from .._lazy import lazy_names

# names -> the module that defines them, imported on first use: the CLI imports
# polyprof.store.commands to build its parser, and `polyprof run` must not pay for
# pandas and pyarrow (store.analyze, store.store) on every run
_LAZY = {"StoreReport": "analyze", "summary": "analyze", "convert": "convert", "SCHEMA_VERSION": "manifest",
         "is_store": "manifest", "Store": "store", "open_store": "store"}

__all__ = ["convert", "Store", "open_store", "summary", "StoreReport", "is_store", "SCHEMA_VERSION"]


__getattr__ = lazy_names(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
