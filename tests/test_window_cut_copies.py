"""A time window (``polyprof run --delay D --duration T``) that cuts copies at its edges:
the "Copies" table (``copies.copies``) counts each copy with any part inside the window
for that part, as "Device time" covers it: its time inside, and its bytes in proportion
(moved at the copy's own rate), its own bandwidth and size class whole. Before, it
counted the copies running through the window's edges for their whole duration and
size: 11 writes of 128 MiB in a 0.35 s window summed 382 ms of copy time, more than the
window, where "Device time" counted 327 ms of non-compute. Real recording: OpenCL
``clEnqueueWriteBuffer`` on PoCL under ``polyprof run``."""

from __future__ import annotations

import time

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import temporal_breakdown
from polyprof.analyze.copies import copies, per_copy
from polyprof.analyze.frames import column
from polyprof.analyze.window import AUTO, view
from polyprof.derive import cache

from opencl_programs import HEAD, record  # pytest puts tests/ on sys.path

#: argv: a deadline (``time.time()``). Writes of a 128 MiB buffer back to back until then
#: (the next queued before waiting for the one running, so the queue never runs dry and a
#: window that closes before the deadline cuts writes at its edges, however long the
#: set-up took on a loaded machine, within the delay)
_WRITES = HEAD + """
big = np.ones(1 << 25, np.float32)
dbig = cl.Buffer(ctx, mf.READ_WRITE, big.nbytes)
while time.time() < float(sys.argv[1]):
    cl.enqueue_copy(q, dbig, big, is_blocking=False)
    cl.enqueue_copy(q, dbig, big, is_blocking=True)
q.finish()
polyprof.step()
"""
_DELAY, _DURATION = 2.5, 0.35


@pytest.fixture(scope="module")
def writes(tmp_path_factory: pytest.TempPathFactory) -> tuple[polyprof.Trace, int, int]:
    """The recording of a 0.35 s window of back-to-back 128 MiB writes: (trace, its start, its end)."""
    deadline = time.time() + _DELAY + _DURATION + 1.0  # (the session starts after this)
    t, _ = record(tmp_path_factory.mktemp("copies"), "writes", _WRITES,
                  ["--delay", str(_DELAY), "--duration", str(_DURATION)], [repr(deadline)], summary=False)
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    rows = cache.correlation(t).device_rows
    st = t.events["start_ns"][rows].astype(np.int64)
    en = st + t.events["dur_ns"][rows]
    cut = ((st < lo) & (en > lo)) | ((st < hi) & (en > hi))
    assert cut.any(), "no write runs through the window's edges: the program's set-up took over the delay"
    assert not len(cache.steps(t))
    return t, lo, hi


@pytest.mark.opencl
def test_the_copies_table_counts_what_the_device_time_covers(writes: tuple[polyprof.Trace, int, int]) -> None:
    """One in-order queue of writes: the copies' time in "Copies" is the non-compute time
    "Device time" covers in the window, and no more than the window."""
    t, lo, hi = writes
    tb = temporal_breakdown(t, AUTO)
    device = column(tb, "track_id") == -1
    cp = copies(t, AUTO)
    assert column(cp, "kind").tolist() == ["HtoD"]
    assert int(column(cp, "total_ns")[0]) == int(column(tb, "non_compute_ns")[device][0]) <= hi - lo
    assert int(column(cp, "count")[0]) == int(column(tb, "activities")[device][0])
    assert int(column(cp, "sized_ns")[0]) == int(column(cp, "total_ns")[0])


@pytest.mark.opencl
def test_a_copy_cut_by_the_window_counts_its_part_and_its_bytes_in_proportion(
        writes: tuple[polyprof.Trace, int, int]) -> None:
    """Each copy's time is its part inside; its bytes counted in proportion, so the
    table's bandwidth is the copies' own rate; each copy's bandwidth and size whole."""
    t, lo, hi = writes
    c = per_copy(t, AUTO)
    ev = t.events
    start = ev["start_ns"][c.rows].astype(np.int64)
    whole = ev["dur_ns"][c.rows].astype(np.int64)
    part = np.minimum(start + whole, hi) - np.maximum(start, lo)
    assert (c.dur == part).all() and (part < whole).any()
    assert (c.size == float(1 << 27)).all()  # the whole write's size: not small
    assert np.allclose(c.moved, c.size * part / whole)
    assert np.allclose(c.gbps, c.size / whole)  # (PoCL gives no bandwidth of its own)
    cp = copies(t, AUTO)
    assert int(column(cp, "small")[0]) == 0
    assert int(column(cp, "total_bytes")[0]) == round(float(c.moved.sum()))
    assert column(cp, "bandwidth_gbps")[0] == pytest.approx(c.moved.sum() / part.sum())
    assert column(cp, "max_gbps")[0] == pytest.approx(float((c.size / whole).max()))
    # the window's bytes: no more than the copies' whole sizes, fewer where cut
    assert int(column(cp, "total_bytes")[0]) < len(c.rows) * (1 << 27)
    assert view(t, AUTO) is not t  # (analysed as the window, not the whole trace)
