"""A thread whose only rows are OS runtime calls (Nsight Systems' ``OSRT_API``) does not
hold the critical path of a trace whose other threads issue the program's work (runtime
calls, ops, sections): such threads are the CUDA driver's, CUPTI's and Nsight's own
(``cuda-EvtHandlr``'s blocking ``poll``, ``CUPTI worker thread``'s ``ioctl``), tied by
nothing in the trace to the work the graph follows (``depgraph_context.os_calls``).

Before: an export of a small CUDA program (0x822a5b87/test-cuda's ``report2.sqlite``,
nsys 2026.1.1; not kept: its repository has no licence) read "critical path 1.3 s ...
os_runtime 1.3 s poll": the driver's event handler thread's 16 ``poll`` calls alone,
while the program's thread, with every CUDA call, kernel and copy, had no row on the
path. :func:`_export` writes that export's layout (its tables' columns, its thread
names and ids) with its rows rounded to the microsecond, the program thread's OS calls
and the runtime calls under 10 µs left out. CloverLeaf's export (tests/data/nsys, pipit's,
MIT) has two ``cuda-EvtHandlr`` threads too."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.frames import column

CLOVER = Path(__file__).parent / "data" / "nsys" / "cloverleaf_2024.sqlite"

PID = 282464362692608  # the export's globalPid of the program (globalTid with the tid bits cleared)
MAIN, EVT, CUPTI, WORKER = 282464362751580, 282464362751601, 282464362751598, 282464362751597  # (its globalTids)
THREADS = {MAIN: "async.out", EVT: "cuda-EvtHandlr", CUPTI: "CUPTI worker thread", WORKER: "cuda0000340000e"}
MS = 1_000_000
US = 1_000

#: the program thread's runtime calls: (start µs, duration µs, name, correlation id)
RUNTIME = [
    (542_118, 368_449, "cudaHostAlloc_v3020", 118), (910_573, 222_480, "cudaHostAlloc_v3020", 119),
    (1_133_057, 223_803, "cudaHostAlloc_v3020", 120), (1_500_005, 2_869, "cudaMalloc_v3020", 121),
    (1_502_879, 2_525, "cudaMalloc_v3020", 122), (1_505_406, 2_197, "cudaMalloc_v3020", 123),
    (1_507_604, 468, "cudaEventCreate_v3020", 124), (1_508_073, 487, "cudaEventRecord_v3020", 126),
    (1_508_562, 23, "cudaStreamCreate_v3020", 127), (1_508_588, 27, "cudaMemcpyAsync_v3020", 131),
    (1_508_700, 37_242, "cudaLaunchKernel_v7000", 133), (1_545_944, 40, "cudaMemcpyAsync_v3020", 134),
    (1_545_986, 11, "cudaMemcpyAsync_v3020", 135), (1_546_030, 29, "cudaLaunchKernel_v7000", 137),
    (1_546_060, 11, "cudaMemcpyAsync_v3020", 138), (1_546_114, 25, "cudaLaunchKernel_v7000", 141),
    (1_546_139, 18, "cudaMemcpyAsync_v3020", 142), (1_546_202, 63, "cudaLaunchKernel_v7000", 145),
    (1_546_265, 14, "cudaMemcpyAsync_v3020", 146), (1_546_280, 16, "cudaEventRecord_v3020", 147),
    (1_546_298, 81_424, "cudaEventSynchronize_v3020", 148), (1_716_057, 2_999, "cudaFree_v3020", 155),
    (1_719_059, 1_831, "cudaFree_v3020", 156), (1_720_892, 1_931, "cudaFree_v3020", 157),
    (1_722_825, 54_530, "cudaFreeHost_v3020", 158), (1_777_359, 55_370, "cudaFreeHost_v3020", 159),
    (1_832_733, 57_535, "cudaFreeHost_v3020", 160),
]
#: kernels (start µs, duration µs, stream, correlation id)
KERNELS = [(1_546_027, 1_347, 13, 133), (1_570_478, 1_164, 14, 137), (1_594_673, 1_173, 15, 141),
           (1_618_848, 1_157, 16, 145)]
#: copies of 100 MB (start µs, duration µs, stream, correlation id, copyKind 1 HtoD / 2 DtoH)
COPIES = [(1_525_628, 7_692, 13, 131, 1), (1_547_415, 7_580, 13, 134, 2), (1_554_997, 7_693, 14, 135, 1),
          (1_571_692, 7_579, 14, 138, 2), (1_595_891, 7_579, 15, 142, 2), (1_620_049, 7_578, 16, 146, 2)]
#: the driver's event handler thread: ``poll`` calls (a 100 ms timeout each once the
#: program has pinned its buffers) with a ``read`` between some (start µs, duration µs, name)
EVT_CALLS = ([(542_842, 80_662, "poll"), (623_843, 2, "read"), (623_849, 19_085, "poll"),
              (642_943, 21_263, "poll"), (664_236, 2, "read"), (664_252, 13_197, "poll"),
              (677_455, 2, "read"), (677_474, 66_152, "poll")]
             + [(s, d, "poll") for s, d in ((743_666, 100_194), (843_901, 100_154), (944_096, 100_150),
                                             (1_044_290, 100_141), (1_144_465, 100_222), (1_244_726, 100_135),
                                             (1_344_892, 100_158), (1_445_098, 100_162), (1_545_301, 100_192),
                                             (1_645_536, 100_159), (1_745_735, 100_181))])
#: CUPTI's and the driver's worker threads (thread, start µs, duration µs, name)
HELPER_CALLS = [(WORKER, 197_820, 444, "poll"), (WORKER, 198_607, 1, "read"), (CUPTI, 1_890_496, 25, "ioctl"),
                (CUPTI, 1_890_712, 11, "ioctl"), (CUPTI, 1_903_906, 21, "ioctl")]


def _export(path: Path) -> Path:
    """The test-cuda export's tables that the reader reads, with the rows above."""
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        return strings.setdefault(s, len(strings) + 1)

    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER)")
    con.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, "end" INTEGER NOT NULL, '
                "eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
                "returnValue INTEGER NOT NULL, callchainId INTEGER)")
    con.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, "end" INTEGER NOT NULL, '
                "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
                "correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, "
                "shortName INTEGER NOT NULL, gridX INTEGER NOT NULL, blockX INTEGER NOT NULL)")
    con.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, "end" INTEGER NOT NULL, '
                "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
                "correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, "
                "srcKind INTEGER, dstKind INTEGER)")
    con.execute('CREATE TABLE OSRT_API (start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL, '
                "globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER, "
                "callchainId INTEGER NOT NULL, argumentsId INTEGER NOT NULL)")
    con.executemany("INSERT INTO ThreadNames VALUES (?, 0, ?)", [(sid(n), g) for g, n in THREADS.items()])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, 0)",
                    [(s * US, (s + d) * US, MAIN, c, sid(n)) for s, d, n, c in RUNTIME])
    add = sid("add_parallel(float *, float *, float *, int)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, ?, ?, ?, ?, ?, 97657, 256)",
                    [(s * US, (s + d) * US, st, c, PID, add, add) for s, d, st, c in KERNELS])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, ?, ?, ?, 100000000, ?, 2, 1)",
                    [(s * US, (s + d) * US, st, c, PID, k) for s, d, st, c, k in COPIES])
    os_rows = [(EVT, s, d, n) for s, d, n in EVT_CALLS] + HELPER_CALLS
    con.executemany("INSERT INTO OSRT_API VALUES (?, ?, 27, ?, ?, 0, 0, 0, 0)",
                    [(s * US, (s + d) * US, g, sid(n)) for g, s, d, n in os_rows])
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    con.commit()
    con.close()
    return path


