"""Memory events in other producers' XSpaces (TensorFlow, JAX/XLA, TPU runtimes): XProf's
``MemoryAllocation`` / ``MemoryDeallocation`` events read as polyprof's memory events
(``formats/xprof_memory.py``), checked against the files' own allocator totals, read
here straight from the protobuf, and against what XProf's memory_profile tool shows."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof import analyze as A
from polyprof.formats import xplane_pb2

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "h200" / "jax_train_step_h200.xplane.pb"
CONV = DATA / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb"
TPU = DATA / "traces" / "xspace" / "tpu_inference_2.xplane.pb"


def _reference(path: Path) -> dict[str, dict[str, int]]:
    """Per XProf memory id: the most ``bytes_allocated`` any event reports, and the
    numbers of allocations and frees, from the protobuf itself."""
    xs = xplane_pb2.XSpace()
    xs.ParseFromString(path.read_bytes())
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"peak": -1, "allocs": 0, "frees": 0})
    for p in xs.planes:
        if p.name != "/host:CPU":
            continue
        ev_name = {k: v.name for k, v in p.event_metadata.items()}
        st_name = {k: v.name for k, v in p.stat_metadata.items()}
        for line in p.lines:
            for e in line.events:
                kind = ev_name.get(e.metadata_id)
                if kind not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                stats = {}
                for s in e.stats:
                    which = s.WhichOneof("value")
                    v = getattr(s, which)
                    stats[st_name[s.metadata_id]] = p.stat_metadata[v].name if which == "ref_value" else v
                mid = str(stats.get("allocator_name", stats.get("index_on_host", "")))
                r = out[mid]
                r["peak"] = max(r["peak"], int(stats["bytes_allocated"]))
                r["allocs" if kind == "MemoryAllocation" else "frees"] += 1
    return dict(out)


def _peaks(path: Path) -> dict[str, dict]:
    pk = A.memory_peak(polyprof.load(path)).to_pandas()
    return {str(r["allocator"]): r for r in pk.to_dict("records")}


@pytest.mark.parametrize("path", [H200, CONV, TPU], ids=["jax_h200", "jax_conv_8gpu", "tpu_inference"])
def test_peak_per_allocator_is_the_files_own_most_bytes_allocated(path):
    ref = _reference(path)
    got = _peaks(path)
    assert sorted(got) == sorted(ref)
    for mid, r in ref.items():
        assert int(got[mid]["peak_bytes"]) == r["peak"], mid
        assert int(got[mid]["allocations"]) == r["allocs"], mid
        assert int(got[mid]["frees"]) == r["frees"], mid
        assert bool(got[mid]["from_allocator"])


def test_h200_peak_device_and_live_allocations():
    """XProf's memory_profile on this file: GPU_0_bfc, peak 14,418,432 bytes in use
    (xprof 2.24); the four allocations of the peak's step it lists plus what it calls
    unused preallocated memory. polyprof lists every allocation of the profile live at
    the peak: six (one made a step earlier), 13,631,744 bytes."""
    r = _peaks(H200)["GPU_0_bfc"]
    assert r["device"] == "/device:GPU:0"
    assert int(r["peak_bytes"]) == 14_418_432
    assert int(r["start_bytes"]) == 3_932_416  # held before the first event: its total less its size
    assert (int(r["live_at_peak"]), int(r["live_at_peak_bytes"])) == (6, 13_631_744)


def test_tpu_frees_without_a_size_take_their_allocations():
    """The TPU runtime's frees carry no size: each takes its allocation's (same memory id
    and address), so every series' events add up to its change in totals."""
    t = polyprof.load(TPU)
    m = A.memory.memory(t)
    assert m.n_series == 4 and sorted(m.allocator) == ["0", "1", "2", "3"]
    assert sorted(m.device) == [f"/device:TPU:{i}" for i in range(4)]
    for s in range(m.n_series):
        lo, hi = m.bounds(s)
        assert (m.delta[lo:hi] < 0).sum() == (m.delta[lo:hi] > 0).sum()
        np.testing.assert_array_equal(np.diff(m.level[lo:hi]), m.delta[lo + 1:hi])


_XPROF = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "memory_profile", {"use_saved_result": False})
doc = json.loads(data if isinstance(data, str) else data.decode())
print(json.dumps({k: p["profileSummary"]["peakStats"] for k, p in doc["memoryProfilePerAllocator"].items()}))
"""


@pytest.mark.parametrize("path", [H200, CONV], ids=["jax_h200", "jax_conv_8gpu"])
def test_peaks_are_xprofs_memory_profile_peaks(path, tmp_path):
    """XProf's memory_profile tool (run here) on the same file: per allocator, its peak
    bytes in use (heap; the stack part is 0 on these GPUs) is polyprof's peak."""
    pytest.importorskip("xprof")
    r = subprocess.run([sys.executable, "-c", _XPROF, str(path)], capture_output=True, text=True, timeout=240,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    xprof = json.loads(r.stdout.strip().splitlines()[-1])
    got = _peaks(path)
    assert sorted(xprof) == sorted(got)
    for mid, st in xprof.items():
        assert int(st.get("stackReservedBytes", 0)) == 0
        assert int(got[mid]["peak_bytes"]) == int(st["peakBytesInUse"]), mid
