"""rocprof (v1)'s ``results.json``: the exact times from the args.

rocprof v1 writes each event's ``ts`` and ``dur`` as whole µs (text, truncated), and the
exact interval in the args: ``BeginNs`` and ``EndNs`` (ns on the same clock; ``ts`` is
``BeginNs`` truncated to the µs). A kernel of 5,280 ns reads as 5 µs from ``ts``/``dur``.
When the trace is rocprof v1's (:func:`is_rocprof_v1`: its process names, cheap), the
events whose ``BeginNs`` falls in their ``ts``'s µs take ``BeginNs`` and ``EndNs``
(:func:`exact_times`, after the Trace is built: torch's traces never pay for it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...trace.core import Trace
from .numbers import int_values

if TYPE_CHECKING:
    from .collector import _Collector

#: the processes rocprof v1 names (its host API lanes, its copy lane)
_HOST_LANES = ("CPU HIP API", "HSA API", "CPU HSA API", "KFD API")


def is_rocprof_v1(col: "_Collector") -> bool:
    """Whether the trace is rocprof v1's: a process named as its API lanes, or ``COPY``
    beside ``GPU<n>`` processes."""
    names = {n for info in col.process.values() if isinstance(n := info.get("process_name"), str)}
    if any(n in names for n in _HOST_LANES):
        return True
    return "COPY" in names and any(isinstance(n, str) and n.startswith("GPU") and n[3:].isdigit() for n in names)


def exact_times(trace: Trace, base: int) -> int:
    """Set each event's start and duration from its ``BeginNs``/``EndNs`` where they
    agree with its ``ts`` (to the µs) and end after they begin; ``base``: the ns the
    reader added to every ``ts``. Returns how many events were set."""
    begin, end = trace.stats.get("BeginNs"), trace.stats.get("EndNs")
    if begin is None or end is None or not len(begin.rows):
        return 0
    rows = begin.rows
    has_end, end_vals = end.lookup(rows)
    rows, b = rows[has_end], int_values(begin.values[has_end])
    e = int_values(end_vals)
    ev = trace.events
    us = (ev["start_ns"][rows] - base) // 1000
    ok = (b >= 0) & (e >= b) & (b // 1000 == us)
    rows, b, e = rows[ok], b[ok], e[ok]
    ev["start_ns"][rows] = b + base
    ev["dur_ns"][rows] = e - b
    return len(rows)