def test_the_driver_threads_poll_is_not_the_path_of_a_cuda_program(tmp_path: Path) -> None:
    """The event handler's 16 polls (1.30 s) hold their thread longer than the program's
    calls hold its own; still the path is the program's thread: every runtime call whole
    (``cudaHostAlloc`` 814.7 ms, ``cudaFreeHost`` 167.4 ms, ...) but the wait of
    ``cudaEventSynchronize``, a waiting call (1.035 s). The helper threads' OS calls are
    in no row of the table. Before: "critical path 1.3 s ... os_runtime 1.3 s poll"."""
    f = _export(tmp_path / "test_cuda.sqlite")
    cp = critical_path(polyprof.load(f))
    track, kind, name = column(cp, "track"), column(cp, "kind"), column(cp, "name")
    on, dur = column(cp, "on_path_ns"), column(cp, "dur_ns")
    assert sum(d for _, d, n in EVT_CALLS if n == "poll") * US == 1_302_207_000
    assert "os_runtime" not in kind.tolist()
    assert {x for x in track.tolist() if not x.startswith("stream ")} == {"async.out"}
    assert len(cp) == len(RUNTIME) + len(KERNELS) + len(COPIES)
    path = int(column(cp, "path_ns")[0])
    runtime = kind == "runtime"
    assert path == int(on.sum()) == int(on[runtime].sum()) == 1_034_993_000
    assert path == int(dur[runtime].sum()) - 81_424 * US  # every runtime call but the event sync's wait
    assert int(on[name == "cudaHostAlloc"].sum()) == (368_449 + 222_480 + 223_803) * US
    assert int(on[name == "cudaEventSynchronize"].sum()) == 0
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(f)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert out.startswith("critical path 1.03 s of the trace's 1.69 s"), out
    assert "poll" not in out and "runtime 815 ms cudaHostAlloc" in out, out


