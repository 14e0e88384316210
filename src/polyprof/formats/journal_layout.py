"""The crash journal's layout (``OUTPUT.partial``), shared by its writer
(collect/journal.py) and its reader (formats/journal.py).

The line ``MAGIC``, then an Arrow IPC stream of record batches of :func:`schema`; the
schema's metadata holds the session header as JSON. Each batch is written with one
plain ``write()`` call (trace/arrow_write.py, no pyarrow), so it is in the kernel's
page cache (and survives the process) as soon as the call returns; a batch cut short
by the kill is dropped by the reader. The reader uses pyarrow (:func:`schema`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from ..trace.arrow_columns import Column

MAGIC = b"POLYPROF-JOURNAL 1\n"
SUFFIX = ".partial"

SECTION, MARK, COUNTER, STEP, THREAD, PROCESS, STRETCH, FIRST_STEP = range(8)
#: sections per record batch: bounds the journal thread's memory and each GIL hold
CHUNK = 1 << 18

#: one row per record; unused fields are null. PROCESS rows: start_ns = time,
#: value = CPU seconds so far, end_ns = RSS bytes, tid = thread count. STRETCH rows (a
#: ``--schedule`` run's active stretches, written as steps pass; the header's ``schedule``
#: holds the plan): start_ns, end_ns (-1 while open), ident = the first step recorded in
#: it, tid = the last so far; a later row with the same start_ns replaces an earlier one.
#: FIRST_STEP rows: start_ns = where step 0 begins (collect/steps.py ``first_start``: the
#: first ``with polyprof.step():`` block's entry, or where a detected first step's work
#: began), written as soon as it is known and again if it moves; the last one holds, and
#: without one step 0 begins at the header's start_ns (plain ``polyprof.step()`` calls)
FIELDS = (("kind", "int8"), ("name", "string"), ("start_ns", "int64"), ("end_ns", "int64"),
          ("value", "float64"), ("ident", "int64"), ("tid", "int64"),
          ("stats", "string"))  # stats: a JSON object of a section's keyword stats

_SCHEMA: "pa.Schema | None" = None


def schema() -> "pa.Schema":
    """:data:`FIELDS` as a pyarrow schema, for the reader (built on first use: the
    writer does not import pyarrow)."""
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        from ..trace.arrow_arrays import pyarrow_type  # with pyarrow: only when the schema is asked for

        _SCHEMA = pa.schema([(n, pyarrow_type(t)) for n, t in FIELDS])
    return _SCHEMA


def path_for(output: str | Path) -> Path:
    """Where the journal of a session writing ``output`` lives."""
    return Path(str(output) + SUFFIX)


def columns(kind: int, n: int, **values: Any) -> list[Column]:
    """``n`` records of one kind as the journal's columns; the fields not given are null."""
    import numpy as np

    from ..trace.arrow_columns import column, nulls  # with NumPy: a session's start stays without it

    return [column(np.full(n, kind, np.int8)),
            *(column(values[f], t) if f in values else nulls(n, t) for f, t in FIELDS[1:])]


def batch(kind: int, n: int, **values: Any) -> "pa.RecordBatch":
    """:func:`columns` as a pyarrow record batch."""
    import pyarrow as pa

    from ..trace.arrow_arrays import from_column  # with pyarrow, as above

    return pa.RecordBatch.from_arrays([from_column(c) for c in columns(kind, n, **values)], schema=schema())
