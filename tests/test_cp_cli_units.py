"""``polyprof critical-path``'s times in the summary's units, and "the trace" for a trace
without steps.

Before, every time was milliseconds with three decimals: on kineto's
``docs/traces/after_fix_trace.json`` (a 140 ns trace, no steps) it printed "step 0:
critical path 0.000 ms of the step's 0.000 ms" and 0.000 for every op, where ``summary``
says "critical path 100 ns of the trace's 140 ns". The fixture is that file, unchanged
(tests/data/peers/README.md, ``kineto_docs/``).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from polyprof.analyze.frames import frame

FILE = Path(__file__).parent / "data" / "peers" / "kineto_docs" / "after_fix_trace.json"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_a_trace_without_steps_reads_as_summary_says_it():
    r = _cli("critical-path", str(FILE))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "critical path 100 ns of the trace's 140 ns (its first event to the end of its work)"
    assert lines[1].split() == ["rank", "kind", "on", "path", "name"]
    rows = [x.split() for x in lines[2:]]
    assert rows == [["0", "cpu_op", "30", "ns", "op1"], ["0", "cpu_op", "20", "ns", "op_record"],
                    ["0", "cpu_op", "20", "ns", "op_wait"], ["0", "cpu_op", "20", "ns", "op_evt_sync"],
                    ["0", "runtime", "10", "ns", "cudaLaunchKernel"]]
    s = _cli("summary", str(FILE))
    said = " ".join(s.stdout.split())
    assert "critical path 100 ns of the trace's 140 ns (its first event to the end of its work)" in said  # the same words


def test_what_if_of_a_trace_without_steps():
    r = _cli("critical-path", str(FILE), "--what-if", "0:op1:0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "  what-if: rank 0's 'op1' x0 (1 event): trace -30 ns"


def _print(numbers: list[int], path: int, span: int, on: list[int], change: int) -> list[str]:
    from polyprof.cli.critical_path import _print as cp_print

    n = len(on)
    table = frame({"step": np.zeros(n, np.int64), "rank": np.zeros(n, np.int64),
                   "name": np.array([f"op{i}" for i in range(n)], object), "kind": np.full(n, "kernel", object),
                   "start_ns": np.zeros(n, np.int64), "dur_ns": np.zeros(n, np.int64),
                   "on_path_ns": np.array(on, np.int64), "path_ns": np.full(n, path, np.int64),
                   "span_ns": np.full(n, span, np.int64)})
    what = [{"step": 0, "rank": 0, "name": "op", "factor": 2.0, "events": 1, "path_ns": path, "change_ns": change}]
    buf = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "200"
    try:
        with contextlib.redirect_stdout(buf):
            cp_print(table, what, [0], 10, np.array(numbers, np.int64))
    finally:
        os.environ.pop("COLUMNS") if old is None else os.environ.update(COLUMNS=old)
    return buf.getvalue().splitlines()


def test_steps_keep_their_words_in_the_summarys_units():
    lines = _print([12], 2_500_000_000, 3_100_000_000, [1_500_000_000, 750_000, 2_400], 12_345_678)
    assert lines[0] == "step 0 (#12): critical path 2.5 s of the step's 3.1 s (start to end of its work)"
    assert [x.split()[2:4] for x in lines[2:5]] == [["1.5", "s"], ["750", "µs"], ["2.4", "µs"]]
    assert lines[-1] == "  what-if: rank 0's 'op' x2 (1 event): step +12.3 ms"
