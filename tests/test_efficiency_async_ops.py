"""op_efficiency, mfu and the low-MFU finding cost device activity only (audX F1): TPU:0's
"Async XLA Ops" line of tpu_inference_2 holds 600 ``async-copy`` spans (category
xla_async_op) from each copy-start to its copy-done, over the copy-done ops of "XLA Ops"
that already hold the time. They carry XLA's cost figures (0 FLOPs, the copy's bytes),
so they were costed: an ``async-copy`` row of 198 s (twice the 98 s trace) that topped
the finding's "most lost in". XProf's op_profile has no such entry, nor has polyprof's
device_op_breakdown; the rows are now the device tables' (``DEVICE_ACTIVITY`` kinds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.efficiency import costed_rows, mfu, op_efficiency
from polyprof.analyze.efficiency_findings import _low_mfu
from polyprof.analyze.frames import column
from polyprof.analyze.registry import Tables
from polyprof.trace.categories import DEVICE_ACTIVITY

DATA = Path(__file__).parent / "data"
TPU = DATA / "traces" / "xspace" / "tpu_inference_2.xplane.pb"

#: XProf 2.24's op_profile (byProgram, ``xspace_to_tool_data(..., "op_profile")``) of
#: tpu_inference_2, every HLO op with a cost over its 4 TPUs: op -> (occurrences, rawTime
#: in ps, rawFlops). No ``async-copy``: its time is the copy-done ops'.
XPROF = {
    "copy-done.4": (400, 77773215731250, 0), "copy-done.2": (400, 77642772818750, 0),
    "copy-done": (400, 75671038513750, 0), "copy-done.5": (400, 72946182662500, 0),
    "copy-done.1": (400, 1188750, 0), "copy-done.3": (400, 1147500, 0),
    "copy-start.4": (400, 2400000, 0), "copy-start.2": (400, 2297500, 0), "copy-start": (400, 2168750, 0),
    "copy-start.3": (400, 725000, 0), "copy-start.5": (400, 708750, 0), "copy-start.1": (400, 681250, 0),
    "broadcast_add_fusion.1": (400, 3262107413750, 536870912000),
    "broadcast_add_fusion": (400, 3190582365000, 536870912000),
    "broadcast_add_fusion.2": (400, 3167203858750, 536870912000),
    "all-reduce": (12, 1460345258750, 16106127360), "broadcast.2": (1, 4443766250, 0),
}
#: op_profile's whole-profile FLOPs (its by_program root)
XPROF_FLOPS = 1626718863360


@pytest.fixture(scope="module")
def tpu() -> polyprof.Trace:
    return polyprof.load(TPU)


def test_async_spans_are_not_costed(tpu):
    """Before: 600 of the 6613 costed device rows were xla_async_op spans."""
    rows, on_device, _ = costed_rows(tpu)
    dev = rows[on_device]
    assert len(dev) == 6013
    assert np.isin(tpu.kinds[dev], np.asarray(DEVICE_ACTIVITY)).all()
    async_cat = tpu.string_id("xla_async_op")
    assert async_cat >= 0 and not (tpu.events["category"][rows] == async_cat).any()


def test_op_efficiency_rows_are_xprofs_op_profile(tpu):
    """The rows, their calls, device time and FLOPs are op_profile's, one for one (before:
    an 18th row ``async-copy``, count 600, device_ns 197.6 s)."""
    oe = op_efficiency(tpu)
    names = column(oe, "name").tolist()
    assert sorted(names) == sorted(XPROF)
    for name, count, dev_ns, flops in zip(names, column(oe, "count"), column(oe, "device_ns"), column(oe, "flops")):
        occ, ps, xflops = XPROF[name]
        assert count == occ, name
        assert dev_ns == pytest.approx(ps / 1000, rel=1e-9), name
        assert flops == pytest.approx(xflops, rel=1e-9), name
    # no op holds more device time than the trace's 4 devices ran for
    assert column(oe, "device_ns").sum() < 4 * 98.2e9


def test_the_category_is_xprofs_of_each_op(tpu):
    """``category`` is the ops' ``hlo_category``, op_profile's category level (it was ""
    on a TPU: only HLO-costed GPU ops had one, their opcode)."""
    oe = op_efficiency(tpu)
    cats = dict(zip(column(oe, "name").tolist(), column(oe, "category").tolist()))
    assert {n: c for n, c in cats.items() if not n.startswith(("copy-done", "copy-start"))} == {
        "broadcast_add_fusion": "loop fusion", "broadcast_add_fusion.1": "loop fusion",
        "broadcast_add_fusion.2": "loop fusion", "all-reduce": "all-reduce", "broadcast.2": "broadcast"}
    assert all(c == n.split(".")[0] for n, c in cats.items() if n.startswith(("copy-done", "copy-start")))


def test_mfu_and_finding_leave_async_copy_out(tpu):
    """The MFU's FLOPs are op_profile's (unchanged: async-copy has 0), and the finding's
    "most lost in" starts with the longest copy-done, not async-copy."""
    whole = mfu(tpu)
    assert column(whole, "step")[0] == -1
    assert column(whole, "flops")[0] == pytest.approx(XPROF_FLOPS, rel=1e-9)
    assert column(whole, "mfu_pct")[0] == pytest.approx(0.000451, rel=1e-3)
    tables = Tables(tpu)
    (low,) = _low_mfu(tpu, lambda k: tables[k])
    names = [e["name"] for e in low.events]
    assert "async-copy" not in names and names[0] == "copy-done.4"
    assert low.title.startswith("Model FLOPs utilisation is 0.000451%; most lost in copy-done.4, copy-done.2")


@pytest.mark.parametrize(("path", "n"), [
    # CUPTI's FLOP counters ride on cuda_profiler_range rows (Kind.OTHER): still costed
    (DATA / "traces" / "kineto" / "a100_cupti_counters.json.gz", 77),
    # XLA's CPU ops on /host:CPU threads (Kind.KERNEL on a host plane): still costed
    (DATA / "traces" / "xspace" / "jax_cpu_mlp_scan.xplane.pb", 72),
])
def test_other_costed_device_rows_stay(path, n):
    _, on_device, _ = costed_rows(polyprof.load(path))
    assert int(on_device.sum()) == n
