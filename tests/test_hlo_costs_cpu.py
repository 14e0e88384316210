"""FLOPs and bytes of a JAX program on the CPU, counted from the HLO its XSpace holds
(formats/xspace/xla_costs.py: the ops of XLA's CPU runtime are host events), checked
against XLA's own ``compile().cost_analysis()`` recorded with the profile
(tests/data/traces/xspace/jax_cpu_mlp_scan.*, tests/data/traces/README.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.flops import hlo_costs
from polyprof.analyze.frames import column
from polyprof.trace.core import Trace

XSPACE = Path(__file__).parent / "data" / "traces" / "xspace"
FIXTURE = XSPACE / "jax_cpu_mlp_scan.xplane.pb"
RECORDED = json.loads((XSPACE / "jax_cpu_mlp_scan.cost_analysis.json").read_text())
#: bytes XLA's cost analysis gives a ``tuple`` instruction (8 per element: a table of
#: pointers), which runs no thunk on the CPU: jit_loss returns 4 gradients
LOSS_TUPLE_BYTES = 8 * 4


def _per_execution(t: Trace) -> dict[str, list[tuple[float, float, float]]]:
    """module -> (FLOPs, bytes, transcendentals) of each execution (``run_id``) the trace shows."""
    hc = hlo_costs(t)
    _, mods = t.stats["hlo_module"].lookup(hc.rows)
    _, runs = t.stats["run_id"].lookup(hc.rows)
    sums: dict[tuple[str, int], np.ndarray] = defaultdict(lambda: np.zeros(3))
    for i, key in enumerate(zip(mods.tolist(), runs.tolist())):
        sums[key] += (hc.flops[i], hc.bytes[i], hc.transcendentals[i])
    out: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for (mod, _), v in sorted(sums.items(), key=lambda kv: kv[0][1]):
        out[mod].append((float(v[0]), float(v[1]), float(v[2])))
    return out


def _check_against_xla(t: Trace, xla: dict[str, dict[str, float]], trips: int) -> None:
    runs = _per_execution(t)
    loss, rnn = xla["jit_loss"], xla["jit_rnn"]
    assert len(runs["jit_loss"]) == 3 and len(runs["jit_rnn"]) == 3  # every step's, nothing else
    for flops, nbytes, trans in runs["jit_loss"]:
        assert flops == loss["flops"] and trans == loss["transcendentals"]
        assert nbytes == loss["bytes accessed"] - LOSS_TUPLE_BYTES
    for flops, _, trans in runs["jit_rnn"]:
        # XLA counts one trip of the loop: its body and its condition (a compare, 1 FLOP);
        # the trace shows the body's ops on each trip, the condition runs without an event
        assert flops == trips * (rnn["flops"] - 1) and trans == trips * rnn["transcendentals"]


def test_jax_cpu_xspace_flops_equal_xlas_cost_analysis():
    _check_against_xla(polyprof.load(FIXTURE), RECORDED["cost_analysis"], RECORDED["scan_trips"])


def test_jax_cpu_op_efficiency_and_mfu_per_step():
    t = polyprof.load(FIXTURE)
    xla = RECORDED["cost_analysis"]
    oe = op_efficiency(t)
    names = column(oe, "name").tolist()
    assert set(column(oe, "flops_source").tolist()) == {"hlo"}
    assert set(column(oe, "where").tolist()) == {"device"}  # the CPU runtime's ops are the device work
    assert not [n for n in names if n.startswith("while")]  # a loop's ops are counted on each trip, not again
    dot = names.index("dot")  # jit_loss's weight gradient of the first layer: 2 x 64 x 16 x 128
    assert column(oe, "count")[dot] == 3 and column(oe, "flops")[dot] == 3 * 2 * 64 * 16 * 128
    assert column(oe, "precision")[dot] == "fp32"  # XLA:CPU has no TF32
    per_step = xla["jit_loss"]["flops"] + RECORDED["scan_trips"] * (xla["jit_rnn"]["flops"] - 1)
    m = mfu(t)  # no peak known for a CPU: FLOPs and rates, no utilisation
    assert column(m, "step").tolist() == [-1, 0, 1, 2]
    assert column(m, "flops").tolist() == [3 * per_step] + [per_step] * 3
    assert column(m, "precision")[0] == "fp32"
    assert np.isnan(column(m, "mfu_pct")).all() and np.isnan(column(m, "peak_flops_per_s")).all()
    given = mfu(t, peak="fp32=1e12")
    rate = column(given, "flops_per_s")[0]
    assert column(given, "mfu_pct")[0] == pytest.approx(100 * rate / 1e12)


_PROGRAM = (Path(__file__).parent / "data" / "traces" / "xspace" / "jax_cpu_mlp_scan.py").read_text()


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_cpu_fresh_profile_equals_its_cost_analysis(tmp_path: Path):
    """The same on a profile JAX records now with the fixture's program, against the
    cost analysis it prints (this JAX's, which may fuse otherwise than 0.10.2's)."""
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, str(tmp_path / "prof")], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted((tmp_path / "prof").rglob("*.xplane.pb"))
    assert len(files) == 1
    recorded = json.loads(proc.stdout)
    _check_against_xla(polyprof.load(files[0]), recorded["cost_analysis"], recorded["scan_trips"])
