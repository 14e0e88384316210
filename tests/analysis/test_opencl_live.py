"""section_stats and friends on a live OpenCL (PoCL) session: polyprof's own sections
projected onto the OpenCL device. Runs when the OpenCL plugin and a device are present."""

from __future__ import annotations

import pytest

import polyprof
import polyprof.analyze as A

pytestmark = pytest.mark.opencl  # conftest: skipped, with the reason, where no device compiles


def test_opencl_pipeline_sections_project_onto_the_device(capsys):
    pytest.importorskip("polyprof.plugins.opencl", reason="OpenCL plugin not on this branch")
    demo = pytest.importorskip("polyprof.demo.opencl_pipeline", reason="pyopencl or an OpenCL device missing")
    with polyprof.profile(["host", "opencl"]) as prof:
        demo.main(["--frames", "3", "--height", "64", "--width", "64"])
    t = prof.trace
    dev = [p.name for p in t.planes if p.name.startswith("/device:OpenCL")]
    assert dev, [p.name for p in t.planes]
    sec = A.section_stats(t).to_pandas().set_index("name")
    for name in ("blur", "gradient"):
        assert sec.loc[name, "count"] == 3
        assert sec.loc[name, "device_ns"] > 0 and sec.loc[name, "projected_ns"] > 0, name
    # a parent section's projection covers its children's device work
    assert sec.loc["frame", "device_ns"] >= sec.loc["blur", "device_ns"] + sec.loc["gradient", "device_ns"]
    ls = A.launch_stats(t)
    assert len(ls) and (ls["device_start_ns"] >= ls["launch_start_ns"]).all()
    ss = A.step_stats(t)
    assert len(ss) >= 3 and (ss["busy_ns"] > 0).any()
    from polyprof.derive.cache import correlation

    c = correlation(t).counts
    with capsys.disabled():
        print(f"\nOpenCL live: {c}")
