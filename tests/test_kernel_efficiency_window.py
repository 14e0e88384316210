"""The kernel efficiency table counts the kernels of the analysed window, as the kernel
table does (an audit: it counted every kernel of the trace whatever the window)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

H200 = Path(__file__).parent / "data" / "h200" / "torch_transformer_h200.json.gz"


@pytest.mark.parametrize("args, kernels", [((), 3738), (("--all-steps",), 4005), (("--steps", "5:6"), 267)])
def test_kernel_efficiency_follows_the_window(args: tuple[str, ...], kernels: int) -> None:
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(H200), "--json", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    tables = json.loads(r.stdout)["tables"]
    eff = {x["name"]: x["count"] for x in tables["kernel_efficiency"]["records"]}
    table = {x["name"]: x["count"] for x in tables["kernel_breakdown"]["records"] if x["name"] in eff}
    assert sum(eff.values()) == kernels and eff == table
