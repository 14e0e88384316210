"""Native plugins run in a helper process (issue 20): a segfault, abort(), _exit() or
hang in vendor code, at load or in any call, is a reported plugin error; the program's
output and exit code are unchanged and the other plugins' data is in the trace. The
faulty plugins are the real sample plugin (examples/native_plugin/procstat.c) built
with -DFAULT_<PHASE>=K, compiled with the system compiler."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from polyprof.collect.conformance import Limits, check
from polyprof.collect.native import load_native
from polyprof.collect.session import Session
from polyprof.formats.detect import load

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "native_plugin"
CC = shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no system C compiler (cc)")

SEGV, ABORT, EXIT, HANG = 1, 2, 3, 4
VARIANTS = {
    "ok": [],
    "segv_collect": [f"-DFAULT_COLLECT={SEGV}", '-DPLUGIN_NAME="segv-collect"'],
    "segv_start": [f"-DFAULT_START={SEGV}", '-DPLUGIN_NAME="segv-start"'],
    "abort_stop": [f"-DFAULT_STOP={ABORT}", '-DPLUGIN_NAME="abort-stop"'],
    "exit_collect": [f"-DFAULT_COLLECT={EXIT}", '-DPLUGIN_NAME="exit-collect"'],
    "hang_start": [f"-DFAULT_START={HANG}", '-DPLUGIN_NAME="hang-start"'],
    "segv_init": [f"-DFAULT_INIT={SEGV}", '-DPLUGIN_NAME="segv-init"'],
    "noisy": ["-DNOISY", '-DPLUGIN_NAME="noisy"'],
}


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("faulty")
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


SCRIPT = """
import sys, threading, time, polyprof
def spin():
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:
        pass
with polyprof.section("compute"):
    ts = [threading.Thread(target=spin) for _ in range(2)]
    [t.start() for t in ts]; spin(); [t.join() for t in ts]
print("program output", sys.argv[1:])
sys.exit(7)
"""


def _run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=180, env=env)


def test_segfaults_in_collect_and_start_under_run(libs, tmp_path):
    """What it must show 1: the program's output and exit code unchanged, the other
    plugins' data in the trace, each crash named in plugin_errors."""
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    plain = subprocess.run([sys.executable, str(script), "a"], capture_output=True, text=True, timeout=60)
    out = tmp_path / "s.polyprof"
    r = _run("run", "--no-summary", "--plugins", "host", "--plugin", str(libs["segv_collect"]),
             "--plugin", str(libs["segv_start"]), "--plugin", str(libs["ok"]), "-o", str(out), str(script), "a",
             cwd=tmp_path)
    assert plain.returncode == 7
    assert r.returncode == plain.returncode and r.stdout == plain.stdout, r.stderr
    tr = load(out)
    errs = {e["plugin"]: e for e in tr.metadata["plugin_errors"]}
    assert set(errs) == {"segv-collect", "segv-start"}
    assert errs["segv-collect"]["phase"] == "collect" and "killed by SIGSEGV" in errs["segv-collect"]["error"]
    assert errs["segv-start"]["phase"] == "start" and "killed by SIGSEGV" in errs["segv-start"]["error"]
    assert "crashed in start()" in errs["segv-start"]["error"]
    assert tr.metadata["plugins"]["procstat"] == "ok" and tr.metadata["plugins"]["host"] == "ok"
    assert "compute" in set(tr.names())
    plane = tr.plane_by_name("/host:procstat")  # the healthy native plugin, observing the program
    assert plane is not None and tr.metadata["native_plugins"]["procstat"]["process"] == "helper"
    threads = {tr.tracks[t].tid for t in tr.events["track"][tr.event_planes() == plane.id]}
    assert os.getpid() not in threads and len(threads) >= 2  # the program's threads, not the helper's


@pytest.mark.parametrize("variant, phase, how", [
    ("abort_stop", "stop", "killed by SIGABRT"),
    ("exit_collect", "collect", "exited with status 3"),
    ("hang_start", "start", "did not return within 0.5 s"),
])
def test_other_faults_are_reported_plugin_errors(libs, variant, phase, how):
    import polyprof

    plugin = load_native(libs[variant], call_timeout_s=0.5)
    with Session(["host", plugin], options={"host": {"sample_interval_s": 0}}) as s:
        with polyprof.section("still here"):
            pass
    (err,) = s.trace.metadata["plugin_errors"]
    assert err["plugin"] == VARIANTS[variant][1].split('"')[1] and err["phase"] == phase
    assert how in err["error"]
    assert "still here" in set(s.trace.names())
    assert not plugin.handle.alive  # the helper is gone (a hung one was killed)


