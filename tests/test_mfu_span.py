"""The MFU of a trace without steps is timed by the analysed span (``efficiency.mfu``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_the_mfu_of_a_trace_without_steps_is_timed_by_the_analysed_span() -> None:
    """``--span device`` analyses a trace without steps from its first to its last device
    activity, and the MFU now divides by that span, as the header says (TraceLens's JAX
    XSpace: 13 ms of GPU work 9.7 s into the trace; before, 0.0126% over the 9.73 s)."""
    path = Path(__file__).parent / "data" / "peers" / "tracelens" / "jax_te_fused_attn_934987a2fc2f.xplane.pb"
    out = {}
    for args in ((), ("--span", "device")):
        r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path), "--json", *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        (row,) = [x for x in doc["tables"]["mfu"]["records"] if x["step"] == -1]
        out[args] = row
    whole, device = out[()], out[("--span", "device")]
    assert whole["flops"] == device["flops"]
    assert 9.7e9 < whole["time_ns"] < 9.8e9 and 12.9e6 < device["time_ns"] < 13.0e6
    assert 9.4 < device["mfu_pct"] < 9.6
