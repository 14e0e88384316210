"""What a package adds to polyprof besides a device plugin, each through one entry point
(pyproject.toml; docs/plugins.md, "Readers, analyses and findings from another package"):

- ``GC_LOG``: a trace format (group ``polyprof.formats``): a text log of garbage-collector
  pauses, ``GCPAUSES 1`` then ``TID START_NS END_NS GENERATION COLLECTED`` per line,
  read into the Trace the plugin makes and written from any Trace's ``gc`` events;
- ``GC_PAUSES``: an analysis table (group ``polyprof.analyses``): pauses per generation;
- ``long_gc_pauses``: a finding rule (group ``polyprof.findings``) reading that table.

Both are given the analysed window as a trace of its own (by default every step but the
warm-up; ``--steps``): its events and its ``span_ns`` are the window's, so they need no
window logic of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from polyprof.analyze.finding import Finding
from polyprof.analyze.frames import frame
from polyprof.analyze.registry import Analysis
from polyprof.analyze.table import Table
from polyprof.errors import TraceFormatError
from polyprof.formats.registry import Format
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.core import Trace

MAGIC = b"GCPAUSES 1\n"
#: gc pauses that take more than this share of the analysed window's span make a finding
PAUSE_SHARE = 5.0


def sniff(head: bytes, path: Path) -> bool:
    """Asked only about files no built-in format took (first bytes; gzip: ``b"GZ"`` + inflated)."""
    return head.startswith(MAGIC)


def load(path: str | Path, **options: Any) -> Trace:
    """The log as the Trace the plugin makes: one track per thread, ``gc genN`` events."""
    rows = []
    lines = Path(path).read_bytes().splitlines()[1:]
    for i, line in enumerate(lines, 2):
        parts = line.split()
        if len(parts) != 5 or not all(p.lstrip(b"-").isdigit() for p in parts):
            raise TraceFormatError(path, f"line {i}: expected TID START_NS END_NS GENERATION COLLECTED")
        rows.append([int(p) for p in parts])
    b = TraceBuilder()
    plane = b.plane("/host:gc", "host")
    if rows:
        a = np.asarray(rows, np.int64)
        for tid in np.unique(a[:, 0]).tolist():
            sel = a[a[:, 0] == tid]
            track = b.track(plane, f"gc [{tid}]", "thread", tid=tid)
            names = np.asarray([f"gc gen{g}" for g in sel[:, 3].tolist()], object)
            b.events(track, names, sel[:, 1], sel[:, 2] - sel[:, 1], "gc",
                     stats={"generation": sel[:, 3], "collected": sel[:, 4]})
    return b.build()


def write(trace: Trace, path: str | Path) -> Path:
    """The trace's ``gc genN`` events as the log (their collected counts are not kept)."""
    ev = trace.events
    names = [trace.strings[i] for i in ev["name"].tolist()]
    tids = [trace.tracks[t].tid or 0 for t in ev["track"].tolist()]
    with open(path, "wb") as f:
        f.write(MAGIC)
        for name, tid, start, dur in zip(names, tids, ev["start_ns"].tolist(), ev["dur_ns"].tolist()):
            if name.startswith("gc gen") and name[6:].isdigit():
                f.write(f"{tid} {start} {start + dur} {name[6:]} 0\n".encode())
    return Path(path)


GC_LOG = Format("gc-pause-log", "garbage-collector pauses as text (GCPAUSES 1), as polyprof_example_plugin writes",
                reader="polyprof_example_plugin.extensions:load", sniff=sniff,
                writer="polyprof_example_plugin.extensions:write", suffixes=(".gcpauses",))


def gc_pauses(trace: Trace) -> Table:
    """Columns: ``generation`` (int), ``pauses``, ``total_ns``, ``max_ns``: the ``gc genN``
    events of every thread, by generation (``trace`` holds the analysed window's events)."""
    ev = trace.events
    names = np.asarray(trace.strings, object)[ev["name"]] if len(ev["name"]) else np.zeros(0, object)
    gen = np.array([int(n[6:]) if n.startswith("gc gen") and n[6:].isdigit() else -1 for n in names.tolist()],
                   np.int64)
    keep = gen >= 0
    keys, inv = np.unique(gen[keep], return_inverse=True)
    dur = ev["dur_ns"][keep].astype(np.int64)
    top = np.zeros(len(keys), np.int64)
    np.maximum.at(top, inv, dur)
    return frame({"generation": keys, "pauses": np.bincount(inv, minlength=len(keys)),
                  "total_ns": np.bincount(inv, dur, minlength=len(keys)).astype(np.int64), "max_ns": top})


GC_PAUSES = Analysis("gc_pauses", "polyprof_example_plugin.extensions:gc_pauses",
                     empty=(("generation", "i8"), ("pauses", "i8"), ("total_ns", "i8"), ("max_ns", "i8")))


def long_gc_pauses(trace: Trace, t: Callable[[str], Table]) -> list[Finding]:
    """A finding when garbage-collector pauses take more than :data:`PAUSE_SHARE` % of the
    analysed window (``trace.span_ns``: the window's span, ``gc_pauses`` its pauses)."""
    table = t("gc_pauses")
    start, end = trace.span_ns
    total = int(table["total_ns"].sum()) if len(table) else 0
    if end <= start or 100.0 * total / (end - start) < PAUSE_SHARE:
        return []
    share = 100.0 * total / (end - start)
    return [Finding("gc_pauses_long", f"garbage-collector pauses take {share:.0f}% of the time analysed", "medium",
                    "/host:gc", {"gc_ns": total, "span_ns": end - start, "share_pct": round(share, 1)},
                    suggestion="make less cyclic garbage, or gc.freeze() after start-up")]