def test_a_library_that_crashes_in_init_is_listed_unavailable(libs, tmp_path):
    env = dict(os.environ, POLYPROF_PLUGIN_PATH=f"{libs['segv_init']}{os.pathsep}{libs['ok']}")
    r = _run("plugins", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "killed by SIGSEGV" in r.stdout and "procstat" in r.stdout
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    out = tmp_path / "s.polyprof"
    r = _run("run", "--no-summary", "-o", str(out), str(script), cwd=tmp_path, env=env)
    assert r.returncode == 7 and "program output" in r.stdout, r.stderr
    tr = load(out)
    assert tr.metadata["plugins"].get("procstat") == "ok"
    assert "compute" in set(tr.names())


def test_kit_reports_a_crash_as_a_failed_clause(libs, tmp_path):
    report = check(str(libs["segv_collect"]), limits=Limits(activity_s=0.05))
    failed = {r.id: r.reason for r in report.results if r.status == "fail"}
    assert "lifecycle" in failed and "killed by SIGSEGV" in failed["lifecycle"]
    assert report.result("load").status == "pass"
    env = dict(os.environ, COLUMNS="250")  # one table row per line
    r = _run("plugin", "check", str(libs["segv_init"]), cwd=tmp_path, env=env)  # the kit itself survives
    assert r.returncode == 1
    load_row = next(line for line in r.stdout.splitlines() if "│ load" in line)
    assert "FAIL" in load_row and "crashed in loading" in load_row and "killed by SIGSEGV" in load_row


def test_in_process_is_an_opt_in(libs):
    import polyprof

    plugin = load_native(libs["ok"], in_process=True)
    with Session(["host", plugin], options={"host": {"sample_interval_s": 0}}) as s:
        with polyprof.section("x"):
            pass
    assert s.trace.metadata["native_plugins"]["procstat"]["process"] == "in-process"
    assert s.trace.plane_by_name("/host:procstat") is not None
    assert s.trace.metadata["plugin_errors"] == []


def test_a_plugins_printf_goes_to_the_log_not_the_programs_output(libs, tmp_path):
    """Issue 34: what vendor code writes to stdout and stderr in its helper process ends
    up in polyprof's log (-v shows it), never in the program's stdout or stderr."""
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    plain = subprocess.run([sys.executable, str(script), "a"], capture_output=True, text=True, timeout=60)
    args = ["run", "--no-summary", "--plugins", "host", "--plugin", str(libs["noisy"]), "-o",
            str(tmp_path / "s.polyprof"), str(script), "a"]
    r = _run(*args, cwd=tmp_path)
    assert r.returncode == plain.returncode == 7 and r.stdout == plain.stdout
    assert "procstat:" not in r.stderr, r.stderr
    assert load(tmp_path / "s.polyprof").metadata["plugins"]["noisy"] == "ok"
    r = _run("-v", *args, cwd=tmp_path)
    assert r.stdout == plain.stdout
    assert "plugin libnoisy.so (stdout): procstat: hello from start()" in r.stderr, r.stderr
    assert "plugin libnoisy.so (stderr): procstat: complaint from stop()" in r.stderr, r.stderr


def test_the_helper_starts_without_numpy_or_the_trace_model():
    """The helper's boot (collect/remote._BOOT) stands in for the packages' __init__, so
    the helper imports neither NumPy nor the trace model: its start is the plugin's
    load, not polyprof's (bench/native_isolation.py)."""
    from polyprof.collect import remote

    boot = remote._BOOT.replace("from polyprof.collect.native_helper import main\nmain(int(sys.argv[1]), int(sys.argv[2]))",
                                "import polyprof.collect.native_helper, polyprof.collect.clock\n"
                                "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('polyprof.trace.')))")
    assert boot != remote._BOOT
    r = subprocess.run([sys.executable, "-c", boot, "0", "0", remote._PKG_PARENT], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['polyprof.trace.metadata_keys']"
