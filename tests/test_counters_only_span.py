"""A trace of counters alone (no events) is analysed over its samples' span, as the
summary's header says of the trace span: it said "trace span 3 s, analysed span 0 ns"
of a Perfetto trace of 30,001 counter samples while the counters table used them all
(analyze/common.py ``_span``). Perfetto's own gpu_counters test trace
(tests/data/peers/perfetto/) holds counter samples only, from 11 to 34 ns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polyprof
from polyprof.analyze.common import analysed_span

TRACE = Path(__file__).parent / "data" / "peers" / "perfetto" / "gpu_counters.pftrace"


def test_the_analysed_span_is_the_counters_span() -> None:
    t = polyprof.load(TRACE)
    assert t.n_events == 0 and len(t.counters["ts_ns"]) == 13
    assert analysed_span(t) == t.extent_ns == (11, 34)


def test_the_summary_header_agrees_with_itself() -> None:
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(TRACE)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ov = json.loads(r.stdout)["overview"]
    assert (ov["trace_span_ns"], ov["analysed_span_start_ns"], ov["analysed_span_ns"]) == (23, 11, 23)
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(TRACE)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert "trace span 23 ns, analysed span 23 ns" in r.stdout, r.stdout
