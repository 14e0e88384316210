"""Chrome's own trace-viewer test data (catapult ``tracing/test_data``, BSD: see
tests/data/peers/README.md): B/E slices read as the viewer reads them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import polyprof

DATA = Path(__file__).resolve().parent / "data" / "peers" / "catapult"


def _viewer_slices(events: list[dict]) -> Counter:
    """(name, start ns, duration ns) of every B/E slice as the trace viewer pairs them:
    the events stably sorted by time (file order at equal times), a stack per thread.
    Times in whole ns, as polyprof keeps them (this file writes µs to 1e-5: two events
    0.4 ns apart are at the same ns, and their order is the file's)."""
    be = [(round(float(e["ts"]) * 1000), e) for e in events if e.get("ph") in ("B", "E")]
    stacks: dict[tuple, list[tuple[int, dict]]] = {}
    out: Counter = Counter()
    for ns, e in sorted(be, key=lambda x: x[0]):
        st = stacks.setdefault((e.get("pid"), e.get("tid")), [])
        if e["ph"] == "B":
            st.append((ns, e))
        elif st:
            b_ns, b = st.pop()
            out[(b["name"], b_ns, ns - b_ns)] += 1
    return out


def test_traceviewify_b_e_slices_as_the_trace_viewer_reads_them():
    path = DATA / "traceviewify.json"
    events = json.loads(path.read_text())["traceEvents"]
    want = _viewer_slices(events)
    assert sum(want.values()) == 656
    t = polyprof.load(path)
    names = set(n for n, _, _ in want)
    got = Counter((n, s, d) for n, s, d in zip(t.names().tolist(), t.events["start_ns"].tolist(),
                                               t.events["dur_ns"].tolist()) if n in names)
    assert got == want
