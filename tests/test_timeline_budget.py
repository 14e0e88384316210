"""The HTML timeline's budgets and what the page says of them: events tied at the
events' cut kept up to the limit and the note true of what is left out, the names sent
bounded (those of the events drawn, at most MAX_NAME_BYTES), arguments left out said in
an event's details, the critical path's copies told apart from the trace's events, a
zero-length trace's span, byte counters shown as bytes, times with the digits their
view needs, and a name without a break point kept from widening the page (headless
Chromium over the DevTools protocol)."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from polyprof.formats.detect import load
from polyprof.report import timeline as tl
from polyprof.report.html import write
from polyprof.report.timeline import Part, timeline_data
from polyprof.trace import TraceBuilder

from analysis.browser import chromium

READY = "document.documentElement.getAttribute('data-tl-ready')"
ALEXNET = "kineto/a100_alexnet_small.json.gz"


def _columns(d: dict) -> dict[str, np.ndarray]:
    raw = zlib.decompress(base64.b64decode(d["blob"]))
    types = {"u2": "<u2", "i4": "<i4", "f8": "<f8"}
    return {c["name"]: np.frombuffer(raw, types[c["dtype"]], c["length"], c["offset"]) for c in d["layout"]}


def _tied():
    """300 events of exactly 1 µs on two threads, 20 of 5 µs, 1 µs apart: as a
    microsecond trace of many one-tick ops."""
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    host = b.plane("/host:CPU", "host", pid=1)
    threads = [b.track(host, f"t{k}", "thread", tid=k + 1) for k in range(2)]
    for i in range(320):
        b.event(threads[i % 2], f"op{i % 7}", 1_000_000 + i * 3000, 5000 if i % 16 == 0 else 1000, "cpu_op")
    return b.build()


def test_events_tied_at_the_cut_are_kept_up_to_the_limit(monkeypatch):
    """The cut took the limit-th longest duration and kept only the longer ones: 20 of
    320 events drawn under a limit of 100, the note calling the rest "shorter than
    1000 ns" though they were all exactly 1000 ns."""
    monkeypatch.setattr(tl, "MAX_EVENTS", 100)
    t = _tied()
    d = timeline_data([Part("", t, critical_path=False)])
    c = _columns(d)
    dur = c["dur"].astype(np.int64) * d["quantum"]
    start = np.cumsum(c["start"].astype(np.int64)) * d["quantum"]
    assert d["events"] == 100 and (dur == 5000).sum() == 20 and (dur == 1000).sum() == 80
    assert "220 of 320 events, each 1000 ns long or shorter, are left out" in d["note"], d["note"]
    assert "of the 300 events 1000 ns long, 80 spread over the span" in d["note"]
    ones = np.sort(start[dur == 1000])
    span = t.span_ns[1] - t.span_ns[0]
    assert ones[0] < 0.05 * span and ones[-1] > 0.95 * span  # spread, not the first 80
    assert sum(x["lanes"][-1] - x["lanes"][0] for x in d["tracks"]) == 100
    # the names sent are those of the events drawn
    assert sorted(d["names"]) == sorted({d["names"][i] for i in c["name"]})


def test_the_names_sent_stay_within_their_budget(monkeypatch):
    """Every event of its own name: the names list had no bound (809k names: 26.5 MB of
    a 45 MB page). Past MAX_NAME_BYTES the names of the shortest events point at one
    placeholder, and the note says how many."""
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    host = b.plane("/host:CPU", "host", pid=1)
    main = b.track(host, "main", "thread", tid=1)
    for i in range(400):
        b.event(main, f"aten::op_{i:05d}_{'x' * 40}", i * 10_000, 1000 + i, "cpu_op")
    t = b.build()
    whole = timeline_data([Part("", t, critical_path=False)])
    assert len(whole["names"]) == 400 and "names" not in whole["note"]
    monkeypatch.setattr(tl, "MAX_NAME_BYTES", 10_000)
    d = timeline_data([Part("", t, critical_path=False)])
    assert len(json.dumps(d["names"], separators=(",", ":"), ensure_ascii=False).encode()) <= 10_000  # as orjson
    assert d["names"][-1] == tl.LEFT_OUT_NAME
    c = _columns(d)
    dur = c["dur"].astype(np.int64) * d["quantum"]
    named = c["name"] != len(d["names"]) - 1
    assert named.sum() == len(d["names"]) - 1 and dur[named].min() > dur[~named].max()  # the longest named
    assert f"The names of {int((~named).sum())} events are not sent" in d["note"]
    assert {d["names"][i] for i in c["name"][named]} == {n for n in t.names()[t.events["dur_ns"] >= dur[named].min()]}


