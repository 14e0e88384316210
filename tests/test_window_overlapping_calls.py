"""A time window without a whole step (``polyprof run --delay D --duration T``) whose
calls and sections began before it: they are analysed for their part inside it, as
``sync_by_thread`` counts a call waiting through it. Before, a window inside one
``clFinish`` had no critical path, ``section_stats`` left out every section begun
before the window, and the sync finding counted the ``clFinish`` ("calls=1") but named
no call. Real recordings: OpenCL on PoCL under ``polyprof run``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.findings import findings
from polyprof.analyze.frames import column
from polyprof.analyze.sections import section_stats
from polyprof.analyze.window import AUTO
from polyprof.derive import cache

from opencl_programs import HEAD, head, record  # pytest puts tests/ on sys.path

#: argv: seconds. Long kernels queued at once in a 'queue_all' section, as many as keep
#: the queue busy for at least that long from here (the kernel's time measured first),
#: then one clFinish waiting for them in a 'drain' section. The session started before
#: the program, so a window that closes within those seconds of the session's start
#: closes inside the clFinish, however fast or loaded the machine is.
_DRAIN = HEAD + """
until = time.perf_counter() + float(sys.argv[1])
knl(q, a.shape, None, da, db, np.int32(600)); q.finish()  # (the first run builds the kernel)
t = time.perf_counter()
knl(q, a.shape, None, da, db, np.int32(600)); q.finish()
took = max(time.perf_counter() - t, 1e-3)
with polyprof.section("queue_all"):
    for j in range(int(1.5 * (until - time.perf_counter()) / took) + 2):
        knl(q, a.shape, None, da, db, np.int32(600))
with polyprof.section("drain"):
    q.finish()
polyprof.step()
"""
#: the windows open this long after the session's start: the programs' set-up (pyopencl's
#: import, a context, a build) is over by then on a loaded machine too
_DELAY, _DURATION = 1.5, 0.3


@pytest.fixture(scope="module")
def drain(tmp_path_factory: pytest.TempPathFactory) -> tuple[polyprof.Trace, str, int, int, int]:
    """The recording of a 0.3 s window inside the clFinish: (trace, summary text, the
    window's start and end, the clFinish's row)."""
    tmp = tmp_path_factory.mktemp("drain")
    t, text = record(tmp, "drain", _DRAIN, ["--delay", str(_DELAY), "--duration", str(_DURATION)],
                     [str(_DELAY + _DURATION + 0.4)])
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    fin = np.flatnonzero(t.names() == "clFinish")
    st = t.events["start_ns"][fin]
    en = st + t.events["dur_ns"][fin]
    inside = fin[(st < lo) & (en > hi)]
    assert len(inside) == 1, f"the window is not inside the clFinish: the program's set-up took over {_DELAY} s"
    assert not len(cache.steps(t))
    return t, text, lo, hi, int(inside[0])


@pytest.mark.opencl
def test_a_window_inside_one_clfinish_has_a_critical_path(drain: tuple[polyprof.Trace, str, int, int, int]) -> None:
    """The window's only host call is the clFinish begun before it; kernels launched
    before it run through it. The path is the window's: the kernels running in it (the
    first cut at its start) and the clFinish's part inside, which waits for them; it no
    longer reaches the clFinish's own end, seconds later."""
    t, text, lo, hi, fin = drain
    cp = critical_path(t, AUTO)
    assert len(cp) and set(column(cp, "step").tolist()) == {-1}
    names, kinds = column(cp, "name").tolist(), column(cp, "kind").tolist()
    assert "clFinish" in names and "kernel" in kinds
    path, span = int(column(cp, "path_ns")[0]), int(column(cp, "span_ns")[0])
    fin_end = int(t.events["start_ns"][fin] + t.events["dur_ns"][fin])
    # the kernels back to back through the window, the last ending after it
    assert 0.9 * (hi - lo) <= path <= span < fin_end - lo
    assert (column(cp, "start_ns") + column(cp, "dur_ns") > lo).all()
    assert "critical path" in text and "of the analysed span's" in text


#: argv: seconds. The host waits that long from here on a user event (set by a timer
#: thread): one host call, no device work
_USER_WAIT = HEAD + """
import threading
ue = cl.UserEvent(ctx)
threading.Timer(float(sys.argv[1]), ue.set_status, (cl.command_execution_status.COMPLETE,)).start()
ue.wait()
polyprof.step()
"""


