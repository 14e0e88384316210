"""A program that runs out of memory (``RLIMIT_AS``) and goes on under ``polyprof run``:
polyprof's background threads (the process sampler, the crash journal) meet
``MemoryError`` too. They must not write into the program's stderr (before: ``Exception
ignored in: <function _forgetting_thread.<locals>.tick ...> MemoryError``, and both
threads ended for good), must go on once memory is back, and the trace says it once in
its warnings (collect/background.py). Real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"

# fill the address space down to 64-byte blocks, keep trying to allocate for a while
# (the sampler wakes every 20 ms, the journal every 0.5 s), then give it all back and
# sleep: the sampler must still be sampling then
PROGRAM = """\
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
held, size = [], 1 << 20
while size >= 64:
    try:
        while True:
            held.append(bytearray(size))
    except MemoryError:
        size //= 2
deadline = time.monotonic() + 1.5
while time.monotonic() < deadline:
    time.sleep(0.005)
    try:
        held.append(bytearray(64))
    except MemoryError:
        pass
del held
freed = time.monotonic_ns()
time.sleep(0.4)
print("done", flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as Linux counts it")
def test_running_out_of_memory_prints_nothing_and_the_sampler_goes_on(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    seen_oom = False
    for _ in range(3):  # how much the threads meet depends on timing: three tries at most
        p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "t.polyprof", "prog.py"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=180)
        assert p.returncode == 0, p.stderr
        assert p.stdout == "done\n"
        assert "Exception ignored" not in p.stderr and "MemoryError" not in p.stderr, p.stderr
        assert "trace written to t.polyprof" in p.stderr
        trace = polyprof.load(tmp_path / "t.polyprof")
        warned = [w for w in trace.metadata["warnings"] if "ran out of memory" in str(w)]
        assert len(warned) <= 1
        # the sampler lived through it: it sampled in the 0.4 s after the memory was freed
        rss = trace.counters
        names = np.asarray(trace.strings, dtype=object)[rss["name"]]
        ts = rss["ts_ns"][names == "process.rss_bytes"]
        vals = rss["value"][names == "process.rss_bytes"]
        assert vals.max() > 500 * 2**20  # it did fill the memory
        low = ts[vals < 200 * 2**20]
        assert len(low) and (ts[-1] - low[0]) > 0  # samples after the free, not only the stop's
        assert (low > ts[np.argmax(vals)]).sum() >= 5, (len(low), len(ts))
        if warned:
            seen_oom = True
            assert "background" in str(warned[0]) and (tmp_path / "t.polyprof.partial").exists() is False
            break
    assert seen_oom, "the background threads never met MemoryError in three runs"
