"""OpenCL programs (pyopencl on PoCL) that the time-window tests record under
``polyprof run``, and the recording: one preamble (a context, an in-order queue, an
``axpy`` kernel of N iterations per element, two buffers), then each program's loop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polyprof


def head(size: int = 1 << 16) -> str:
    """The preamble: ``ctx``, ``q``, ``prg``/``knl`` (``axpy(a, b, n)``), host arrays
    ``a``, ``b`` of ``size`` floats and their buffers ``da``, ``db``; ``sys``, ``time``,
    ``np``, ``cl`` and ``polyprof`` imported."""
    return f"""
import sys, time
import numpy as np
import pyopencl as cl
import polyprof
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
prg = cl.Program(ctx, '''
__kernel void axpy(__global float *a, __global const float *b, int n) {{
  int i = get_global_id(0); float x = a[i];
  for (int k = 0; k < n; k++) x = x * 0.999f + b[i];
  a[i] = x; }}
''').build()
knl = prg.axpy
a = np.ones({size}, np.float32); b = np.ones_like(a)
mf = cl.mem_flags
da = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
db = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
"""


HEAD = head()

#: argv: steps, seconds a step. Steps of 8 kernels, each followed by a short sleep (so
#: that a window shorter than a step holds launches), and a read, each step's work in a
#: 'step_work' section, inside an 'epoch' section around the whole loop
EPOCH = HEAD + """
with polyprof.section("epoch"):
    for step in range(int(sys.argv[1])):
        with polyprof.section("step_work"):
            for j in range(8):
                knl(q, a.shape, None, da, db, np.int32(100))
                time.sleep(float(sys.argv[2]) / 8)
            cl.enqueue_copy(q, a, da)
        polyprof.step()
"""

#: argv: kernels. Many long kernels (~0.1 s each on PoCL) queued at once, then one
#: clFinish waiting for them (seconds)
FINISH = HEAD + """
for j in range(int(sys.argv[1])):
    knl(q, a.shape, None, da, db, np.int32(600))
q.finish()
polyprof.step()
"""


def record(tmp_path: Path, name: str, program: str, run_args: list[str], prog_args: list[str],
           summary: bool = True) -> tuple[polyprof.Trace, str]:
    """``program`` written to ``tmp_path/NAME.py`` and run under ``polyprof run -o
    NAME.polyprof RUN_ARGS`` with ``prog_args``: the trace and what the run printed (its
    summary, unless ``summary`` is False)."""
    script = tmp_path / f"{name}.py"
    script.write_text(program)
    out = tmp_path / f"{name}.polyprof"
    quiet = [] if summary else ["--no-summary"]
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", *quiet, "-o", str(out), *run_args, str(script),
                        *prog_args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return polyprof.load(out), r.stdout
