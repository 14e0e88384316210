"""A time window (``polyprof run --delay D --duration T``) that cuts device ops with FLOPs
at its edges: ``op_efficiency`` (the roofline) and ``mfu`` count each device op running
in the window for its part inside, as "Device time" and "Top device activity" count its
time: its device time that part, its FLOPs and bytes in proportion (so its rates stay
its own). Before, they counted the device ops that *started* in the window, whole: the
op running into the window was left out, the one running past its end counted whole.

No GPU here to record a time window of device ops with FLOPs (OpenCL kernels carry
none), so the window a time-window recording writes (``metadata["schedule"]``,
``windows_ns``) is set on a real trace: TraceLens's JAX XSpace of a GPU run, whose 150
device ops all carry XLA's FLOP figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import kernel_breakdown
from polyprof.analyze.efficiency import costed_rows, model_rows, mfu, op_efficiency
from polyprof.analyze.frames import column
from polyprof.analyze.window import AUTO, selection, view
from polyprof.derive import cache

PATH = Path(__file__).parent / "data" / "peers" / "tracelens" / "jax_te_fused_attn_934987a2fc2f.xplane.pb"


@pytest.fixture(scope="module")
def windowed() -> tuple[polyprof.Trace, int, int]:
    """The trace with a time window from the middle of one ~0.17 ms op of the model (103
    GFLOP) to the middle of another 5.1 ms later: (its view, the window's start, its end)."""
    t = polyprof.load(PATH)
    rows = cache.correlation(t).device_rows
    start = t.events["start_ns"][rows].astype(np.int64)
    s0 = int(start.min())
    lo, hi = s0 + 2_509_381 + 80_000, s0 + 7_645_385 + 80_000  # (two ops' middles)
    t.metadata["schedule"] = {"delay_s": 0.0, "duration_s": (hi - lo) / 1e9, "windows_ns": [[lo, hi]],
                              "recorded_steps": []}
    v = view(t, AUTO)
    sel = selection(v)
    assert sel is not None and sel.timed and (sel.lo, sel.hi) == (lo, hi)
    return v, lo, hi


def _parts(v: polyprof.Trace, rows: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(part inside the window, whole span) of each row."""
    start = v.events["start_ns"][rows].astype(np.int64)
    whole = v.events["dur_ns"][rows].astype(np.int64)
    return np.clip(np.minimum(start + whole, hi) - np.maximum(start, lo), 0, None), whole


def test_the_roofline_counts_the_part_of_each_op_inside(windowed: tuple[polyprof.Trace, int, int]) -> None:
    """``op_efficiency`` of the window: the device ops running in it, each for its part
    inside, its FLOPs in proportion; the device time is what "Top device activity" sums."""
    v, lo, hi = windowed
    rows, on_device, c = costed_rows(v)
    assert on_device.all()  # (every costed row a device op)
    part, whole = _parts(v, rows, lo, hi)
    cut = (part > 0) & (part < whole)
    assert cut.sum() == 2  # the two kernels at the window's edges
    runs = part > 0
    oe = op_efficiency(v)
    assert set(column(oe, "where").tolist()) == {"device"}
    assert float(np.nansum(column(oe, "flops"))) == pytest.approx(float(np.nansum((c.flops * part / whole)[runs])))
    assert float(np.nansum(column(oe, "bytes"))) == pytest.approx(float(np.nansum((c.bytes * part / whole)[runs])))
    kb = kernel_breakdown(v)
    assert float(column(oe, "device_ns").sum()) == pytest.approx(float(column(kb, "total_ns").sum()))
    assert int(column(kb, "total_ns").sum()) == int(part[runs].sum())


def test_the_mfu_counts_the_flops_inside_over_the_window(windowed: tuple[polyprof.Trace, int, int]) -> None:
    """``mfu`` of the window: the FLOPs of the model's device ops running in it, each cut
    by its edges for its share inside, over the window's time."""
    v, lo, hi = windowed
    rows, flops, _ = model_rows(v)
    part, whole = _parts(v, rows, lo, hi)
    assert ((part > 0) & (part < whole)).any()  # a model op cut by the window's edges
    got = mfu(v)
    assert column(got, "step").tolist() == [-1]
    assert column(got, "time_ns")[0] == hi - lo
    expected = float(np.nansum(np.where(whole > 0, flops * part / np.maximum(whole, 1), flops)[part > 0]))
    assert column(got, "flops")[0] == pytest.approx(expected)
