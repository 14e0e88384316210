"""A real torch.profiler trace holds Kineto's own span over the whole recording
("PyTorch Profiler (0)", category ``Trace``). It blocked every quiet point of a store
rank's plan, so no real trace was ever summarised window by window: a rank above the
memory bound was read whole (a review). It is now counted in the window it starts in,
and the windowed summary equals the whole one."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import polyprof
from polyprof.store.window import plan

H200 = Path(__file__).parent / "data" / "h200" / "torch_transformer_h200.json.gz"


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)
    return a == b


def test_a_torch_trace_is_cut_into_windows_and_summarised_as_whole(tmp_path: Path) -> None:
    store = polyprof.load_ranks([H200]).convert(tmp_path / "st")
    p = plan(store / "rank=0", 15_000)
    assert len(p.events) == 5 and p.events.sum() == 67_579  # one window before
    runs = {}
    for name, env in (("whole", {}), ("windows", {"POLYPROF_MEMORY_BOUND": "151"})):
        r = subprocess.run([sys.executable, "-m", "polyprof", "-v", "summary", str(store), "--json"],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
        assert r.returncode == 0, r.stderr
        runs[name] = json.loads(r.stdout)
        if env:
            assert "summarised in 5 windows of whole steps" in r.stderr
    # an event rule's finding is the worst window's (by severity, then its share): the
    # synchronisation share of the window where it is highest (54.9%; the first window's
    # 36% before), the rank read whole 49.3%
    sync = {k: next(f["evidence"]["share_pct"] for f in v["findings"] if f["id"] == "sync_stalls")
            for k, v in runs.items()}
    assert sync == {"whole": 49.32, "windows": 54.9}
    whole, windows = runs["whole"]["tables"], runs["windows"]["tables"]
    for table in ("kernel_breakdown", "op_stats", "temporal_breakdown", "copies", "kernel_efficiency", "mfu"):
        a, b = whole[table]["records"], windows[table]["records"]
        assert len(a) == len(b), table
        for x, y in zip(a, b):
            assert all(_close(x[k], y[k]) for k in x), (table, x, y)
