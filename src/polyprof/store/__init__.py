"""The on-disk trace store: Parquet partitioned by rank, read one rank at a time.

    polyprof.store.convert(["rank0.json.gz", "rank1.json.gz"], "job.store")
    st = polyprof.store.Store("job.store")
    trace = st.load(0)                      # one rank back as a Trace
    st.sql("SELECT rank, count(*) FROM events GROUP BY rank")   # DuckDB, memory-limited
    polyprof.store.summary(st, dask="local")                     # per-rank tables + rank column

See docs/store.md.
"""

from .analyze import StoreReport, summary
from .convert import convert
from .manifest import SCHEMA_VERSION, is_store
from .store import Store, open_store

__all__ = ["convert", "Store", "open_store", "summary", "StoreReport", "is_store", "SCHEMA_VERSION"]
