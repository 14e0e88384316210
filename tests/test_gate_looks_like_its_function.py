"""A function polyprof gates (``lowlevel/unseen.quiet`` put in its place: torch's
``destroy_process_group``, so the torch plugin reads the process groups before they
go) looks like the function to the program: its name, qualified name, module, its
signature through ``__wrapped__``, and pickling by reference. Before, the gate was a C
object with none of them (``inspect.signature`` raised "no signature found", ``pickle``
"cannot pickle 'Quiet' object": a reviewer), in the C path and the pure-Python one
alike (POLYPROF_PURE_PYTHON=1, tested in a child)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHECK = r"""
import inspect, pickle
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from polyprof.lowlevel import unseen

orig = c10d.destroy_process_group
seen = []
gate = unseen.quiet(lambda *a, **k: seen.append(1), then=orig)
c10d.destroy_process_group = gate
assert (gate.__name__, gate.__qualname__, gate.__module__) == (orig.__name__, orig.__qualname__, orig.__module__)
assert inspect.signature(gate) == inspect.signature(orig), inspect.signature(gate)
assert pickle.loads(pickle.dumps(gate)) is gate
try:
    gate()  # no group made: torch's own error, after the gate's call
except (AssertionError, ValueError, RuntimeError):
    pass
assert seen == [1]
print(unseen.IMPLEMENTATION)
"""


def _check(pure: bool) -> str:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1] / "src"))
    env.pop("POLYPROF_PURE_PYTHON", None)
    if pure:
        env["POLYPROF_PURE_PYTHON"] = "1"
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def test_the_c_gate_looks_like_torchs_function() -> None:
    assert _check(pure=False) == "c"


def test_the_python_gate_looks_like_torchs_function() -> None:
    assert _check(pure=True) == "python"
