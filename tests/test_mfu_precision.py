"""The precision ``mfu`` holds a program's FLOPs to (``efficiency.main_precision``): that of
the FLOPs it counts, in the analysed steps, of a known precision, on JAX CPU programs
recorded here with ``polyprof run``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.efficiency import main_precision, mfu, model_precisions
from polyprof.analyze.frames import column
from polyprof.analyze.window import Window, view
from polyprof.ranks.table_merge import MfuPart, merge_mfu

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")

#: ``jax.random`` draws (uint32 threefry ops: FLOPs to XLA, of no precision) and, with
#: ``fp64``, a 384^3 fp64 product (113 MFLOP; XLA:CPU runs a bf16 one in fp32), all
#: before the steps; each step one fp32 8x256x1024 product (4.2 MFLOP)
_PROGRAM = """
import sys
import jax, jax.numpy as jnp
import polyprof
jax.config.update("jax_enable_x64", sys.argv[1:] == ["fp64"])
ks = jax.random.split(jax.random.PRNGKey(0), 3)
x = jax.random.normal(ks[0], (8, 256), jnp.float32)
w = jax.random.normal(ks[1], (256, 1024), jnp.float32)
if sys.argv[1:] == ["fp64"]:
    big = jax.random.normal(ks[2], (384, 384), jnp.float64)
    (big @ big).block_until_ready()
f = jax.jit(lambda x, w: jnp.tanh(x @ w).sum())
for _ in range(4):
    f(x, w).block_until_ready()
    polyprof.step()
"""


def _record(tmp: Path, *args: str) -> polyprof.Trace:
    prog = tmp / "prog.py"
    prog.write_text(_PROGRAM)
    out = tmp / f"r{'_'.join(args)}.polyprof"
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "polyprof", "run", "--plugins", "jax", "--no-summary", "-o", str(out),
                           str(prog), *args], capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return polyprof.load(out)


def test_integer_flops_do_not_make_the_mfu_precision_unknown(tmp_path: Path):
    """The draws' uint32 ops (53 MFLOP to XLA) outweigh the fp32 products in step 0, yet
    the MFU is of fp32: its precision was "" (the device's main peak, not named on the
    MFU line, the finding's evidence ``precision=,``)."""
    t = _record(tmp_path)
    by = model_precisions(t)
    assert by[""] > by["fp32"] > 0  # XLA:CPU counts the threefry ops: more than the products
    m = mfu(t, peak="fp32=1e11")
    assert set(column(m, "precision").tolist()) == {"fp32"}
    rate = column(m, "flops_per_s")[0]
    assert column(m, "mfu_pct")[0] == pytest.approx(100 * rate / 1e11)
    # a rank merged from its windows chooses as the whole does
    merged = merge_mfu([m], [MfuPart(by, frozenset())], None)
    assert column(merged, "precision")[0] == "fp32"


def test_the_mfu_precision_is_that_of_the_steps_it_counts(tmp_path: Path):
    """An fp64 product before the steps (113 MFLOP, in step 0) outweighs the steps' fp32
    ones: the whole trace's MFU is of fp64, that of steps 1 to 3 of fp32 (it was of
    fp64, weighed over every costed op of the file)."""
    t = _record(tmp_path, "fp64")
    assert column(mfu(t), "precision")[0] == "fp64"
    later = view(t, Window(start=1))
    m = mfu(later, peak="fp32=1e11")
    assert column(m, "step").tolist() == [-1, 1, 2, 3]
    assert set(column(m, "precision").tolist()) == {"fp32"}
    assert main_precision(model_precisions(later)) == "fp32"
    products = 3 * 2 * 8 * 256 * 1024  # (and the tanh and sum fused with them)
    assert products <= column(m, "flops")[0] < 1.01 * products