@pytest.mark.opencl
def test_a_window_inside_one_host_wait_without_device_work_has_a_critical_path(tmp_path: Path) -> None:
    """No device work at all: the window's graph is its host calls alone
    (``critical_path._host_only``), here the one wait begun before it, whose part inside
    is the whole path."""
    t, _ = record(tmp_path, "user_wait", _USER_WAIT, ["--delay", str(_DELAY), "--duration", "0.2"],
                  [str(_DELAY + 0.6)], summary=False)
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    assert not len(cache.steps(t)) and not len(cache.correlation(t).device_rows)
    st = t.events["start_ns"].astype(np.int64)
    assert ((st < lo) & (st + t.events["dur_ns"] > hi)).sum() == 1, "the window is not inside the wait"
    cp = critical_path(t, AUTO)
    assert len(cp) == 1 and column(cp, "step").tolist() == [-1]
    assert column(cp, "kind").tolist() == ["runtime"]
    assert column(cp, "on_path_ns").tolist() == column(cp, "path_ns").tolist() == [hi - lo]
    assert column(cp, "span_ns").tolist() == [hi - lo]


@pytest.mark.opencl
def test_sections_begun_before_a_window_count_their_part_inside(
        drain: tuple[polyprof.Trace, str, int, int, int]) -> None:
    """'drain' began before the window and ended after it: one instance, the window's
    length, from its start to its end; 'queue_all' ended before it: not counted."""
    t, text, lo, hi, _ = drain
    ss = section_stats(t, AUTO)
    assert column(ss, "name").tolist() == ["drain"]
    got = {c: int(column(ss, c)[0]) for c in ("count", "total_ns", "min_ns", "first_start_ns", "last_end_ns")}
    assert got == {"count": 1, "total_ns": hi - lo, "min_ns": hi - lo, "first_start_ns": lo, "last_end_ns": hi}
    assert "Sections" in text


#: argv: seconds, chunks a step, seconds a chunk. Steps of short 'chunk' sections (two
#: small kernels, a sleep, a read), for at least that long from here (a window that
#: closes within those seconds of the session's start closes inside the loop, as in
#: _DRAIN), inside an 'epoch' section around the loop
_CHUNKS = head(1 << 12) + """
until = time.perf_counter() + float(sys.argv[1])
with polyprof.section("epoch"):
    while time.perf_counter() < until:
        for c in range(int(sys.argv[2])):
            with polyprof.section("chunk"):
                for j in range(2):
                    knl(q, a.shape, None, da, db, np.int32(100))
                time.sleep(float(sys.argv[3]))
                cl.enqueue_copy(q, a, da)
        polyprof.step()
"""


@pytest.mark.opencl
def test_sections_ending_inside_a_window_count_their_part_inside(tmp_path: Path) -> None:
    """A 50 ms window inside a ~150 ms step of ~20 ms 'chunk' sections, in an 'epoch'
    one: every section that overlaps it counts, cut at its edges (one begun before it and
    ended in it, one begun in it and lasting past it), and the epoch for the window's
    length."""
    t, _ = record(tmp_path, "chunks", _CHUNKS, ["--delay", str(_DELAY), "--duration", "0.05"],
                  [str(_DELAY + 0.5), "7", "0.02"], summary=False)
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    assert not len(cache.steps(t)), "the window holds a whole step"
    rows = np.flatnonzero(t.names() == "chunk")
    st = t.events["start_ns"][rows].astype(np.int64)
    en = st + t.events["dur_ns"][rows]
    over = (st < hi) & (en > lo)
    assert ((st < lo) & (en > lo) & (en < hi)).any() and ((st >= lo) & (st < hi) & (en > hi)).any(), \
        "no chunk section crossed each edge of the window"
    a, b = np.maximum(st[over], lo), np.minimum(en[over], hi)
    ss = section_stats(t, AUTO)
    by = {n: i for i, n in enumerate(column(ss, "name").tolist())}
    work = by["chunk"]
    assert int(column(ss, "count")[work]) == int(over.sum())
    assert int(column(ss, "total_ns")[work]) == int((b - a).sum())
    assert (int(column(ss, "first_start_ns")[work]), int(column(ss, "last_end_ns")[work])) == (lo, hi)
    epoch = by["epoch"]
    assert (int(column(ss, "count")[epoch]), int(column(ss, "total_ns")[epoch])) == (1, hi - lo)


@pytest.mark.opencl
def test_the_sync_finding_names_the_call_it_counts(drain: tuple[polyprof.Trace, str, int, int, int]) -> None:
    """The finding counted the clFinish waiting through the window ("calls=1") and named
    none ("the calls behind it" were those starting in the window): it names it, with
    its time inside the window."""
    t, text, lo, hi, _ = drain
    found = [f for f in findings(t, window=AUTO) if f.id == "sync_stalls"]
    assert len(found) == 1 and found[0].evidence["calls"] == 1
    assert [(e["name"], e["count"], e["total_ns"]) for e in found[0].events] == [("clFinish", 1, hi - lo)]
    assert "top: clFinish" in text
