"""The crash journal's layout (``OUTPUT.partial``), shared by its writer
(collect/journal.py) and its reader (formats/journal.py).

The line ``MAGIC``, then an Arrow IPC stream of record batches of :func:`schema`; the
schema's metadata holds the session header as JSON. Each batch is written with plain
``write()`` calls, so it is in the kernel's page cache (and survives the process) as
soon as the call returns; a batch cut short by the kill is dropped by the reader.
pyarrow is imported on first use only (``import polyprof`` stays light).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

MAGIC = b"POLYPROF-JOURNAL 1\n"
SUFFIX = ".partial"

SECTION, MARK, COUNTER, STEP, THREAD, PROCESS = range(6)
#: sections per record batch: bounds the journal thread's memory and each GIL hold
CHUNK = 1 << 18

_SCHEMA: "pa.Schema | None" = None


def schema() -> "pa.Schema":
    """One row per record; unused fields are null. PROCESS rows: start_ns = time,
    value = CPU seconds so far, end_ns = RSS bytes, tid = thread count.

    Built on first use: pyarrow is imported only by sessions that write a journal
    (``import polyprof`` stays light)."""
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        _SCHEMA = pa.schema([
            ("kind", pa.int8()),
            ("name", pa.string()),
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("value", pa.float64()),
            ("ident", pa.int64()),
            ("tid", pa.int64()),
            ("stats", pa.string()),  # JSON object of a section's keyword stats
        ])
    return _SCHEMA


def path_for(output: str | Path) -> Path:
    """Where the journal of a session writing ``output`` lives."""
    return Path(str(output) + SUFFIX)


def batch(kind: int, n: int, **columns: Any) -> "pa.RecordBatch":
    """``n`` records of one kind; the columns not given are null."""
    import numpy as np
    import pyarrow as pa

    from .arrow_arrays import array  # pyarrow.array would import pandas

    sch = schema()
    arrays = [array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type)
              for f in sch if f.name != "kind"]
    return pa.RecordBatch.from_arrays([array(np.full(n, kind, np.int8), pa.int8()), *arrays], schema=sch)
