"""The low-MFU finding's words and evidence (audF F6): its title gives the MFU as the
MFU line does, each op it lists once, and its rates with their units in the terminal."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

import polyprof
from polyprof.analyze import peaks
from polyprof.analyze.efficiency_findings import _low_mfu
from polyprof.analyze.frames import column
from polyprof.analyze.registry import Tables
from polyprof.analyze.units import fmt_share
from polyprof.report.efficiency_text import mfu_line
from polyprof.report.terminal import _event_text

DATA = Path(__file__).parent / "data"


def test_an_op_of_several_rows_is_listed_once():
    """jax_transformer_h200's command buffer ran three cuBLAS kernels that share its cost by
    time: three op_efficiency rows of one name, listed thrice, alike, before; now one
    event with their calls, time and lost time summed, and the rate of their FLOPs."""
    t = polyprof.load(DATA / "h200" / "jax_transformer_h200.xplane.pb.gz")
    tables = Tables(t)
    (low,) = _low_mfu(t, lambda k: tables[k])
    names = [e["name"] for e in low.events]
    assert len(names) == len(set(names)) and names[0] == "jit_step/command_buffer_1"
    oe = tables["op_efficiency"]
    rows = np.flatnonzero(column(oe, "name") == "jit_step/command_buffer_1")
    assert len(rows) > 1
    e = low.events[0]
    assert e["count"] == column(oe, "count")[rows].sum() and e["time_ns"] == column(oe, "time_ns")[rows].sum()
    assert e["flops_per_s"] == float(f"{np.nansum(column(oe, 'flops')[rows]) / e['time_ns'] * 1e9:.4g}")
    assert e["lost_ns"] == sum(column(oe, "time_ns")[rows] * (1 - column(oe, "roofline_pct")[rows] / 100))
    assert low.title.startswith("Model FLOPs utilisation is 24.7% (tf32); most lost in jit_step/command_buffer_1, ")
    # the terminal gives the rate with its unit (before: flops_per_s=298200000000000.0)
    assert "flops_per_s=298 TFLOP/s" in _event_text(e)


def test_title_rounds_as_the_mfu_line():
    """``MFU 0.175%`` on the line, "0.2%" in the title, before."""
    assert fmt_share(0.17549) == "0.175" and fmt_share(24.75) == "24.8" and fmt_share(0.0347) == "0.0347"
    t = polyprof.load(DATA / "traces" / "autocast_cpu" / "autocast_cpu.json.gz")
    with peaks.using("bf16=1e12"):
        tables = Tables(t)
        (low,) = [f for f in _low_mfu(t, lambda k: tables[k])]
        line = mfu_line(SimpleNamespace(tables={"mfu": tables["mfu"]}, trace=t)).plain
    assert low.title.startswith("Model FLOPs utilisation is 0.153% (bf16)") and line.startswith("MFU 0.153% (bf16)")
