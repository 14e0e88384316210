"""The public recording API: sections, marks, counters, steps, threads, profile()."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import polyprof
from polyprof.errors import SessionError

pytestmark = pytest.mark.usefixtures("section_impl")  # each test with both section types


def _rows(trace, name):
    return np.flatnonzero(trace.names() == name)


def test_nested_sections_per_thread():
    def worker():
        with polyprof.section("w.outer"):
            with polyprof.section("w.inner"):
                time.sleep(0.002)

    with polyprof.profile(plugins=["host"]) as prof:
        with polyprof.section("outer", batch=4):
            t = threading.Thread(target=worker, name="worker-1")
            t.start()
            with polyprof.section("inner"):
                time.sleep(0.002)
            t.join()
    tr = prof.trace
    tracks = {tr.tracks[tr.events["track"][_rows(tr, n)[0]]].name for n in ("outer", "inner")}
    assert tracks == {threading.main_thread().name}
    wtrack = tr.tracks[tr.events["track"][_rows(tr, "w.outer")[0]]]
    assert wtrack.name == "worker-1" and wtrack.kind == "thread"
    for parent, child in (("outer", "inner"), ("w.outer", "w.inner")):
        p, c = _rows(tr, parent)[0], _rows(tr, child)[0]
        assert tr.start_ns[p] <= tr.start_ns[c] and tr.end_ns[c] <= tr.end_ns[p]
    assert tr.event_stats(_rows(tr, "outer")[0]) == {"batch": 4}
    assert tr.dur_ns[_rows(tr, "inner")[0]] >= 2_000_000


def test_decorator_begin_end_mark_counter_step():
    @polyprof.section("decorated")
    def f(x):
        return x * 2

    with polyprof.profile(plugins=["host"]) as prof:
        assert f(21) == 42
        s = polyprof.section("explicit")
        s.begin()
        polyprof.mark("checkpoint")
        s.end()
        for i in range(3):
            polyprof.counter("loss", 1.0 / (i + 1))
            polyprof.step()
    tr = prof.trace
    assert len(_rows(tr, "decorated")) == 1 and len(_rows(tr, "explicit")) == 1
    m = _rows(tr, "checkpoint")[0]
    assert tr.dur_ns[m] == 0 and tr.categories()[m] == "mark"
    steps = np.flatnonzero(tr.categories() == "step")
    assert tr.stats["step"].values.tolist() == [0, 1, 2]
    assert len(steps) == 3 and np.all(tr.dur_ns[steps] > 0)
    assert np.all(tr.start_ns[steps][1:] == tr.end_ns[steps][:-1])  # steps tile the loop
    loss = tr.counters["name"] == tr.string_id("loss")
    assert tr.counters["value"][loss].tolist() == [1.0, 0.5, 1.0 / 3]


def test_step_as_a_block_makes_the_block_one_step():
    """``with polyprof.step():`` (as JAX's StepTraceAnnotation) raised TypeError: step()
    returned None. The block is one step: the first block is step 0, from its entry (the
    set-up before it is in no step; before, it was step 0), leaving each block ends its
    step, and the next block begins there (the loop's own time goes to it), so the blocks'
    steps tile the loop from the first entry to the last exit."""
    import time

    with polyprof.profile(plugins=["host"]) as prof:
        time.sleep(0.01)  # set-up
        before = time.perf_counter_ns()
        enter, leave, exited = [], [], []
        for i in range(4):
            with polyprof.step():
                enter.append(time.perf_counter_ns())
                with polyprof.section("body"):
                    time.sleep(0.005 * (1 + (i == 0)))
                leave.append(time.perf_counter_ns())
            exited.append(time.perf_counter_ns())
            time.sleep(0.001)
        time.sleep(0.01)  # after the loop: in no step
    tr = prof.trace
    steps = np.flatnonzero(tr.categories() == "step")
    steps = steps[np.argsort(tr.start_ns[steps])]
    assert tr.stats["step"].lookup(steps)[1].tolist() == [0, 1, 2, 3]  # one per block
    start, end = tr.start_ns[steps], tr.end_ns[steps]
    assert np.all(start[1:] == end[:-1])
    assert before <= start[0] <= enter[0]  # step 0 begins at the first block's entry
    assert np.all(start <= np.array(enter)) and np.all(np.array(leave) <= end)  # each block in its step
    # each step ends at its block's exit, the last one too (not at the session's end, 10 ms
    # later): between the clock reads just before and after it, whatever the machine's load
    assert np.all(np.array(leave) <= end) and np.all(end <= np.array(exited))
    body = _rows(tr, "body")
    assert [int(np.searchsorted(start, tr.start_ns[r], "right")) - 1 for r in np.sort(body)] == [0, 1, 2, 3]
    with polyprof.step():  # no session: nothing, no error
        pass


def test_no_session_is_a_no_op():
    with polyprof.section("nobody listens") as s:
        polyprof.mark("m")
        polyprof.counter("c", 1)
        polyprof.step()
    assert s.name == "nobody listens"
    # nothing was left open by the use without a session: a later use records once
    with polyprof.profile(plugins=["host"]) as prof:
        with s:
            pass
    assert len(_rows(prof.trace, "nobody listens")) == 1


def test_section_started_before_session_is_not_recorded_half():
    s = polyprof.section("early")
    s.begin()
    with polyprof.profile(plugins=["host"]) as prof:
        s.end()
    assert len(_rows(prof.trace, "early")) == 0


def test_profile_as_decorator_returns_trace(tmp_path):
    out = tmp_path / "f.polyprof"

    @polyprof.profile(plugins=["host"], output=out)
    def work():
        with polyprof.section("inside"):
            return 7

    assert work() == 7
    assert len(_rows(work.trace, "inside")) == 1
    assert len(_rows(polyprof.load(out), "inside")) == 1


def test_a_session_inside_a_session_nests():
    with polyprof.profile(plugins=["host"]) as outer:
        with polyprof.section("before"):
            pass
        with polyprof.profile(plugins=["host"]) as inner:
            with polyprof.section("inside"):
                pass
        with pytest.raises(SessionError):  # one session object starts once
            inner.start()
    assert len(_rows(inner.trace, "inside")) == 1
    assert len(_rows(inner.trace, "before")) == 0  # only the inner window
    assert inner.trace.metadata["nested_in"]["start_ns"] == outer.trace.metadata["session"]["start_ns"]
    assert len(_rows(outer.trace, "inside")) == 1 and len(_rows(outer.trace, "polyprof.profile")) == 1


def test_process_counters_sampled():
    with polyprof.profile(options={"host": {"sample_interval_s": 0.005}}) as prof:
        time.sleep(0.05)
    tr = prof.trace
    names = {tr.strings[i] for i in np.unique(tr.counters["name"])}
    assert {"process.cpu_percent", "process.rss_bytes"} <= names
    rss = tr.counters["value"][tr.counters["name"] == tr.string_id("process.rss_bytes")]
    assert len(rss) >= 3 and rss.min() > 1e6
