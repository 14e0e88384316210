"""Native plugins: the C sample plugin built with the system compiler, loaded through
the C ABI, driven by real sessions and by the conformance kit."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from polyprof.collect import conformance
from polyprof.collect.conformance import Limits, check
from polyprof.collect.native import NativeHandle, NativePlugin, PluginTable, load_native, native_factory
from polyprof.collect.registry import plugin_path_libraries
from polyprof.collect.session import Session
from polyprof.errors import PluginError
from polyprof.formats.detect import load

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "native_plugin"
SRC = str(ROOT / "src")
CC = shutil.which("cc")

pytestmark = pytest.mark.skipif(CC is None, reason="no system C compiler (cc)")

VARIANTS = {
    "procstat": [],
    "broken": ["-DBROKEN"],
    "double_start": ["-DBROKEN_DOUBLE_START", "-DPLUGIN_NAME=\"procstat-ds\""],
    "buffer": ["-DBROKEN_BUFFER", "-DPLUGIN_NAME=\"procstat-buf\""],
    "xspace": ["-DBROKEN_XSPACE", "-DPLUGIN_NAME=\"procstat-xs\""],
    "slow_stop": ["-DBROKEN_SLOW_STOP", "-DPLUGIN_NAME=\"procstat-slow\""],
    "abi10": ["-DPOLYPROF_ABI_MINOR=0"],
    "future": ["-DFUTURE_ABI", "-DPLUGIN_NAME=\"procstat-future\""],
    "ownclock": ["-DOWN_CLOCK"],
    "bad_size": ["-DBAD_TABLE_SIZE=40"],
    "bad_major": ["-DBAD_MAJOR"],
    "missing_stop": ["-DMISSING_STOP"],
}


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every variant, compiled as the README says: cc -shared -fPIC -O2 -pthread."""
    out = tmp_path_factory.mktemp("native")
    built, jobs = {}, []
    for name, flags in VARIANTS.items():
        so = out / f"lib{name}.so"
        cmd = [CC, "-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-Wextra", "-Werror",
               f"-I{ROOT / 'include'}", *flags, str(EXAMPLE / "procstat.c"), "-o", str(so)]
        jobs.append((name, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        built[name] = so
    for name, job in jobs:
        log, _ = job.communicate(timeout=120)
        assert job.returncode == 0, f"{name} did not build:\n{log}"
    return built


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra)
    return env


def _polyprof(*args: str, cwd: Path, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], cwd=cwd, env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


WORKLOAD = textwrap.dedent("""
    import time
    t0 = time.process_time()  # first thing: the session runs around the whole script
    import json, sys, threading
    import numpy as np
    import polyprof

    def burn(seconds):
        a = np.random.default_rng(0).random((160, 160))
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            a = a @ a
            a /= np.abs(a).max()

    with polyprof.section("compute"):
        workers = [threading.Thread(target=burn, args=(0.4,)) for _ in range(2)]
        for w in workers:
            w.start()
        burn(0.4)
        for w in workers:
            w.join()
    json.dump({"process_cpu_s": time.process_time() - t0}, open(sys.argv[1], "w"))
""")


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("script") / "work.py"
    p.write_text(WORKLOAD)
    return p


# ------------------------------------------------------------------ 1. the sample plugin
def test_sample_plugin_runs_in_polyprof_run(libs, script, tmp_path):
    out = tmp_path / "work.polyprof"
    r = _polyprof("run", "--plugin", str(libs["procstat"]), "-o", str(out), str(script),
                  str(tmp_path / "cpu.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # in the summary: its events (category thread_cpu) next to the host's section
    assert "thread_cpu" in r.stdout and "compute" in r.stdout, r.stdout
    trace = load(out)
    assert trace.metadata["plugins"].get("procstat") == "ok", trace.metadata["plugin_errors"]
    plane = trace.plane_by_name("/host:procstat")
    assert plane is not None
    rows = np.flatnonzero(trace.event_planes() == plane.id)
    threads = {trace.tracks[t].tid for t in trace.events["track"][rows]}
    assert len(threads) >= 3, threads  # main thread and two workers at least
    # per-interval CPU time adds up to what the process itself measured
    cpu_ns = trace.stats["cpu_ns"]
    on_plane = np.isin(cpu_ns.rows, rows)
    recorded_s = float(np.asarray(cpu_ns.values[on_plane], np.float64).sum()) / 1e9
    measured_s = json.loads((tmp_path / "cpu.json").read_text())["process_cpu_s"]
    assert measured_s > 0.1
    assert 0.7 * measured_s < recorded_s < 1.3 * measured_s + 0.1, (recorded_s, measured_s)
    # events of the plugin lie inside the session, on its clock
    sess = trace.metadata["session"]
    assert trace.start_ns[rows].min() >= sess["start_ns"]
    assert trace.end_ns[rows].max() <= sess["stop_ns"] + 10_000_000
    # process-wide counters came through the XSpace too
    names = {trace.strings[i] for i in trace.counters["name"][trace.counters["plane"] == plane.id]}
    assert {"procstat.cpu_cores", "procstat.context_switches_per_s", "procstat.threads"} <= names
    cores = trace.counters["value"][(trace.counters["plane"] == plane.id)
                                    & (trace.counters["name"] == trace.string_id("procstat.cpu_cores"))]
    assert cores.max() > 0.5  # three busy threads on a 2-core machine


def test_kit_passes_the_sample_plugin(libs, tmp_path):
    r = _polyprof("plugin", "check", str(libs["procstat"]), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for clause, _ in conformance.CLAUSES:
        assert clause in r.stdout
    assert "FAIL" not in r.stdout
    assert r.stdout.count("PASS") == len(conformance.CLAUSES)


# ------------------------------------------------------------------ 2. the broken builds
@pytest.mark.parametrize("variant, expected", [
    ("double_start", {"double_start"}),
    ("buffer", {"buffer_too_small"}),
    # the session rejects a malformed XSpace, so the trace clause fails with it
    ("xspace", {"xspace_well_formed", "valid_trace"}),
    ("broken", {"double_start", "buffer_too_small", "xspace_well_formed", "valid_trace"}),
])
def test_broken_builds_fail_exactly_what_they_break(libs, variant, expected):
    report = check(str(libs[variant]), limits=Limits(activity_s=0.08))
    assert set(report.failed) == expected, [(r.id, r.status, r.reason) for r in report.results]
    assert not report.ok
    reasons = {r.id: r.reason for r in report.results}
    if "double_start" in expected:
        assert "second start() succeeded" in reasons["double_start"]
    if "buffer_too_small" in expected:
        assert "instead of ERR_BUFFER_TOO_SMALL" in reasons["buffer_too_small"]
        assert "past the end" in reasons["buffer_too_small"]
    if "xspace_well_formed" in expected:
        assert "event metadata ids never defined" in reasons["xspace_well_formed"]


def test_broken_plugin_cli_reports_reasons(libs, tmp_path):
    r = _polyprof("plugin", "check", str(libs["broken"]), "--activity", "0.08", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stdout.count("FAIL") == 4, r.stdout
    assert "4 clause(s) fail" in r.stdout
    assert "ERR_BUFFER_TOO_SMALL" in r.stdout and "never defined" in r.stdout


def test_session_with_broken_plugin_keeps_other_plugins_data(libs, script, tmp_path):
    out = tmp_path / "b.polyprof"
    r = _polyprof("run", "--plugin", str(libs["broken"]), "--plugin", str(libs["abi10"]), "-o", str(out),
                  str(script), str(tmp_path / "cpu.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "procstat-broken failed in collect" in r.stdout
    trace = load(out)
    errs = trace.metadata["plugin_errors"]
    assert [e["plugin"] for e in errs] == ["procstat-broken"]
    assert "malformed XSpace" in errs[0]["error"]
    assert trace.metadata["plugins"]["procstat-broken"] == "failed"
    assert trace.metadata["plugins"]["host"] == "ok" and trace.metadata["plugins"]["procstat-abi10"] == "ok"
    assert "compute" in set(trace.names())  # the host plugin's section
    assert trace.plane_by_name("/host:procstat") is not None  # the other native plugin's data
    assert (trace.names() == "").sum() == 0  # nothing of the malformed XSpace slipped in


def test_time_limits(libs):
    report = check(str(libs["slow_stop"]), limits=Limits(stop_s=0.5, activity_s=0.05))
    tl = report.result("time_limits")
    assert tl.status == "fail" and "stop() did not return within 0.5 s" in tl.reason
    # the session gives native calls a limit too: it goes on without the plugin
    slow = load_native(libs["slow_stop"], call_timeout_s=0.3)
    t0 = time.perf_counter()
    with Session(["host", slow], options={"host": {"sample_interval_s": 0}}) as s:
        import polyprof

        with polyprof.section("still here"):
            pass
    assert time.perf_counter() - t0 < 1.4  # did not wait for the 1.5 s stop
    assert s.trace.metadata["plugin_errors"][0]["phase"] == "stop"
    assert "within 0.3 s" in s.trace.metadata["plugin_errors"][0]["error"]
    assert "still here" in set(s.trace.names())
    time.sleep(1.3)  # let the abandoned stop() finish before the module's next test


# ------------------------------------------------------------------ 3. struct versions
def test_older_smaller_struct_still_loads(libs):
    h = NativeHandle(libs["abi10"])
    try:
        assert h.abi == (1, 0)
        assert h.struct_size < ctypes.sizeof(PluginTable)  # the ABI 1.0 table
        assert not h.covers("clock_domain")  # so the 1.1 fields were not read
        assert h.clock_domain == 0
    finally:
        h.destroy()
    p = load_native(libs["abi10"])
    with Session([p], options={"host": {"sample_interval_s": 0}}) as s:
        conformance.workload(0.1)
    assert s.trace.metadata["plugins"]["procstat-abi10"] == "ok"
    plane = s.trace.plane_by_name("/host:procstat")
    assert plane is not None and (s.trace.event_planes() == plane.id).sum() > 0
    assert check(str(libs["abi10"]), limits=Limits(activity_s=0.08)).ok


def test_newer_larger_struct_is_accepted(libs):
    h = NativeHandle(libs["future"])
    try:
        assert h.abi == (1, 9) and h.struct_size > ctypes.sizeof(PluginTable)
    finally:
        h.destroy()
    assert check(str(libs["future"]), limits=Limits(activity_s=0.08)).ok


@pytest.mark.parametrize("variant, message", [
    ("bad_size", "struct_size is 40 bytes, smaller than ABI 1.0"),
    ("bad_major", "built for plugin ABI 2.2"),
    ("missing_stop", "required function(s) stop NULL"),
])
def test_loader_refuses_bad_tables(libs, variant, message, tmp_path):
    with pytest.raises(PluginError, match=message.replace("(", r"\(").replace(")", r"\)")):
        NativeHandle(libs[variant])
    r = _polyprof("plugin", "check", str(libs[variant]), cwd=tmp_path)
    assert r.returncode == 1 and "FAIL" in r.stdout


def test_loader_refuses_non_plugins(tmp_path):
    with pytest.raises(PluginError, match="no such native plugin"):
        NativeHandle(tmp_path / "missing.so")
    c = tmp_path / "other.c"
    c.write_text("int something(void) { return 1; }\n")
    so = tmp_path / "libother.so"
    subprocess.run([CC, "-shared", "-fPIC", str(c), "-o", str(so)], check=True)
    with pytest.raises(PluginError, match="does not export polyprof_plugin_init"):
        NativeHandle(so)


# ------------------------------------------------------------------ clocks
def test_own_clock_is_synced_onto_the_session_clock(libs):
    p = load_native(libs["ownclock"])
    with Session([p], options={"host": {"sample_interval_s": 0}}) as s:
        conformance.workload(0.15)
    t = s.trace
    info = t.metadata["native_plugins"]["procstat-ownclock"]
    sync = t.metadata["clock_sync"]["/host:procstat"]["procstat-ownclock"]  # keyed by plane, then plugin
    assert info["clock"] == "own"
    assert abs(sync["drift_ppm"]) < 1000 and sync["uncertainty_ns"] < 1_000_000
    plane = t.plane_by_name("/host:procstat")
    rows = np.flatnonzero(t.event_planes() == plane.id)
    sess = t.metadata["session"]
    # CLOCK_MONOTONIC_RAW differs from CLOCK_MONOTONIC; mapped, the events fall in the session
    assert len(rows) and t.start_ns[rows].min() >= sess["start_ns"] - 1_000_000
    assert t.end_ns[rows].max() <= sess["stop_ns"] + 1_000_000


# ------------------------------------------------------------------ discovery
def test_plugin_path_env(libs, tmp_path, script):
    d = tmp_path / "plugins"
    d.mkdir()
    shutil.copy(libs["procstat"], d / "libprocstat.so")
    assert plugin_path_libraries(str(d)) == [d / "libprocstat.so"]
    env = _env(POLYPROF_PLUGIN_PATH=str(d))
    r = _polyprof("plugins", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "procstat" in r.stdout
    out = tmp_path / "p.polyprof"
    r = _polyprof("run", "-o", str(out), str(script), str(tmp_path / "cpu.json"), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    trace = load(out)
    assert trace.metadata["plugins"].get("procstat") == "ok"
    assert trace.plane_by_name("/host:procstat") is not None
    r = _polyprof("plugin", "check", "procstat", "--activity", "0.08", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout


def test_entry_point_factory(libs, tmp_path):
    """A vendor package whose entry point is native_factory(its .so)."""
    pkg = tmp_path / "vendorpkg"
    pkg.mkdir()
    shutil.copy(libs["procstat"], pkg / "libvendor.so")
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        from pathlib import Path
        from polyprof.collect.native import native_factory

        Factory = native_factory(Path(__file__).parent / "libvendor.so", name="vendor")
    """))
    env = _env()
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}"
    r = _polyprof("plugin", "check", "vendorpkg:Factory", "--json", "--activity", "0.08", cwd=tmp_path, env=env)
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["kind"] == "native" and rep["ok"], rep
    cls = native_factory(libs["procstat"], name="vendor")
    assert cls.availability().ok and cls.name == "vendor" and issubclass(cls, NativePlugin)
    inst = cls()
    assert isinstance(inst, NativePlugin)
    inst.close()


def test_python_plugin_template_passes_the_kit(tmp_path):
    """The copyable template under examples/python_plugin, checked with the kit."""
    tpl = ROOT / "examples" / "python_plugin"
    env = _env()
    env["PYTHONPATH"] = f"{tpl / 'src'}{os.pathsep}{env['PYTHONPATH']}"
    r = _polyprof("plugin", "check", "polyprof_example_plugin:GcPausePlugin", "--activity", "0.08",
                  cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------ 4. built-in Python plugins
@pytest.mark.parametrize("name", ["host", pytest.param("opencl", marks=pytest.mark.opencl), "torch", "jax"])
def test_builtin_python_plugins_pass_the_kit(name):
    if importlib.util.find_spec(f"polyprof.plugins.{name}") is None:
        pytest.skip(f"polyprof.plugins.{name} is not on this branch yet")
    module = importlib.import_module(f"polyprof.plugins.{name}")
    cls = next(v for v in vars(module).values()
               if isinstance(v, type) and getattr(v, "name", None) == name and hasattr(v, "_collect"))
    avail = cls.availability()
    if not avail:
        pytest.skip(f"{name} not available here: {avail.reason}")
    # no workload_fn: the kit runs the plugin's own conformance_workload, as `polyprof plugin check` does
    report = check(name, limits=Limits(activity_s=0.2))
    assert report.ok, [(r.id, r.status, r.reason) for r in report.results]
    assert report.kind == "python"
    assert "empty" not in report.result("valid_trace").reason  # it recorded the work, in the session


@pytest.mark.opencl
def test_plugin_check_cli_exercises_the_opencl_device(tmp_path):
    """`polyprof plugin check opencl` drives the device, so the clauses see real data."""
    from polyprof.plugins.opencl import OpenCLPlugin

    if not OpenCLPlugin.availability():
        pytest.skip(OpenCLPlugin.availability().reason)
    r = _polyprof("plugin", "check", "opencl", "--json", "--activity", "0.1", cwd=tmp_path)
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["ok"], rep
    clauses = {c["id"]: c["reason"] for c in rep["clauses"]}
    assert "empty" not in clauses["valid_trace"] and "gave 0 events" not in clauses["lifecycle"], clauses


def test_plugins_lists_a_missing_plugin_path_entry(tmp_path):
    """A mistyped POLYPROF_PLUGIN_PATH entry is shown by `polyprof plugins`, not dropped silently."""
    missing = tmp_path / "nowhere" / "libvendor.so"
    r = _polyprof("plugins", cwd=tmp_path, env=_env(POLYPROF_PLUGIN_PATH=str(missing), COLUMNS="250"))
    assert r.returncode == 0, r.stderr
    line = next((ln for ln in r.stdout.splitlines() if "libvendor.so" in ln), None)
    assert line is not None, r.stdout
    assert " no " in line and "does not exist" in r.stdout, r.stdout
