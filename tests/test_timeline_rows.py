"""The HTML report's rows as the page draws them, checked in the data and in headless
Chromium over the DevTools protocol: counters sampled before the first event (torch's
import under `polyprof run`) on the timeline and in its scale, host lines of one name
told apart by their thread id, the marks' labels kept apart, and a table's header
sorting every row the page holds before it shows the first 20."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from polyprof.analyze.frames import column
from polyprof.formats.detect import load
from polyprof.report.html import TOP, write
from polyprof.report.tables import build
from polyprof.report.timeline import Part, timeline_data
from polyprof.trace import TraceBuilder

from analysis.browser import chromium

S = 1_000_000_000
JAX_H200 = Path(__file__).parent / "data" / "h200" / "jax_transformer_h200.xplane.pb.gz"
READY = "document.documentElement.getAttribute('data-tl-ready')"


def _imported_then_trained():
    """As `polyprof run` records a script: the process counters sampled from its start,
    the events (steps) only once torch is imported, 10 s later; the CPU at 147% while
    importing, at most 98.5% once the steps run."""
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    host = b.plane("/host:CPU", "host", pid=1)
    main = b.track(host, "MainThread", "thread", tid=11)
    for k in range(4):
        b.event(main, f"ProfilerStep#{k}", 10 * S + k * S // 2, S // 2, "section")
        b.event(main, "aten::mm", 10 * S + k * S // 2 + 1000, S // 4, "cpu_op")
    ts = np.arange(0, 125) * (S // 10)  # 0 to 12.4 s, every 100 ms
    cpu = np.where(ts < 10 * S, 147.0, 98.5)
    b.counter(host, "process.cpu_percent", ts, cpu)
    return b.build()


def test_counters_sampled_before_the_first_event_are_on_the_timeline():
    t = _imported_then_trained()
    d = timeline_data([Part("", t)])
    lo, hi = t.extent_ns
    assert (lo, hi) == (0, int(124 * S // 10)) and t.span_ns == (10 * S, 12 * S)
    # the timeline spans every row it draws: its 0 is the first sample, not the first event
    assert d["t0"] == lo and d["span_ns"] == hi - lo
    assert d["events_span_ns"] == 2 * S and d["parts"] == 1
    (c,) = d["counters"]
    assert min(c["ts"]) == 0 and max(c["ts"]) == d["span_ns"]
    # what the counter row is scaled to (its highest sample) is within the span that 0 shows
    top = int(np.argmax(c["values"]))
    assert c["values"][top] == 147.0 and 0 <= c["ts"][top] <= d["span_ns"]


def test_a_job_spans_each_ranks_counters_on_the_aligned_clock():
    t = _imported_then_trained()
    d = timeline_data([Part("rank 0", t), Part("rank 1", t, -3 * S)])
    assert d["t0"] == -3 * S and d["span_ns"] == int(124 * S // 10) + 3 * S
    assert all(0 <= x <= d["span_ns"] for c in d["counters"] for x in c["ts"])


def test_host_lines_of_one_name_get_their_thread_id():
    d = timeline_data([Part("", load(JAX_H200))])
    host = [x["label"] for x in d["tracks"] if x["group"] == "/host:CPU"]
    # JAX's two host lines named python3, told apart; names that are alone stay as they are
    assert [x for x in host if x.startswith("python3")] == ["python3 (tid -7290559958998115706)",
                                                            "python3 (tid -7707701072825603930)"]
    assert "Host Threads/1257" in host and "critical path" in host
    labels = [(x["group"], x["label"]) for x in d["tracks"]]
    assert len(labels) == len(set(labels))


def test_tracks_of_one_name_and_thread_id_are_numbered():
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    host = b.plane("/host:CPU", "host", pid=1)
    for k, kind in enumerate(("thread", "derived")):  # one name and id, two tracks
        b.event(b.track(host, "worker", kind, tid=5), "work", 100 + k, 10)
    b.event(b.track(host, "main", "thread", tid=5), "work", 100, 10)
    d = timeline_data([Part("", b.build(), critical_path=False)])
    assert sorted(x["label"] for x in d["tracks"]) == ["main", "worker (1)", "worker (2)"]


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_the_page_reaches_the_counters_before_the_first_event(tmp_path):
    import cdp

    out = write(_imported_then_trained(), tmp_path / "r.html")
    page = cdp.Page(chromium())
    try:
        page.open(out, READY)
        assert page.eval("window.__errors.length") == 0
        # the overview's span is the timeline's: events and counters, the events' own said
        span = page.eval("document.getElementById('ov-trace-span').textContent")
        assert span.startswith("12.4 s (the events: 2.000 s"), span
        page.eval("document.getElementById('timeline-card').scrollIntoView()")
        page.key("0")
        v0, v1 = page.eval("window.__timeline.range()")
        assert v0 <= 0 and v1 >= 12.4 * S  # the first sample (at 0) and the last in view
        # and the pan goes no further than 5% past them
        for _ in range(30):
            page.key("a")
        assert page.eval("window.__timeline.range()")[0] == pytest.approx(-0.05 * 12.4 * S)
        assert page.eval("window.__errors.length") == 0
    finally:
        page.close()


def _marked_trace():
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    host = b.plane("/host:CPU", "host", pid=1)
    main = b.track(host, "MainThread", "thread", tid=1)
    b.event(main, "step", 0, 1_000_000_000, "section")
    b.event(main, "aten::mm", 1_234_567, 89_001, "cpu_op")  # times in ns (the page zooms to the ns)
    return b.build()


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_labels_of_neighbouring_marks_do_not_overlap(tmp_path):
    import cdp

    # five collectives that waited, each beginning 10 ms after the one before and lasting
    # 300 ms: at the whole span (about 1 px per ms) their labels would be drawn over each other
    marks = [{"start_ns": 100_000_000 + k * 10_000_000, "end_ns": 400_000_000 + k * 10_000_000, "kind": "straggler",
              "label": f"allreduce #{k}: rank 1 last, 300 ms after the first"} for k in range(5)]
    out = write(_marked_trace(), tmp_path / "m.html", marks=marks)
    page = cdp.Page(chromium())
    try:
        page.open(out, READY)
        page.eval("document.getElementById('timeline-card').scrollIntoView()")
        page.key("0")
        drawn = page.eval("JSON.parse(document.getElementById('tl-canvas').getAttribute('data-mark-labels'))")
        # one label a line (3 lines) where they would overlap, the rest left out
        assert sorted(line for _, line, _ in drawn) == [0, 1, 2], drawn
        for x, line, w in drawn:
            assert not any(x2 < x + w and x < x2 + w2 for x2, line2, w2 in drawn if line2 == line and x2 != x)
        # zoomed in to the first 20 ms of them, two labels fit side by side on the first line
        page.eval("window.__timeline.view(95000000, 125000000)")
        drawn = page.eval("JSON.parse(document.getElementById('tl-canvas').getAttribute('data-mark-labels'))")
        assert [line for _, line, _ in drawn].count(0) >= 2, drawn
        assert page.eval("window.__errors.length") == 0
    finally:
        page.close()


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_a_header_sorts_every_row_then_shows_the_first_20(tmp_path, traces_dir):
    import cdp

    trace = load(traces_dir / "kineto" / "a100_alexnet_small.json.gz")
    ops = build(trace).tables["op_stats"]
    names = [str(n) for n in column(ops, "name").tolist()]
    assert len(names) > TOP
    out = write(trace, tmp_path / "t.html")
    page = cdp.Page(chromium())
    try:
        page.open(out, "document.documentElement.getAttribute('data-rendered')")
        shown = ("Array.from(document.querySelectorAll('#ops-table tbody tr'))"
                 ".map(function (r) { return r.children[0].textContent; })")
        assert page.eval(shown) == names[:TOP]  # by total time, as the table is
        note = page.eval("document.querySelector('#ops-table .muted').textContent")
        assert note.startswith(f"showing {TOP} of {len(names)}"), note
        header = "document.querySelectorAll('#ops-table th')[0].click()"
        page.eval(header)  # by name, descending: of all the rows, not of the 20 shown
        assert page.eval(shown) == sorted(names, reverse=True)[:TOP]
        page.eval(header)
        assert page.eval(shown) == sorted(names)[:TOP]
        assert page.eval("window.__errors.length") == 0
    finally:
        page.close()