def test_cloverleaf_keeps_its_path_without_its_event_handlers_calls() -> None:
    """CloverLeaf: its two ``cuda-EvtHandlr`` threads' 31 OS runtime calls (501 ms of
    ``poll``) leave the table (981 OS runtime calls in it before); the path (710.2 ms, the
    main thread's calls and its device work) and the times on it are as before, and its
    main thread's 950 OS runtime calls outside a CUDA call stay in it."""
    cp = critical_path(polyprof.load(CLOVER))
    track, kind, on = column(cp, "track"), column(cp, "kind"), column(cp, "on_path_ns")
    assert "cuda-EvtHandlr" not in track.tolist()
    assert int((kind == "os_runtime").sum()) == 950
    assert set(track[kind == "os_runtime"].tolist()) == {"cuda-cloverleaf"}
    assert int(column(cp, "path_ns")[0]) == 710_198_740  # (its waits and launch delays: no event's)
    assert int(on[kind == "os_runtime"].sum()) == 710_198_740 - 561_486_596  # as before
    assert int(on[kind == "kernel"].sum()) == 294_404_540


def test_a_trace_of_os_calls_alone_keeps_every_thread(tmp_path: Path) -> None:
    """CloverLeaf without its CUDA rows: no thread issues a runtime call, op or section,
    so every thread's OS calls stay and the longest-held thread is the path, the event
    handler's (500.9 ms), as ``test_critical_path_os_runtime.py`` has it."""
    from test_critical_path_os_runtime import _os_only  # (the same export without its CUDA rows)

    cp = critical_path(polyprof.load(_os_only(tmp_path)))
    held = column(cp, "on_path_ns") > 0
    assert len(cp) == 1828
    assert set(column(cp, "track")[held].tolist()) == {"cuda-EvtHandlr"}
    assert int(column(cp, "path_ns")[0]) == 500_945_012
    assert np.isin(column(cp, "track"), ["cuda-EvtHandlr", "cuda-cloverleaf"]).all()
