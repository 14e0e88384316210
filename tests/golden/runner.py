"""A tiny runner for golden format tests, after Perfetto's diff tests.

A case is a small inline trace, a query on what polyprof reads from it, and the table
the query must give, written by hand from the trace. Queries print one row per line,
columns separated by `` | ``, after a header line; values are printed as Python writes
them (``str``), and a stat's value is preceded by its column kind (``i`` int64, ``u``
uint64, ``f`` float64, ``O`` text).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.trace.core import Trace


@dataclass(frozen=True)
class Case:
    name: str
    trace: str  # the file's text
    query: str  # a key of QUERIES
    expected: str  # the table, header first
    suffix: str = ".json"


def _table(header: str, rows: list[tuple]) -> str:
    return "\n".join([header, *(" | ".join(str(v) for v in r) for r in rows)])


def _plane_of(trace: Trace, row: int) -> str:
    return trace.planes[trace.tracks[int(trace.events["track"][row])].plane].name


def events(trace: Trace) -> str:
    ev, names, cats = trace.events, trace.names().tolist(), trace.categories().tolist()
    rows = [(_plane_of(trace, i), trace.tracks[int(ev["track"][i])].name, names[i], cats[i],
             int(ev["start_ns"][i]), int(ev["dur_ns"][i])) for i in range(trace.n_events)]
    return _table("plane | track | name | cat | start_ns | dur_ns", rows)


def planes(trace: Trace) -> str:
    return _table("name | kind | vendor | index | pid",
                  [(p.name, p.kind, p.vendor, p.index, p.pid) for p in trace.planes])


def tracks(trace: Trace) -> str:
    return _table("plane | name | kind | tid | sort",
                  [(trace.planes[t.plane].name, t.name, t.kind, t.tid, t.sort_index) for t in trace.tracks])


def stats(trace: Trace) -> str:
    names = trace.names().tolist()
    rows = []
    for key in sorted(trace.stats):
        col = trace.stats[key]
        rows += [(r, names[r], key, col.kind, v) for r, v in zip(col.rows.tolist(), col.values.tolist())]
    return _table("event | key | kind | value", [r[1:] for r in sorted(rows, key=lambda x: (x[0], x[2]))])


def flows(trace: Trace) -> str:
    fl, names = trace.flows, trace.names().tolist()
    rows = sorted((trace.strings[c], i, names[s], names[d]) for s, d, i, c in
                  zip(fl["src"].tolist(), fl["dst"].tolist(), fl["id"].tolist(), fl["category"].tolist()))
    return _table("cat | id | src | dst", rows)


def counters(trace: Trace) -> str:
    c = trace.counters
    rows = sorted((trace.planes[p].name, trace.strings[n], t, v) for p, n, t, v in
                  zip(c["plane"].tolist(), c["name"].tolist(), c["ts_ns"].tolist(), c["value"].tolist()))
    return _table("plane | name | ts_ns | value", rows)


def metadata(trace: Trace) -> str:
    m = trace.metadata
    rows = [(k, m[k]) for k in ("rank", "world_size", "backend", "clock") if k in m]
    rows.append(("format", m["source"]["format"]))
    rows += [("warning", w) for w in m.get("warnings", [])]
    return _table("key | value", rows)


QUERIES: dict[str, Callable[[Trace], str]] = {
    "events": events, "planes": planes, "tracks": tracks, "stats": stats, "flows": flows,
    "counters": counters, "metadata": metadata,
}


def run(case: Case, tmp: Path) -> str:
    """The query's table for the case's trace (``error`` for a load that must fail:
    the one-line message, the file's path shown as ``<file>``)."""
    path = tmp / (case.name + case.suffix)
    path.write_text(case.trace)
    try:
        trace = polyprof.load(path)
    except TraceFormatError as e:
        if case.query != "error":
            raise
        return _table("error", [(str(e).replace(str(path), "<file>"),)])
    assert case.query != "error", "the load was expected to fail"
    return QUERIES[case.query](trace)


def dedent(text: str) -> str:
    """An expected table as written in a test: indentation and blank edges removed."""
    return "\n".join(line.strip() for line in text.strip().splitlines())
