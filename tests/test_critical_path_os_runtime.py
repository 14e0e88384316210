"""OS runtime calls (Nsight Systems' ``OSRT_API`` rows: ``poll``, ``ioctl``, ``read``,
category ``os_runtime``, kind OTHER) hold their thread as an op does, so the critical
path's graph takes them as host calls (``depgraph_context.os_calls``), but for those
inside another host call of the graph (a ``cudaMalloc``'s ``ioctl``: that call's own
time already; a waiting call's wait stays a wait). Before, they were not in the graph:
an export of a torch run whose host work was 37,474 OS runtime calls read "critical
path 1.3 µs of the trace's 4.45 s", its two CUDA runtime calls, the 4.45 s running from
the trace's first event to the second call's end; a trace of OS runtime calls alone
had no path at all. Real exports: pipit's CloverLeaf (tests/data/nsys), and the same
export with its CUDA rows deleted (what an export of OS runtime calls alone holds)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.frames import column
from polyprof.derive import cache
from polyprof.trace.categories import Kind

DATA = Path(__file__).parent / "data" / "nsys"
CLOVER = DATA / "cloverleaf_2024.sqlite"
SAXPY = DATA / "saxpy_2022.sqlite"


def _os_only(tmp_path: Path) -> Path:
    """CloverLeaf's export without its CUDA rows: its 1,831 OS runtime calls alone."""
    out = tmp_path / "os_only.sqlite"
    shutil.copyfile(CLOVER, out)
    out.chmod(0o644)
    with sqlite3.connect(out) as conn:
        for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                      "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_MEMCPY"):
            conn.execute(f"DELETE FROM {table}")
    return out


def test_a_trace_of_os_runtime_calls_alone_has_their_path(tmp_path: Path) -> None:
    """No op, runtime call nor device work: the path is the thread whose OS runtime
    calls hold it longest (CUDA's event handler thread's 29 ``poll`` and ``read`` calls,
    500.945 ms; the main thread's 1,797 hold it 354.7 ms), every one of them on it whole.
    The span runs from the trace's first event to its last call's end, and the line
    says so. Before: an empty table, "no critical path"."""
    f = _os_only(tmp_path)
    t = polyprof.load(f)
    assert not len(cache.correlation(t).device_rows) and not (t.kinds == Kind.RUNTIME).any()
    cp = critical_path(t)
    assert len(cp) == 1828  # every OS runtime call with a duration (3 markers of none)
    assert set(column(cp, "kind").tolist()) == {"os_runtime"}
    on = column(cp, "on_path_ns")
    held = on > 0
    assert set(column(cp, "track")[held].tolist()) == {"cuda-EvtHandlr"}
    path = int(column(cp, "path_ns")[0])
    assert path == int(on.sum()) == int(column(cp, "dur_ns")[held].sum()) == 500_945_012
    ev = t.events
    start = ev["start_ns"].astype(np.int64)
    end = start + ev["dur_ns"].astype(np.int64)
    os_rows = np.flatnonzero(ev["dur_ns"] > 0)
    assert int(column(cp, "span_ns")[0]) == int(end[os_rows].max() - start.min()) == 827_236_175
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(f)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    first = " ".join(r.stdout.split())
    assert first.startswith("critical path 501 ms of the trace's 827 ms (its first event to the end of its work)")
    assert "os_runtime 501 ms poll" in first


