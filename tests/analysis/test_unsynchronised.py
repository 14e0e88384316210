"""A device whose clock was not put on the host's (analyze/clocks.py): flagged in every
output and kept out of the findings that compare it with the host.

The live case is real: PoCL with every clock sample source of the OpenCL plugin off.
The findings case takes the real sampled_rank0 trace (where host-bound and exposed
communication fire on its GPU) and marks its GPU's fit as one made from no samples,
as the OpenCL plugin records it.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys

import pytest

import polyprof
import polyprof.analyze as A
from polyprof.analyze.clocks import unsynchronised
from polyprof.report.tables import build, to_json

NO_SAMPLES = {"sync_markers": 0, "clock_interval_s": 0, "event_samples": False}


def _no_fit() -> dict:
    return {"method": "", "offset_ns": 0, "drift_ppm": 0.0, "bound_ns": math.inf, "n": 0,
            "consistent": False, "message": "no clock samples"}


def test_findings_leave_an_unsynchronised_device_out(kineto_files):
    t = polyprof.load(next(p for p in kineto_files if p.name.startswith("sampled_rank0")))
    before = {f.id for f in A.findings(t, window="auto") if f.plane == "/device:GPU:0"}
    assert "exposed_communication" in before
    u = copy.copy(t)
    u.__dict__.pop("_polyprof_memo", None)
    u.metadata = {**t.metadata, "clock_sync": {"/device:GPU:0": {"cupti": _no_fit()}}}
    assert set(unsynchronised(u)) == {"/device:GPU:0"}
    after = A.findings(u, window="auto")
    assert [f.id for f in after if f.plane == "/device:GPU:0"] == ["unsynchronised_clock"]
    flag = next(f for f in after if f.id == "unsynchronised_clock")
    assert flag.severity == "high" and "no clock samples" in flag.evidence["why"] and flag.suggestion
    # a fit with samples and a bound is a fit: nothing flagged
    good = copy.copy(t)
    good.__dict__.pop("_polyprof_memo", None)
    good.metadata = {**t.metadata, "clock_sync": {"/device:GPU:0": {"cupti": {**_no_fit(), "n": 12, "bound_ns": 800.0}}}}
    assert unsynchronised(good) == {}


@pytest.mark.opencl  # conftest: skipped, with the reason, where no OpenCL device compiles
@pytest.mark.parametrize("sampling", [False, True])
def test_live_opencl_without_clock_samples_is_flagged_everywhere(tmp_path, sampling):
    demo = pytest.importorskip("polyprof.demo.opencl_pipeline", reason="pyopencl or an OpenCL device missing")
    out = tmp_path / "ocl.polyprof"
    opts = {"host": {"sample_interval_s": 0}, **({} if sampling else {"opencl": NO_SAMPLES})}
    with polyprof.profile(["host", "opencl"], options=opts, output=out):
        demo.main(["--frames", "4", "--height", "64", "--width", "64"])
    t = polyprof.load(out)
    plane = "/device:OpenCL:0"
    if sampling:  # the control: the same run with the plugin's clock fit is not flagged
        assert unsynchronised(t) == {}
        assert "unsynchronised_clock" not in {f.id for f in A.findings(t)}
        return
    assert plane in unsynchronised(t)
    rep = build(t)
    assert plane in rep.overview["unsynchronised"]
    assert [f.id for f in rep.findings if f.plane == plane] == ["unsynchronised_clock"]
    assert json.loads(to_json(rep))["overview"]["unsynchronised"][plane]
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(out)], capture_output=True, text=True,
                       timeout=300, env={**__import__("os").environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[:4]
    assert any(line.startswith("not synchronised: /device:OpenCL:0: no clock samples") for line in head), head
    html = tmp_path / "r.html"
    r = subprocess.run([sys.executable, "-m", "polyprof", "report", str(out), "-o", str(html)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    page = html.read_text()
    assert '"unsynchronised":{"/device:OpenCL:0"' in page.replace(" ", "") and "not synchronised" in page
