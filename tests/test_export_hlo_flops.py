"""An XSpace exported to Kineto or Chrome JSON keeps the FLOPs polyprof counts from its
HLO (formats/xspace/xla_costs.add_cost_args): the JSON carries no HLO, so before, a read
of the export counted no FLOPs (an H200 JAX step's "MFU 0.88% (tf32)" became "MFU
unknown: 100% of kernel time ran in CUDA/HIP graph replays"), and its device went
unnamed (Kineto's ``name`` was the plane's, so no peak was found). Recorded H200 and
JAX CPU XSpaces, exported and read back with polyprof's own commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.efficiency import mfu
from polyprof.analyze.frames import column

DATA = Path(__file__).parent / "data"
FILES = [DATA / "h200" / "jax_train_step_h200.xplane.pb", DATA / "jax_cpu" / "jax_cpu_steps.xplane.pb"]


def _mfu_row(t) -> tuple[float, str, float]:
    m = mfu(t, peak="fp32=1e12,tf32=1e13")
    return float(column(m, "flops")[0]), str(column(m, "precision")[0]), float(column(m, "time_ns")[0])


@pytest.mark.parametrize("fmt", ["kineto", "chrome"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_export_keeps_hlo_flops(tmp_path, path, fmt):
    t = polyprof.load(path)
    flops, prec, time_ns = _mfu_row(t)
    assert flops > 0 and prec in ("fp32", "tf32")
    out = tmp_path / f"out.{fmt}.json"
    polyprof.export(t, out, fmt)
    back = polyprof.load(out)
    got = _mfu_row(back)
    assert got[1] == prec
    assert got[0] == pytest.approx(flops, rel=1e-9)
    assert got[2] == pytest.approx(time_ns, abs=2)
    # the FLOPs are on the ops' events, as torch's ``flops`` arg is
    events = json.loads(out.read_text())["traceEvents"]
    costed = [e for e in events if "flops" in (e.get("args") or {})]
    assert prec in {e["args"].get("flops_precision") for e in costed}


def test_kineto_export_names_the_device_model(tmp_path):
    t = polyprof.load(FILES[0])
    out = polyprof.export(t, tmp_path / "h200.json", "kineto")
    props = json.loads(Path(out).read_text())["deviceProperties"]
    assert [p["name"] for p in props] == ["NVIDIA H200"]
    m = mfu(polyprof.load(out))  # the H200's own tf32 peak, found by that name
    assert np.isclose(float(column(m, "peak_flops_per_s")[0]), float(column(mfu(t), "peak_flops_per_s")[0]))
