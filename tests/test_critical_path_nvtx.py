"""NVTX ranges of an Nsight Systems export are the user's sections on the critical path,
as ``polyprof.section`` is (``depgraph_context.sections``): their time in no graph call is
their thread's own; and a synchronous ``cudaMemcpy`` waits for its own copy
(``wait_links``: a waiting call that launched its own work), so the host's time after it
follows the copy. pipit's saxpy export (tests/data/nsys), an MPI rank: ``MPI_Init`` (646 ms,
holding the ``cudaHostRegister`` calls), then five iterations of ``MPI_Send``, copies, the
kernel and a copy back, ``MPI_Recv``.

Before, the graph left NVTX ranges out: "critical path 691 ms of the trace's 2.02 s",
only runtime calls, copies and kernels, the 646 ms of ``MPI_Init`` that the summary's
Sections table shows nowhere; with the ranges but the copy not linked to its
``cudaMemcpy``, the path ran from each copy back along the stream (1.07 s), the
``MPI_Recv`` and later ``MPI_Send`` ranges off it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze import depgraph
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.frames import column

SAXPY = Path(__file__).parent / "data" / "nsys" / "saxpy_2022.sqlite"


def test_nvtx_ranges_hold_their_time_on_the_path() -> None:
    """Every MPI range is on the path for all its time: its own (``on_path_ns``) and that
    of the calls inside it (the ``saxpy`` ranges, 41 to 59 µs around a kernel launch, are
    off it where the copy before ended 35 µs after its ``cudaMemcpy`` returned: the two
    clocks disagree, and the copy is not linked to the call). ``MPI_Init`` holds 329.3 ms, its ``cudaHostRegister`` calls
    the rest of its 645.7 ms; ``MPI_Send`` 136 ms and ``MPI_Recv`` 108 ms, as the Sections
    table's totals; the path is the ranges, the calls and the device work between them,
    1.28 s of the trace's 2.02 s (the rest: time in no event between ranges)."""
    t = polyprof.load(SAXPY)
    cp = critical_path(t)
    name, kind = column(cp, "name"), column(cp, "kind")
    start, dur, on = (np.asarray(column(cp, c), np.int64) for c in ("start_ns", "dur_ns", "on_path_ns"))
    track = column(cp, "track")
    nvtx = np.flatnonzero(np.isin(name, ["MPI_Init", "MPI_Send", "MPI_Recv", "MPI_Finalize"]) & (kind == "annotation"))
    assert len(nvtx) == 17  # MPI_Init, 10 MPI_Send, 5 MPI_Recv, MPI_Finalize
    host = np.flatnonzero(track == track[nvtx[0]])
    for r in nvtx.tolist():
        inside = host[(start[host] >= start[r]) & (start[host] + dur[host] <= start[r] + dur[r]) & (host != r)]
        assert on[r] + int(on[inside].sum()) == dur[r], name[r]
    init = nvtx[name[nvtx] == "MPI_Init"][0]
    assert abs(int(on[init]) - 329_250_000) < 100_000 and dur[init] > 645_000_000
    for n, total in (("MPI_Send", 136e6), ("MPI_Recv", 108e6)):
        assert abs(int(on[nvtx[name[nvtx] == n]].sum()) - total) < 1e6, n
    path = int(column(cp, "path_ns")[0])
    assert 1.27e9 < path <= int(column(cp, "span_ns")[0])


def test_a_synchronous_copys_call_waits_for_its_copy() -> None:
    """A ``cudaMemcpy`` ends once its copy has: the graph has an edge from the copy's end
    into the call's (weighing nothing) for each of the 5 copies back to the host (the 10
    to the device end 31 to 36 µs after their call returned, the two clocks apart: not
    linked, as any link the timestamps contradict); the copies are on the path and the
    calls hold none of it (before: no such edge, and the path ran on along the stream
    from each copy back)."""
    t = polyprof.load(SAXPY)
    ev = t.events
    start = np.asarray(ev["start_ns"], np.int64)
    g = depgraph.build(t, int(start.min()), int((start + np.asarray(ev["dur_ns"], np.int64)).max()) + 1)
    names = np.asarray(ev["name"], np.int64)[g.rows]
    call = np.flatnonzero(names == t.string_id("cudaMemcpy"))
    copy = np.flatnonzero(g.device & (np.asarray(ev["category"], np.int64)[g.rows] == t.string_id("gpu_memcpy")))
    assert len(call) == len(copy) == 15
    sync = g.etype == depgraph.EDGE_TYPES.index("sync_dependency")
    linked = {(int(a) >> 1, int(b) >> 1) for a, b in zip(g.src[sync], g.dst[sync]) if a % 2 and b % 2}
    # each call's copy: the one it launched (the calls and copies in time order)
    pairs = list(zip(call[np.argsort(g.time[2 * call])].tolist(), copy[np.argsort(g.time[2 * copy])].tolist()))
    agree = [(c, d) for c, d in pairs if g.time[2 * d + 1] <= g.time[2 * c + 1] + 1_000]
    assert len(agree) == 5 and all((d, c) in linked for c, d in agree)
    cp = critical_path(t)
    kind, name = column(cp, "kind"), column(cp, "name")
    on = np.asarray(column(cp, "on_path_ns"), np.int64)
    dur = np.asarray(column(cp, "dur_ns"), np.int64)
    copies = kind == "memcpy"
    assert copies.sum() == 15 and (on[copies] == dur[copies]).all()
    assert (on[name == "cudaMemcpy"] == 0).all()
