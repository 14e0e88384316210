"""A time window without a whole step (``polyprof run --delay D --duration T``) is
analysed as that window (``analyze/window.py``, ``Selection.timed``): its critical path
too, not the whole trace's, and its sync stall counts the call that waited through it.
Real recordings: OpenCL on PoCL under ``polyprof run``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.common import analysed_span
from polyprof.analyze.critical_path import critical_path, step_windows
from polyprof.analyze.frames import column
from polyprof.analyze.sync import sync_by_thread
from polyprof.analyze.window import AUTO, view
from polyprof.derive import cache

_HEAD = """
import sys, time
import numpy as np
import pyopencl as cl
import polyprof
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
prg = cl.Program(ctx, '''
__kernel void axpy(__global float *a, __global const float *b, int n) {
  int i = get_global_id(0); float x = a[i];
  for (int k = 0; k < n; k++) x = x * 0.999f + b[i];
  a[i] = x; }
''').build()
knl = prg.axpy
a = np.ones(1 << 16, np.float32); b = np.ones_like(a)
mf = cl.mem_flags
da = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
db = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
"""

# steps of 8 kernels, each followed by a short sleep (so that a window shorter than a
# step holds launches), and a read, inside an 'epoch' section around the whole loop
_EPOCH = _HEAD + """
with polyprof.section("epoch"):
    for step in range(int(sys.argv[1])):
        with polyprof.section("step_work"):
            for j in range(8):
                knl(q, a.shape, None, da, db, np.int32(100))
                time.sleep(float(sys.argv[2]) / 8)
            cl.enqueue_copy(q, a, da)
        polyprof.step()
"""

# many long kernels queued at once, then one clFinish waiting for them (seconds)
_FINISH = _HEAD + """
for j in range(int(sys.argv[1])):
    knl(q, a.shape, None, da, db, np.int32(600))
q.finish()
polyprof.step()
"""


def _run(tmp_path: Path, name: str, program: str, args: list[str], prog: list[str]) -> tuple[polyprof.Trace, str]:
    script = tmp_path / f"{name}.py"
    script.write_text(program)
    out = tmp_path / f"{name}.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "-o", str(out), *args, str(script), *prog],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return polyprof.load(out), r.stdout


@pytest.mark.opencl
def test_a_time_windows_critical_path_is_the_windows(tmp_path: Path) -> None:
    """``--delay 1 --duration 0.05`` of 80 ms steps in an 'epoch' section: the summary
    analysed 50 ms but said "critical path 2.46 s of the trace's 2.46 s", the epoch
    section (begun before the window) 95% of it. The path is the window's: its events
    that start in it, the calls cut at its end, as a step's."""
    t, text = _run(tmp_path, "epoch", _EPOCH, ["--delay", "1.0", "--duration", "0.05"], ["16", "0.08"])
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    assert not len(cache.steps(t)) and analysed_span(t, AUTO) == (lo, hi)
    assert t.span_ns[1] - t.span_ns[0] > 1_000_000_000  # the epoch section: the whole loop
    numbers, starts, ends = step_windows(view(t, AUTO))
    assert numbers.tolist() == [-1] and (starts.tolist(), ends.tolist()) == ([lo], [hi])
    cp = critical_path(t, AUTO)
    assert len(cp) and set(column(cp, "step").tolist()) == {-1}
    assert "epoch" not in column(cp, "name").tolist()
    assert (column(cp, "start_ns") >= lo).all()  # host calls start in it, device work after them
    host = ~np.isin(column(cp, "kind"), ["kernel", "memcpy", "memset", "collective", "sync"])
    assert (column(cp, "start_ns")[host] < hi).all()
    path, span = int(column(cp, "path_ns")[0]), int(column(cp, "span_ns")[0])
    assert 0 < path <= span < (hi - lo) + 50_000_000  # the window, with the device work it launched
    assert "of the analysed span's" in text and "of the trace's" not in text
    # the trace without its window: the whole trace, as before
    whole = critical_path(t)
    assert "epoch" in column(whole, "name").tolist()
    assert int(column(whole, "path_ns")[0]) > 1_000_000_000


@pytest.mark.opencl
def test_a_sync_call_waiting_through_the_window_counts(tmp_path: Path) -> None:
    """A window inside one clFinish of seconds: the thread spent all of it waiting, and
    the finding said "calls=0" (the call began before the window). It counts."""
    t, text = _run(tmp_path, "finish", _FINISH, ["--delay", "0.8", "--duration", "0.3"], ["60"])
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    fin = np.flatnonzero(t.names() == "clFinish")
    st = t.events["start_ns"][fin]
    en = st + t.events["dur_ns"][fin]
    assert ((st < lo) & (en >= hi)).any(), "the window is not inside the clFinish: the program ran too fast"
    s = sync_by_thread(t, AUTO)
    assert column(s, "sync_ns")[0] == hi - lo
    assert column(s, "calls")[0] == 1
    assert "calls=1," in text and "calls=0" not in text
