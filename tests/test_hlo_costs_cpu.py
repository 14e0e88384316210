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
    assert not [n for n in names if "/while" in n]  # a loop's ops are counted on each trip, not again
    dot = names.index("jit_loss/dot")  # jit_loss's weight gradient of the first layer: 2 x 64 x 16 x 128
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


def test_hlo_survives_a_polyprof_save(tmp_path: Path):
    """The HLO modules are bytes in the planes' properties: a .polyprof file keeps them
    (``{"__bytes__": base64}`` in its header), so its ops keep their FLOPs; they were
    written as ``str(bytes)`` and a saved JAX profile lost them all."""
    t = polyprof.load(FIXTURE)
    before = op_efficiency(t)
    assert len(before) == 15  # one row per HLO op: ynn_fusion of jit_loss and of jit_rnn are two
    t.save(tmp_path / "x.polyprof")
    u = polyprof.load(tmp_path / "x.polyprof")
    assert [p.properties for p in u.planes] == [p.properties for p in t.planes]
    after = op_efficiency(u)
    for col in ("name", "count", "flops", "bytes", "precision"):
        assert column(after, col).tolist() == column(before, col).tolist(), col
    _check_against_xla(u, RECORDED["cost_analysis"], RECORDED["scan_trips"])


def test_a_polyprof_file_with_the_hlo_as_text_still_gets_its_flops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A file written before bytes were kept holds ``str(bytes)``: the HLO is read back
    from that text (formats/xspace/hlo.py)."""
    from polyprof.trace import native_write

    t = polyprof.load(FIXTURE)
    monkeypatch.setattr(native_write, "json_default", lambda o: o.item() if isinstance(o, np.generic) else str(o))
    t.save(tmp_path / "old.polyprof")
    monkeypatch.undo()
    u = polyprof.load(tmp_path / "old.polyprof")
    hlo = [e["stats"]["Hlo Proto"] for p in u.planes for e in p.properties.get("xspace_event_metadata") or []
           if "Hlo Proto" in e.get("stats", {})]
    assert hlo and all(isinstance(h, str) and h.startswith("b") for h in hlo)  # as the old writer left it
    assert column(op_efficiency(u), "flops").tolist() == column(op_efficiency(t), "flops").tolist()


def test_a_bytes_value_that_is_not_base64_is_named(tmp_path: Path):
    import zipfile

    from polyprof.errors import TraceFormatError

    t = polyprof.load(FIXTURE)
    t.save(tmp_path / "x.polyprof")
    with zipfile.ZipFile(tmp_path / "x.polyprof") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    header = json.loads(members["header.json"])
    header["planes"][0]["properties"]["blob"] = {"__bytes__": "not base64!"}
    members["header.json"] = json.dumps(header).encode()
    with zipfile.ZipFile(tmp_path / "bad.polyprof", "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    with pytest.raises(TraceFormatError, match="bad.polyprof.*not base64"):
        polyprof.load(tmp_path / "bad.polyprof")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_polyprof_run_with_the_jax_plugin_costs_the_ops(tmp_path: Path):
    """`polyprof run --plugins jax` stores its profile as a .polyprof file: the HLO of its
    XSpace comes through, so a jitted matmul gets its 2 x 64 x 128 x 32 FLOPs per call."""
    prog = tmp_path / "prog.py"
    prog.write_text("import jax, jax.numpy as jnp\n"
                    "f = jax.jit(lambda x, w: jnp.tanh(x @ w).sum())\n"
                    "x, w = jnp.ones((64, 128)), jnp.ones((128, 32))\n"
                    "for _ in range(3):\n    f(x, w).block_until_ready()\n")
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "polyprof", "run", "--plugins", "jax", "--no-summary", "-o",
                           str(tmp_path / "r.polyprof"), str(prog)], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    oe = op_efficiency(polyprof.load(tmp_path / "r.polyprof"))
    assert set(column(oe, "flops_source").tolist()) == {"hlo"}
    assert max(column(oe, "flops").tolist()) == 3 * 2 * 64 * 128 * 32
