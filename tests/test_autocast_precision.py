"""The precision an op ran in under ``torch.autocast``, and the bytes of an op whose
inputs differ in type (audF F3, F4), on a real CPU recording
(tests/data/traces/autocast_cpu: torch 2.13's CPU autocast runs the products in bf16)."""

from __future__ import annotations

from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.efficiency import mfu, model_precisions, op_efficiency
from polyprof.analyze.frames import column

AUTOCAST = Path(__file__).parent / "data" / "traces" / "autocast_cpu" / "autocast_cpu.json.gz"


@pytest.fixture(scope="module")
def trace():
    return polyprof.load(AUTOCAST)


def test_products_that_ran_in_bf16_count_as_bf16(trace):
    """torch records each outer ``aten::linear`` with the fp32 inputs it was called with,
    around the ``aten::linear`` of their bf16 casts: the outer one, which the MFU counts,
    took its inputs' fp32 (7.5 of the 12.5 MFLOP), and the MFU was held to the fp32 peak."""
    by = model_precisions(trace)
    assert by["bf16"] > 0.98 * sum(by.values())  # (the fp32 left: layer norms, residual adds, as they ran)
    m = mfu(trace, peak="bf16=1e12,fp32=1e11")
    assert column(m, "precision")[0] == "bf16" and column(m, "peak_flops_per_s")[0] == 1e12
    oe = op_efficiency(trace)
    prec = dict(zip(column(oe, "name"), column(oe, "precision")))
    assert prec["aten::linear"] == prec["aten::addmm"] == prec["aten::scaled_dot_product_attention"] == "bf16"
    assert prec["aten::layer_norm"] == "fp32"  # (autocast runs it in fp32: its nested op says so)


def test_where_bytes_count_each_tensor_at_its_size(trace):
    """``torch.where(bool[65536], f32, f32)``: the mask at 1 byte per element, the data
    and the result at 4: 13 bytes per element, of precision fp32 (before: 4, the mask's
    size for every tensor, and no precision)."""
    oe = op_efficiency(trace)
    i = list(column(oe, "name")).index("aten::where")
    assert column(oe, "bytes")[i] == 13 * 65536 and column(oe, "precision")[i] == "fp32"
