"""op_stats against torch's own ``key_averages`` on a real torch (CPU) profile: count,
total and self time of every op. ``aten::pow`` with a scalar base calls ``aten::pow``
beside ``aten::result_type``: not its only child, so torch counts both calls, and so
does polyprof (an op is merged into a parent of its name only when it is the parent's
only child op; tests/test_peers_tb_plugin.py has the merged case on tb_plugin's data)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import polyprof  # noqa: E402
from polyprof.analyze.frames import column  # noqa: E402
from polyprof.analyze.ops import op_stats  # noqa: E402


def test_op_stats_equal_key_averages(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(32, 32)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(5):
            torch.ops.aten.pow.Scalar(2, x)
            x.var()
            torch.nn.functional.linear(x, x)
    f = tmp_path / "cpu.json"
    p.export_chrome_trace(str(f))
    ka = {e.key: e for e in p.key_averages() if e.key.startswith("aten::")}
    t = op_stats(polyprof.load(f))
    row = {n: i for i, n in enumerate(column(t, "name"))}
    assert ka["aten::pow"].count == 10  # the nested call counted too
    for name, e in ka.items():
        i = row[name]
        assert int(column(t, "count")[i]) == e.count, name
        assert column(t, "total_ns")[i] / 1000 == pytest.approx(e.cpu_time_total, abs=0.002 * e.count), name
        assert column(t, "self_ns")[i] / 1000 == pytest.approx(e.self_cpu_time_total, abs=0.002 * e.count), name
