"""A real torch.profiler (Kineto, CPU) trace: steps, framework ops and sections."""

from __future__ import annotations

import pytest


def test_torch_cpu_trace_steps_ops_and_sections(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("polyprof.formats.kineto")
    import polyprof
    import polyprof.analyze as A

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(32, 64)
    out = tmp_path / "torch.json"
    sched = torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(4):  # one warmup step, three recorded
            with torch.profiler.record_function("forward pass"):
                model(x).sum().backward()
            prof.step()
    t = polyprof.load(out)
    ss = A.step_stats(t)
    assert len(ss) == 3 and (ss["host_ns"] > 0).all()
    ops = A.op_stats(t).to_pandas().set_index("name")
    assert ops.loc["aten::linear", "count"] == 6
    assert (ops["self_ns"] <= ops["total_ns"]).all() and (ops["self_ns"] >= 0).all()
    # aten::linear's self time excludes the aten::addmm it calls
    assert ops.loc["aten::linear", "self_ns"] < ops.loc["aten::linear", "total_ns"]
    sec = A.section_stats(t).to_pandas().set_index("name")
    assert sec.loc["forward pass", "count"] == 3
    assert not any(n.startswith("ProfilerStep#") for n in sec.index)