def test_arguments_tied_at_their_cut_fill_the_budget(monkeypatch):
    """Arguments had the events' cut too: all cells of events as long as the
    MAX_ARG_CELLS-th longest left out (none at all where every event is 1 µs long)."""
    monkeypatch.setattr(tl, "MAX_ARG_CELLS", 50)
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    host = b.plane("/host:CPU", "host", pid=1)
    main = b.track(host, "main", "thread", tid=1)
    for i in range(200):
        b.event(main, "aten::add", i * 2000, 1000, "cpu_op", **{"Input Dims": f"[[{i}]]"})
    d = timeline_data([Part("", b.build(), critical_path=False)])
    a = d["args"]
    assert a["cells"] == 50 and a["total"] == 200 and a["limit"] == 1000
    assert a["cols"][0][0] == list(range(50))  # of the events as long as the last sent: the first ones
    assert "Arguments: 50 of 200 (event, key) cells are sent" in d["note"]
    assert "events 1 µs long or shorter may show none" in d["note"]  # (a duration as the page shows one)


def test_copies_on_the_critical_path_and_a_zero_length_span(traces_dir):
    d = timeline_data([Part("", load(traces_dir / ALEXNET))])
    cp = [x for x in d["tracks"] if x["label"] == "critical path"]
    assert d["copies"] == cp[0]["lanes"][-1] - cp[0]["lanes"][0] > 0
    assert d["events"] - d["copies"] == load(traces_dir / ALEXNET).n_events
    assert not any(x.get("copy") for x in d["tracks"] if x["label"] != "critical path")
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    b.event(b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1), "solo", 5000, 0, "cpu_op")
    one = timeline_data([Part("", b.build())])
    assert one["extent_ns"] == one["events_span_ns"] == 0 and one["span_ns"] == 1


