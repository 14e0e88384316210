"""The "Idle time by cause" table as the terminal and the HTML report show it, and the
notes under it.

Under ``--window hta`` the table is HTA 0.5's (``analyze/breakdown.py``, ``_hta_idle``):
a stream's idle is the sum of the gaps between its consecutive activities, and where two
activities overlap that gap is negative and HTA adds it, as kernel-wait. Its per-device
row adds up the streams' idle (HTA charts them stacked), which is not the time when no
stream of the device is busy. ``summary --json`` keeps HTA's values; the terminal and
the HTML report (``report/html.py``) show no time or share below zero: a negative part
is shown as 0 and a note says what HTA's figure took off where, and the per-device row
is labelled ``(sum of streams)`` with the device's own idle (the Device time table's
``(all streams)`` row) in a note.
"""

from __future__ import annotations

import numpy as np

from ..analyze.breakdown import ALL_STREAMS
from ..analyze.frames import column
from ..analyze.table import Table
from ..analyze.units import fmt_ns

#: the per-device row of HTA's idle table: its streams' idle added up
SUM_OF_STREAMS = "(sum of streams)"
#: the parts of a row's idle (``<part>_ns``, ``<part>_pct``) and their headers
PARTS = (("host_wait", "host-wait"), ("kernel_wait", "kernel-wait"), ("other", "other"))


def shown(it: Table, tb: Table, hta: bool) -> tuple[Table, list[str]]:
    """(the idle table to print, the notes to print under it): ``it`` the idle table,
    ``tb`` the temporal breakdown, ``hta``: the window is HTA's (see the module doc)."""
    notes: list[str] = []
    if not len(it):
        return it, notes
    plane, stream = column(it, "plane"), column(it, "stream")
    several = len(set(plane.tolist())) > 1
    where = [f"{p} {s}" if several else str(s) for p, s in zip(plane.tolist(), stream.tolist())]
    per_stream = stream != ALL_STREAMS
    below: list[str] = []
    for part, head in PARTS:
        ns = column(it, f"{part}_ns")
        below += [f"{where[i]} {head} -{fmt_ns(-int(ns[i]))}" for i in np.flatnonzero(per_stream & (ns < 0)).tolist()]
    idle = column(it, "idle_ns")
    if below or (idle < 0).any():
        cols = {f"{p}_{u}": np.maximum(column(it, f"{p}_{u}"), 0) for p, _ in PARTS for u in ("ns", "pct")}
        it = it.with_columns(idle_ns=np.maximum(idle, 0), **cols)
        notes.append("below zero in HTA's arithmetic, shown as 0: " + ", ".join(below) + " (HTA counts activities "
                     "that overlap on a stream as negative gaps, so such a row's parts add up to more than its idle, "
                     "its shares to more than 100%; summary --json keeps HTA's values)")
    if hta and (~per_stream).any():
        it = it.with_columns(stream=np.where(per_stream, stream, SUM_OF_STREAMS))
        notes.append(f"{SUM_OF_STREAMS}: the streams' idle added up, as HTA does, not the time no stream was busy; "
                     "the device's idle: " + _device_idle(tb, sorted(set(plane[~per_stream].tolist())), several))
    return it, notes


def _device_idle(tb: Table, planes: list[str], several: bool) -> str:
    """Each of ``planes``' idle in the temporal breakdown (its ``(all streams)`` row)."""
    if not len(tb):
        return "-"
    p, s, idle, span = (column(tb, c) for c in ("plane", "stream", "idle_ns", "span_ns"))
    out = []
    for name in planes:
        at = np.flatnonzero((p == name) & (s == ALL_STREAMS))
        if len(at):
            i = int(at[0])
            share = f" ({100 * int(idle[i]) / int(span[i]):.1f}% of {fmt_ns(int(span[i]))})" if span[i] > 0 else ""
            out.append((f"{name} " if several else "") + fmt_ns(int(idle[i])) + share)
    return ", ".join(out) + " (Device time, (all streams))" if out else "-"
