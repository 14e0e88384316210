"""``polyprof critical-path`` says the path's time no event owns (launch delays, a
stream's gaps, waits) and gives no per-rank share for one rank.

Before, on HTA's ``tests/data/call_stack/backward_thread.json`` (kept unchanged in
tests/data/peers/hta_call_stack/) it printed "critical path 64.2 ms of the step's 395 ms
...; rank 0 holds 0% of it" and four rows of 97 µs together: 99.8% of the path is the
cutlass kernel's 64.1 ms launch delay (cudaLaunchKernel at ts 364374 µs, the kernel at
428509 µs), which no row showed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FILE = Path(__file__).parent / "data" / "peers" / "hta_call_stack" / "backward_thread.json"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", "critical-path", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})


def _raw() -> dict[str, dict]:
    return {e["cat"]: e for e in json.loads(FILE.read_text())["traceEvents"] if e["cat"] in ("kernel", "cuda_runtime")}


def test_the_launch_delay_is_said_and_the_parts_add_up() -> None:
    raw = _raw()
    delay_ns = (raw["kernel"]["ts"] - raw["cuda_runtime"]["ts"]) * 1000  # HTA's launch delay edge: launch to kernel
    assert delay_ns == 64_135_000
    r = _cli(str(FILE), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rows, waits = out["critical_path"], out["waits"]
    path = rows[0]["path_ns"]
    assert path == 64_232_000
    assert sum(x["on_path_ns"] for x in rows) + sum(w["ns"] for w in waits) == path
    assert [(w["kind"], w["ns"], w["longest_ns"], w["from"], w["to"]) for w in waits] == [
        ("launch delays", delay_ns, delay_ns, "cudaLaunchKernel", raw["kernel"]["name"])]


def test_one_rank_has_no_share_line_and_the_text_names_the_delay() -> None:
    r = _cli(str(FILE))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "step 0 (#552): critical path 64.2 ms of the step's 395 ms (start to end of its work)"
    assert "holds" not in r.stdout
    assert lines[-1] == ("  in no event: 64.1 ms (99.8% of the path): launch delays 64.1 ms; the longest 64.1 ms, "
                         "cudaLaunchKernel -> cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>")
    # (200 columns: the kernel's name as far as it fits; at 48 characters whatever the width, "Kernel" before)
    assert len(lines) == 7  # header, column names, the four events, the waits


def test_rows_past_the_top_are_counted() -> None:
    r = _cli(str(FILE), "-n", "2")
    assert r.returncode == 0, r.stderr
    assert "  (+2 more, 8 µs on the path)" in r.stdout.splitlines()  # AddmmBackward0 6 µs, its caller's 2 µs
