"""Devices that list but cannot compile kernels: the probe, the plugin's availability and
the demo's fallback. The failing build is a real one: the real driver is handed a kernel
that does not compile, as a driver that cannot compile anything would answer any kernel."""

from __future__ import annotations

import subprocess
import sys

import pytest

cl = pytest.importorskip("pyopencl")

from polyprof.plugins.opencl import OpenCLPlugin, probe  # noqa: E402

SAXPY = ("__kernel void saxpy(__global float *y, __global const float *x, const float a) "
         "{ int i = get_global_id(0); y[i] = a * x[i] + y[i]; }")
BROKEN = "__kernel void polyprof_probe(__global int *a) { a[0] = undeclared_name; }"

try:
    _DEVICES = probe.devices()
except Exception:  # no platform at all
    _DEVICES = []
if not _DEVICES:
    pytest.skip("no OpenCL device listed here", allow_module_level=True)
#: each device's verdict on the good probe kernel (some drivers here cannot compile at all)
_REAL = [probe.build_problem(d) for d in _DEVICES]


@pytest.fixture
def broken_compiler(monkeypatch):
    monkeypatch.setattr(probe, "PROBE_SOURCE", BROKEN)
    monkeypatch.setattr(probe, "_verdicts", {})


def test_probe_reports_the_drivers_error_for_every_device(broken_compiler):
    dev, problems = probe.first_compiling()
    assert dev is None
    assert len(problems) == len(_DEVICES)
    for d, real, line in zip(_DEVICES, _REAL, problems):
        assert line.startswith(d.name.strip() + ": error:") and "\n" not in line, line
        # a device that compiles names the kernel's fault; one that can't, its own
        assert line.endswith(real) if real else "undeclared_name" in line, line


def test_availability_says_no_device_compiles(broken_compiler):
    avail = OpenCLPlugin.availability()
    assert not avail
    assert "can compile kernels" in avail.reason and _DEVICES[0].name.strip() in avail.reason


def test_probe_verdict_matches_a_real_build():
    """A device the probe accepts builds another kernel; one it rejects fails to."""
    for d in _DEVICES:
        why = probe.build_problem(d)
        try:
            cl.Program(cl.Context([d]), SAXPY).build()
            built = True
        except cl.Error:
            built = False
        assert built == (why is None), (d.name, why)


def test_demo_falls_back_with_a_one_line_reason(tmp_path):
    code = ("import sys; from polyprof.plugins.opencl import probe; "
            f"probe.PROBE_SOURCE = {BROKEN!r}; from polyprof.cli import main; "
            f"sys.exit(main(['demo', '-o', {str(tmp_path / 'd.polyprof')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    why = [ln for ln in r.stderr.splitlines() if "opencl workload can't run here" in ln]
    assert len(why) == 1 and "can compile kernels" in why[0] and _DEVICES[0].name.strip() in why[0], r.stderr
    assert "threads workload" in r.stderr and "train step" in r.stdout


def test_probe_keeps_the_compilers_diagnostics_out_of_the_programs_stderr():
    """A driver's compiler writes to fd 2 ("1 error generated." seen in a forked worker
    under --serve): the probe drops the lines of its own build log and keeps anything
    else written meanwhile."""
    import subprocess
    import sys

    code = (
        "import os\n"
        "from polyprof.plugins.opencl.probe import _stderr_kept_clean\n"
        "with _stderr_kept_clean() as note:\n"
        "    os.write(2, b\"error: unknown target CPU 'generic'\\n1 error generated.\\nthe program's own line\\n\")\n"
        "    note.append(\"Build failed\\nerror: unknown target CPU 'generic'\")\n"
        "os.write(2, b'after\\n')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr == b"the program's own line\nafter\n"
