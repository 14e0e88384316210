"""``op_efficiency`` counts a call around a call of its own name once, as the inner one
(the call that did the work, on the shapes it computed): autocast records
``aten::softmax`` inside ``aten::softmax`` and ``aten::layer_norm`` (and ``aten::to``, its
cast) inside ``aten::layer_norm`` (a real A100 fp16 trace,
tests/data/peers/particle_transformer). Before, both were rows of the name: softmax's 10
calls read 20 and 8.58 ms of device time, twice its 4.29 ms, and the MFU finding's "lost"
time in layer_norm (26 ms) was more than all the device work layer_norm launched."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.efficiency import op_efficiency
from polyprof.analyze.frames import column

TRACE = Path(__file__).parent / "data" / "peers" / "particle_transformer" / "a100_autocast_fp16.pt.trace.json.xz"


def _innermost_device_ns(name: str) -> tuple[int, int]:
    """(calls, device ns) of ``name``'s calls that enclose no call of that name on their
    thread, and of the kernels, copies and fills launched inside them, from the JSON."""
    ev = json.loads(lzma.open(TRACE).read())["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == name]

    def inside(o: dict, e: dict) -> bool:
        return o is not e and o["tid"] == e["tid"] and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]

    inner = [o for o in ops if not any(inside(o, e) for e in ops)]
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    dev = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get("args", {})]
    total = 0.0
    for d in dev:
        lc = launch.get(d["args"]["correlation"])
        if lc and any(o["tid"] == lc["tid"] and o["ts"] <= lc["ts"] <= o["ts"] + o["dur"] for o in inner):
            total += d["dur"]
    return len(inner), round(total * 1000)


@pytest.mark.parametrize("name", ["aten::softmax", "aten::layer_norm"])
def test_a_call_inside_one_of_its_name_counts_once(name: str) -> None:
    t = op_efficiency(polyprof.load(TRACE))
    names = np.asarray(column(t, "name"), object)
    (at,) = np.flatnonzero((names == name) & (np.asarray(column(t, "where"), object) == "device"))
    calls, device_ns = _innermost_device_ns(name)
    assert int(column(t, "count")[at]) == calls
    assert float(column(t, "device_ns")[at]) == pytest.approx(device_ns, abs=1000)