def _page_trace() -> Path:
    """A nanosecond trace: three kernels at 775.365059, 775.392995 and 775.395555 ms,
    an op at 15.000001003 s, a 20,000-character name, process RSS in bytes, and more
    argument cells than the (lowered) budget sends."""
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    host = b.plane("/host:CPU", "host", pid=1)
    main = b.track(host, "MainThread", "thread", tid=1)
    b.event(main, "ProfilerStep#1", 0, 16 * 10 ** 9, "section")
    for i, at in enumerate((775_365_059, 775_392_995, 775_395_555)):
        b.event(main, f"aten::k{i}", at, 20_000 - i, "cpu_op", **{"Input Dims": f"[[{i}]]"})
    b.event(main, "aten::late", 15_000_001_003, 5000, "cpu_op", **{"Input Dims": "[[9]]"})
    b.event(main, "y" * 20_000, 2 * 10 ** 9, 10 ** 9, "cpu_op", **{"z" * 5000: "w" * 150})
    b.counter(host, "process.rss_bytes", np.arange(20) * 10 ** 9, 338_649_088 + np.arange(20) * 1024.0)
    return b.build()


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_the_page_says_what_it_left_out_and_times_to_their_digits(tmp_path, monkeypatch):
    import cdp

    trace = _page_trace()
    # the cells of events longer than aten::late's 5 µs sent (the critical path's
    # stretches carry some too), aten::late's left out
    whole = timeline_data([Part("", trace)])
    dur = _columns(whole)["dur"].astype(np.int64) * whole["quantum"]
    pos = np.concatenate([c[0] for c in whole["args"]["cols"]]).astype(np.int64)
    monkeypatch.setattr(tl, "MAX_ARG_CELLS", int((dur[pos] > 5000).sum()))
    d = timeline_data([Part("", trace)])
    assert 5000 < d["args"]["limit"] < 20_000  # the shortest duration sent
    (rss,) = [c for c in d["counters"] if c["label"] == "process.rss_bytes"]
    assert rss.get("bytes") is True  # its timeline row in MiB, not "3.39e+08"
    out = write(trace, tmp_path / "r.html")
    page = cdp.Page(chromium())
    try:
        page.open(out, READY)
        assert page.eval("window.__errors.length") == 0
        width = page.eval("window.innerWidth")
        assert page.eval("document.documentElement.scrollWidth") <= width
        page.eval("document.getElementById('timeline-card').scrollIntoView()")

        def details(name: str) -> str:
            page.eval(f"window.__timeline.select(window.__timeline.find({name!r}), true)")
            return page.eval("document.getElementById('tl-details').innerText")

        # a start to the nanosecond, where 4 digits gave "775.4 ms" for all three
        for i, at in enumerate(("775.365059 ms", "775.392995 ms", "775.395555 ms")):
            assert f"start\n{at} (from the timeline's start)" in details(f"aten::k{i}")
        text = details("aten::late")
        assert "15.000001003 s" in text
        # the shortest events' arguments left out: said, not silently absent
        held = f"{d['args']['cells']} of {d['args']['total']}"
        assert d["args"]["cells"] == tl.MAX_ARG_CELLS < d["args"]["total"]
        assert f"arguments\nnone sent for events this short: the page holds {held} argument cells" in text, text
        assert f"Arguments: {held} (event, key) cells are sent" in page.eval(
            "document.getElementById('tl-note').textContent")
        assert "left out" not in details("aten::k0")  # the longest events' are sent
        # a name without a break point wraps in the details (it made the page 321,627 px wide)
        assert "y" * 100 in details("y" * 20_000)
        assert page.eval("document.documentElement.scrollWidth") <= width
        # a 20 µs view: each tick and the range box to the step (all read "450.0 ms")
        page.eval("window.__timeline.view(450000000, 450020000)")
        ticks = json.loads(page.eval("document.getElementById('tl-canvas').getAttribute('data-ticks')"))
        assert len(ticks) >= 4 and len(set(ticks)) == len(ticks) and ticks[0].startswith("450.00"), ticks
        assert page.eval("document.getElementById('tl-range').textContent") == \
            "view 450.0000 ms – 450.0200 ms (20.00 µs)"
        # the count tells the trace's events from the critical path's copies
        count = page.eval("document.getElementById('tl-canvas').getAttribute('data-count')")
        assert count == (f"{trace.n_events} events + {d['events'] - trace.n_events} path copies"
                         if d["copies"] else f"{trace.n_events} events"), count
        # a byte counter in the Counters table as bytes
        cells = page.eval("Array.from(document.querySelectorAll('#counters-table td')).map(function (e) "
                          "{ return e.textContent; })")
        assert "323.0 MiB" in cells, cells
    finally:
        page.close()


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_one_instant_is_not_said_to_have_counters_around_it(tmp_path):
    import cdp

    src = tmp_path / "one.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "name": "solo", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 5, "dur": 0}]}))
    out = write(load(src), tmp_path / "one.html")
    page = cdp.Page(chromium())
    try:
        page.open(out, READY)
        assert page.eval("document.getElementById('ov-trace-span').textContent") == "0 ns"
        assert page.eval("window.__errors.length") == 0
    finally:
        page.close()


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_a_name_without_a_break_point_does_not_widen_the_findings(tmp_path):
    """A 20,000-character op name in a finding's top events made the page 144,547 px
    wide (``.finding .ev`` did not wrap); it is now shown in short, whole in its tooltip."""
    import cdp

    long = "x" * 20_000
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for k, name in enumerate([long] + [f"aten::op{i}" for i in range(8)]):
        ev += [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10 + k * 100, "dur": 50},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12 + k * 100,
                "dur": 5, "args": {"correlation": 100 + k}},
               {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 20 + k * 100, "dur": 40,
                "args": {"device": 0, "stream": 7, "correlation": 100 + k}}]
    src = tmp_path / "long.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    out = write(load(src), tmp_path / "long.html")
    page = cdp.Page(chromium())
    try:
        page.open(out, READY)
        text = page.eval("document.getElementById('findings-list').textContent")
        assert long[:119] + "…" in text and long[:120] not in text  # in short; whole in its tooltip
        assert long in page.eval("Array.from(document.querySelectorAll('#findings-list .clipped')).map(e => e.title)")
        assert page.eval("document.documentElement.scrollWidth") <= page.eval("window.innerWidth")
        assert page.eval("window.__errors.length") == 0
    finally:
        page.close()


def test_every_lane_of_the_critical_path_is_counted_as_copies():
    """A path of overlapping steps drawn on several lanes ("critical path (2)", ...): each
    lane's slices are copies, not trace events (before: only the first lane's were, so a
    JAX H200 transformer's corner read 144,412 events of its 115,685)."""
    b = TraceBuilder(metadata={"source": {"format": "test"}})
    host = b.plane("/host:CPU", "host", pid=1)
    b.event(b.track(host, "main", "thread", tid=1), "step", 0, 5000, "cpu_op")
    for k, name in enumerate(("critical path", "critical path (2)", "critical path (3)")):
        tr = b.track(host, name, "derived", tid=k)
        for i in range(k + 1):
            b.event(tr, "aten::mm", i * 1000, 500, "derived")
    d = timeline_data([Part("", b.build(), critical_path=False)])
    assert [x["label"] for x in d["tracks"] if x.get("copy")] == ["critical path", "critical path (2)",
                                                                   "critical path (3)"]
    assert d["copies"] == 6 and d["events"] - d["copies"] == 1
