"""A time window (``polyprof run --delay D --duration T``) that cuts kernels with FLOPs at
its edges: ``kernel_efficiency`` (the per-kernel roofline: achieved FLOP/s, bandwidth)
counts each kernel running in the window for its part inside, as "Device time", "Top
device activity", ``op_efficiency`` and ``mfu`` count it: its device time that part, its
FLOPs and bytes in proportion (so its rates stay its own). Before, it counted the cut
kernels whole: a 13.9 ms window of an H200's bf16 products read 10 kernels of 15.5 ms
(more device time than the window holds) and 11.0 TFLOP, against 13.9 ms and 9.9 TFLOP
counted inside; in the JAX transformer's window its FLOPs were 1.32033e14 against the
1.32012e14 ``mfu`` and ``op_efficiency`` count.

No GPU here to record a time window, so the window a time-window recording writes
(``metadata["schedule"]``, ``windows_ns``) is set on real H200 traces
(``tests/data/h200``) from the middle of one long kernel to the middle of a later one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import kernel_breakdown
from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.frames import column
from polyprof.analyze.kernel_roofline import kernel_costs, kernel_efficiency
from polyprof.analyze.window import AUTO, selection, view

H200 = Path(__file__).parent / "data" / "h200"


def _windowed(name: str) -> tuple[polyprof.Trace, polyprof.Trace, np.ndarray, np.ndarray, np.ndarray]:
    """(the trace, its view with a time window that cuts two costed kernels in their
    middles, and per costed kernel: its part inside the window, its whole time, its FLOPs)."""
    t = polyprof.load(H200 / name)
    rows, flops, _ = kernel_costs(t)
    start = t.events["start_ns"][rows].astype(np.int64)
    dur = t.events["dur_ns"][rows].astype(np.int64)
    big = np.flatnonzero(dur >= np.sort(dur)[-len(dur) // 3])  # (the longest third)
    i, j = big[len(big) // 3], big[2 * len(big) // 3]
    lo, hi = int(start[i] + dur[i] // 2), int(start[j] + dur[j] // 2)
    t.metadata["schedule"] = {"delay_s": 0.0, "duration_s": (hi - lo) / 1e9, "windows_ns": [[lo, hi]],
                              "recorded_steps": []}
    v = view(t, AUTO)
    sel = selection(v)
    assert sel is not None and sel.timed and (sel.lo, sel.hi) == (lo, hi)
    part = np.clip(np.minimum(start + dur, hi) - np.maximum(start, lo), 0, None)
    assert ((part > 0) & (part < dur)).sum() == 2  # the two kernels at the window's edges
    return t, v, part, dur, flops


def test_bf16_products_count_their_part_inside() -> None:
    """50 bf16 8192³ products (cuBLASLt's ``nvjet`` kernels, 2·8192³ FLOPs each): the
    window's kernels count their time inside and that share of their FLOPs, so the
    table's device time is what "Top device activity" sums of them, within the window,
    and their FLOP/s stays among their own."""
    _, v, part, dur, flops = _windowed("torch_bf16_mm_h200.json.gz")
    truth = json.loads((H200 / "compile_truth.json").read_text())["torch_bf16_mm_h200.json.gz"]
    each = truth["flops"] / truth["products"]
    assert np.allclose(flops, each)  # (one kernel a product, the lot its op's)
    sel = selection(v)
    assert sel is not None
    ke = kernel_efficiency(v)
    assert len(ke) == 1 and str(column(ke, "name")[0]).startswith("nvjet_sm90")
    runs = part > 0
    assert int(column(ke, "count")[0]) == int(runs.sum()) == 10
    assert float(column(ke, "device_ns")[0]) == float(part.sum()) <= sel.hi - sel.lo  # (was 15.5 ms in 13.9)
    kb = kernel_breakdown(v)
    assert float(column(kb, "total_ns")[column(kb, "name") == column(ke, "name")[0]][0]) == float(part.sum())
    assert float(column(ke, "flops")[0]) == pytest.approx(each * float((part / dur)[runs].sum()))  # (was 11.0 TFLOP)
    own = flops[runs] / dur[runs] * 1e9  # (each kernel's own FLOP/s: the H200 ran them at 706-778 TFLOP/s)
    assert own.min() <= float(column(ke, "flops_per_s")[0]) <= own.max()


def test_xla_kernels_count_as_mfu_and_op_efficiency_do() -> None:
    """A JAX transformer's XLA kernels (costed from the file's HLO) in a 1.07 s window:
    the table sums the FLOPs, bytes and device time that ``op_efficiency`` counts of
    the same ops, and the FLOPs ``mfu`` counts (before: the two cut kernels whole)."""
    _, v, part, dur, flops = _windowed("jax_transformer_h200.xplane.pb.gz")
    ke, oe, m = kernel_efficiency(v), op_efficiency(v), mfu(v)
    assert set(column(oe, "where").tolist()) == {"device"}
    got = float(np.nansum(column(ke, "flops")))
    assert got == pytest.approx(float(np.nansum(column(oe, "flops"))), rel=1e-12)
    assert got == pytest.approx(float(column(m, "flops")[0]), rel=1e-12)
    assert got == pytest.approx(float(np.nansum((flops * part / dur)[part > 0])), rel=1e-12)
    assert float(np.nansum(column(ke, "bytes"))) == pytest.approx(float(np.nansum(column(oe, "bytes"))), rel=1e-12)
    assert float(column(ke, "device_ns").sum()) == float(column(oe, "device_ns").sum()) == float(part.sum())
