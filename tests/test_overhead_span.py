"""The analysed span of a trace without steps leaves out the profiler's own work (category
``overhead``: rocpd's ``rpdflush`` and table writes after the program's last event), which
had made an RPD trace's device 16.4% idle where it was 8.0% over the program's span."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.common import analysed_span
from polyprof.analyze.window import select

RPD = Path(__file__).parent / "data" / "rpd" / "mytrace.rpd.gz"
MATMUL = Path(__file__).parent / "data" / "rpd" / "matmul_result.rpd"


def test_the_profilers_flush_does_not_stretch_the_analysed_span(tmp_path: Path) -> None:
    path = tmp_path / "mytrace.rpd"
    path.write_bytes(gzip.decompress(RPD.read_bytes()))
    t = polyprof.load(path)
    ev = t.events
    end = ev["start_ns"] + ev["dur_ns"]
    overhead = t.categories() == "overhead"
    assert overhead.any() and int(end[overhead].max()) == int(end.max())  # the flush is the trace's end
    t0, t1 = analysed_span(t)
    assert (t0, t1) == (int(ev["start_ns"][~overhead].min()), int(end[~overhead].max()))
    assert int(end.max()) - t1 > 40_000_000  # 41.8 ms of flush and table writes left out
    assert np.count_nonzero(overhead) == 21


def test_the_label_names_the_overhead_left_out_of_the_span():
    """The window's label says the overhead rows are left out and how long the rest is, so
    "whole trace" beside a shorter analysed span (the RPD auditor's 8.34 s of 92.3 s)
    contradicts nothing."""
    trace = polyprof.load(MATMUL)
    t0, t1 = trace.span_ns
    a0, a1 = analysed_span(trace)
    assert (a1 - a0) < (t1 - t0)  # the overhead rows: after the rest
    label = select(trace, None).label
    assert label.startswith("whole trace (no steps; the profiler's own overhead rows left out"), label
    assert "the rest spans 3.27 s of the trace's 3.38 s" in label, label
    assert f"{(a1 - a0) / 1e9:.2f} s" == "3.27 s"


def test_a_trace_without_overhead_rows_keeps_its_label():
    trace = polyprof.load(Path(__file__).parent / "data" / "traces" / "kineto" / "a100_alexnet_small.json.gz")
    assert "overhead" not in select(trace, None).label
