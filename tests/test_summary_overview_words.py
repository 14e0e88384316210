"""What the summary says beside its tables, on real files: why a GPU trace has no launch
calls to match (an nvprof run with the API not traced is not a TPU), and what the
critical path line's span is (the path graph's, start to end of its work, which the
header's trace span need not equal).

Files: tests/data/peers/blinkplus_nccl/output.nvvp.xz (nvprof, CUDA 11.5, V100s; its API
tables dropped here, as an ``nvprof --analysis-metrics`` run without API tracing writes
none), tests/data/nsys/cloverleaf_2024.sqlite (Nsight Systems 2024.5; see the README.md
beside each)."""

from __future__ import annotations

import io
import json
import lzma
import sqlite3
import subprocess
import sys
from pathlib import Path

from rich.console import Console

import polyprof
from polyprof.report.tables import build
from polyprof.report.terminal import print_summary

DATA = Path(__file__).parent / "data"
NVVP = DATA / "peers" / "blinkplus_nccl" / "output.nvvp.xz"
CLOVER = DATA / "nsys" / "cloverleaf_2024.sqlite"
TPU = DATA / "traces" / "xspace" / "tpu_inference_2.xplane.pb"


def _summary(trace: polyprof.Trace) -> str:
    buf = io.StringIO()
    print_summary(trace, console=Console(file=buf, width=200))
    return buf.getvalue()


def _without_api(tmp_path: Path) -> Path:
    """The nvprof file without its runtime and driver API records."""
    out = tmp_path / "no_api.nvvp"
    out.write_bytes(lzma.decompress(NVVP.read_bytes()))
    conn = sqlite3.connect(out)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    dropped = [t for t in tables if t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")]
    assert "CUPTI_ACTIVITY_KIND_RUNTIME" in dropped
    for t in dropped:
        conn.execute(f"DROP TABLE {t}")
    conn.commit()
    conn.close()
    return out


def test_a_cuda_trace_without_api_records_is_not_called_a_tpu(tmp_path: Path) -> None:
    f = _without_api(tmp_path)
    t = polyprof.load(f)
    ov = build(t).overview
    assert ov["correlation"]["device_activities"] > 0 and not ov["correlation"].get("launch_calls")
    why = ov["no_launch_calls"]
    assert "CUDA runtime and driver API calls were not recorded" in why and "TPU" not in why, why
    text = " ".join(_summary(t).split())
    assert why in text and "TPUs" not in text
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(f)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["overview"]["no_launch_calls"] == why  # what the HTML report's overview shows


def test_a_tpu_trace_still_has_whole_compiled_programs() -> None:
    why = build(polyprof.load(TPU)).overview["no_launch_calls"]
    assert "devices that run whole compiled programs, such as TPUs, have none" in why


def test_critical_path_line_says_its_span_is_the_works() -> None:
    """The line's span (827 ms: from the trace's first event to the last end of the
    path graph's work, an OS runtime call's) against the header's trace span (830 ms,
    to its last event, a marker): the line says which span it is. (Before the graph took
    OS runtime calls, tests/test_critical_path_os_runtime.py: "555 ms of the trace's
    826 ms"; "699 ms" before each ``cudaMemcpy`` waited for its copy.)"""
    t = polyprof.load(CLOVER)
    text = " ".join(_summary(t).split())
    assert "trace span 830 ms" in text
    assert "critical path 710 ms of the trace's 827 ms (its first event to the end of its work)" in text