def test_os_runtime_calls_join_a_cuda_traces_path_where_they_hold_the_thread() -> None:
    """CloverLeaf: 981 of its 1,831 OS runtime calls lie in no CUDA call (the others, in
    ``cudaMalloc`` and ``cudaFree``, are those calls' own time), 950 of them on the
    program's threads (the 31 of the driver's two ``cuda-EvtHandlr`` threads, which do
    nothing else, are left out: depgraph_context.os_calls). Those on the main
    thread add their time to its path (``ioctl`` 112.2 ms, ``fopen`` 18.9 ms: 143.6 ms),
    and every event of the path before keeps its time on it: 698.6 ms where it was
    555.0 ms, ``cudaMalloc`` 239.7 ms and the kernels 294.4 ms as before. (710.2 ms
    since each synchronous ``cudaMemcpy`` waits for its copy, ``wait_links``: the host's
    calls after a copy follow it on the path, where the path ran on along the stream.)"""
    t = polyprof.load(CLOVER)
    cp = critical_path(t)
    kind, on, name = column(cp, "kind"), column(cp, "on_path_ns"), column(cp, "name")
    os_ = kind == "os_runtime"
    assert int(os_.sum()) == 950
    assert int(column(cp, "path_ns")[0]) == 710_198_740 == 561_486_596 + int(on[os_].sum())
    assert int(on[os_ & (name == "ioctl")].sum()) == 112_228_878
    assert int(on[name == "cudaMalloc"].sum()) == 239_700_887  # its ioctls in it: its own time, not split
    assert int(on[kind == "kernel"].sum()) == 294_404_540
    # no OS runtime call of the table lies inside a runtime call of its thread
    ev = t.events
    start = ev["start_ns"].astype(np.int64)
    end = start + ev["dur_ns"].astype(np.int64)
    rt = np.flatnonzero(t.kinds == Kind.RUNTIME)
    track = ev["track"].astype(np.int64)
    names = np.array([tr.name for tr in t.tracks], dtype=object)
    s, e = column(cp, "start_ns")[os_].astype(np.int64), column(cp, "start_ns")[os_] + column(cp, "dur_ns")[os_]
    tr = column(cp, "track")[os_]
    for a, b, where in zip(s.tolist(), e.tolist(), tr.tolist()):
        mine = rt[names[track[rt]] == where]
        assert not ((start[mine] <= a) & (end[mine] >= b)).any()
    # the span: from the trace's first event (a zero-length marker) to the last call's end
    assert int(column(cp, "span_ns")[0]) == 827_236_175


def test_a_cuda_trace_without_os_runtime_calls_keeps_its_path() -> None:
    """saxpy (no OSRT rows): the same path and span as without OS runtime calls, event for
    event (1.28 s and 2.02 s since its NVTX ranges are sections of the graph and each
    ``cudaMemcpy`` waits for its copy, ``tests/test_critical_path_nvtx.py``: 691 ms and 77
    rows before)."""
    cp = critical_path(polyprof.load(SAXPY))
    assert (int(column(cp, "path_ns")[0]), int(column(cp, "span_ns")[0])) == (1_279_938_395, 2_023_826_892)
    assert len(cp) == 99 and int(column(cp, "on_path_ns").sum()) == 1_279_533_694
    assert "os_runtime" not in column(cp, "kind").tolist()


def test_which_os_runtime_calls_lie_within_another_call() -> None:
    """``depgraph_context._within`` (one running maximum of the calls' ends per thread)
    against the pairwise test, on CloverLeaf's OS runtime and CUDA runtime calls: 847 of
    the OS runtime calls lie in a runtime call; the same with the second half of the
    trace moved 2**62 ns on (too wide to fold into one key: a pass per thread)."""
    from polyprof.analyze.depgraph_context import _within  # (the helper itself, against the pairwise test)

    t = polyprof.load(CLOVER)
    ev = t.events
    start = ev["start_ns"].astype(np.int64)
    end = start + ev["dur_ns"].astype(np.int64)
    thread = cache.threads(t)[ev["track"].astype(np.int64)]
    cat = ev["category"].astype(np.int64)
    q = np.flatnonzero((cat == t.string_id("os_runtime")) & (end > start))
    c = np.flatnonzero(t.kinds == Kind.RUNTIME)

    def pairwise(s: np.ndarray, e: np.ndarray) -> np.ndarray:
        return ((thread[c][None, :] == thread[q][:, None]) & (s[c][None, :] <= s[q][:, None])
                & (e[c][None, :] >= e[q][:, None])).any(axis=1)

    assert int(pairwise(start, end).sum()) == 847
    assert (_within(thread[c], start[c], end[c], thread[q], start[q], end[q]) == pairwise(start, end)).all()
    shift = np.where(start >= np.median(start), 2 ** 62, 0)
    s2, e2 = start + shift, end + shift
    assert (_within(thread[c], s2[c], e2[c], thread[q], s2[q], e2[q]) == pairwise(s2, e2)).all()
