"""A session that starts while a ``with polyprof.step():`` block is open (audit: a
``polyprof run --serve`` capture of such a loop, ``polyprof.profile()`` entered inside a
step or while another thread was in one). The open block's exit ends step 0, which runs
from the session's start; the next block is step 1 (collect/steps.py). Before, the next
block's entry was taken as step 0's start, after the boundary that ends it: a negative
step failed the trace's check and the host plugin lost all its data ("failed in collect:
TraceSchemaError: negative event duration", 0 events, in 5 of 5 captures). One record
that no trace can hold now costs only itself (formats/hostrecords.py ``repair``)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.collect import recorder
from polyprof.derive.steps import find_steps
from polyprof.formats import hostrecords
from polyprof.trace import metadata_keys as mkeys

WORK_S = 0.02


def _host_ok(tr: polyprof.Trace) -> None:
    assert tr.metadata[mkeys.PLUGINS]["host"] == "ok", tr.metadata.get(mkeys.PLUGIN_ERRORS)


def _steps(tr: polyprof.Trace) -> tuple[np.ndarray, np.ndarray]:
    """The Steps line's spans, in time order."""
    rows = np.flatnonzero(tr.categories() == "step")
    rows = rows[np.argsort(tr.start_ns[rows])]
    return tr.start_ns[rows], tr.end_ns[rows]


def test_a_session_entered_inside_a_block_on_its_thread() -> None:
    """``profile().__enter__()`` inside the second of four blocks: step 0 is that block's
    rest (from where the program resumed after the session's start), steps 1 and 2 the
    next two blocks, every section kept (before: no host data at all)."""
    prof = None
    exits = []
    for i in range(4):
        with polyprof.step():
            if i == 1:
                prof = polyprof.profile(plugins=["host"], output=None)
                prof.__enter__()
                body = time.perf_counter_ns()
            with polyprof.section("work"):
                time.sleep(WORK_S)
        exits.append(time.perf_counter_ns())
    assert prof is not None
    prof.__exit__(None, None, None)
    tr = prof.trace
    _host_ok(tr)
    start, end = _steps(tr)
    assert len(start) == 3 and np.all(end > start) and np.all(start[1:] == end[:-1])
    assert tr.metadata["session"]["start_ns"] <= start[0] <= body  # the step the session began in, cut there
    assert exits[0] < end[0] <= exits[1]  # ... ended at that block's exit
    assert (tr.names() == "work").sum() == 3
    s = find_steps(tr)
    assert s.source == "polyprof" and s.number.tolist() == [0, 1, 2]


def test_a_session_started_while_another_thread_is_in_a_block() -> None:
    stop, inside = threading.Event(), threading.Event()

    def loop() -> None:
        while not stop.is_set():
            with polyprof.step():
                inside.set()
                with polyprof.section("tick"):
                    time.sleep(WORK_S)

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    try:
        assert inside.wait(10)
        time.sleep(WORK_S / 4)  # inside a block (its sleep)
        with polyprof.profile(plugins=["host"], output=None) as prof:
            body = time.perf_counter_ns()
            time.sleep(0.3)
    finally:
        stop.set()
        th.join(10)
    tr = prof.trace
    _host_ok(tr)
    start, end = _steps(tr)
    assert len(start) >= 5 and np.all(end > start) and np.all(start[1:] == end[:-1])
    assert tr.metadata["session"]["start_ns"] <= start[0] <= body  # where the program resumed
    assert (tr.names() == "tick").sum() >= 5


def test_a_block_whose_step_call_came_before_the_session() -> None:
    """``step()`` called before the session, its block entered after the session
    started: that block is step 0, from its entry (before: a negative step 0 too)."""
    blk = polyprof.step()
    with polyprof.profile(plugins=["host"], output=None) as prof:
        entered = []
        with blk:
            entered.append(time.perf_counter_ns())
            time.sleep(WORK_S)
        for _ in range(2):
            with polyprof.step():
                time.sleep(WORK_S)
    tr = prof.trace
    _host_ok(tr)
    start, end = _steps(tr)
    assert len(start) == 3 and np.all(end > start) and np.all(start[1:] == end[:-1])
    assert tr.metadata["session"]["start_ns"] <= start[0] <= entered[0]


SERVED = """
import os, sys, time
import polyprof
stop, limit = sys.argv[1], float(sys.argv[2])
t_end = time.monotonic() + limit
while time.monotonic() < t_end and not os.path.exists(stop):
    with polyprof.step():
        with polyprof.section("tick"):
            time.sleep(0.02)
print("served loop done", flush=True)
"""


def test_a_capture_of_a_served_step_block_loop(tmp_path: Path) -> None:
    """``polyprof run --serve`` of a loop of ``with polyprof.step():`` blocks, captured
    for 500 ms: a capture begins inside a block (the loop sleeps in them). Before: 0
    events, the host plugin failed."""
    pytest.importorskip("grpc")
    from capture_helpers import Program, free_port
    from polyprof.capture import client

    script = tmp_path / "served.py"
    script.write_text(SERVED)
    port = free_port()
    prog = Program(tmp_path, [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--serve",
                              f"127.0.0.1:{port}", str(script), str(tmp_path / f"stop-{port}"), "120"], port)
    try:
        time.sleep(0.5)  # the loop runs
        got = client.capture([prog.address], 500)[0]
    finally:
        rc, out, err = prog.stop()
    assert rc == 0 and "served loop done" in out, err[-2000:]
    assert got.ok, got.error
    tr = got.trace()
    _host_ok(tr)
    assert (tr.names() == "tick").sum() >= 10
    s = find_steps(tr)
    assert s.source == "polyprof" and len(s) >= 10 and np.all(s.end > s.start)


def test_one_bad_record_costs_only_itself() -> None:
    """Records no trace can hold (a section that ends before it starts; two threads'
    boundaries appended out of time order, put here by hand as such a race would) are
    dropped or sorted with a warning in the trace; every other record is kept. Before,
    the trace's check failed and the host plugin's whole data was lost."""
    with polyprof.profile(plugins=["host"], output=None) as prof:
        for _ in range(3):
            with polyprof.section("work"):
                time.sleep(0.002)
            polyprof.step()
        rec = recorder.active_recorder()
        assert rec is not None
        t = time.perf_counter_ns()
        rec.sections.append(("backwards", t, t - 1000, None, threading.get_ident()))
        rec.steps.insert(len(rec.steps) - 1, rec.steps[-1] + 1000)  # the last two out of order
    tr = prof.trace
    _host_ok(tr)
    names = tr.names()
    assert (names == "work").sum() == 3 and "backwards" not in set(names.tolist())
    start, end = _steps(tr)
    assert len(start) == 4 and np.all(end > start)
    said = "\n".join(mkeys.warning_texts(tr.metadata))
    assert "1 section(s) that end before they start were dropped" in said
    assert "step boundaries out of time order were sorted" in said


def test_host_records_with_step_0_after_its_end_are_mended() -> None:
    """The builder itself: step 0 that would begin after the boundary that ends it
    begins there (a zero step, not a failed trace)."""
    h = hostrecords.HostRecords(start_ns=5_000, steps=[4_000, 9_000], pid=1, hostname="h")
    tr = hostrecords.build(h)
    start, end = _steps(tr)
    assert start.tolist() == [4_000, 4_000] and end.tolist() == [4_000, 9_000]
    assert any("step 0 began 0.001 ms after" in w for w in mkeys.warning_texts(tr.metadata))
