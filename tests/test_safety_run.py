"""``polyprof run`` never changes the program it runs (issue 20): signals reach it as
without polyprof, forked children and DataLoader workers neither deadlock nor touch
the trace, outputs that cannot be written are said and saved elsewhere, ``-m`` finds
packages in the current directory, a script that profiles itself composes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import polyprof

SIGNALLED = """
import sys, time, polyprof
with polyprof.section("done before"):
    pass
print("ready", flush=True)
with polyprof.section("waiting"):
    time.sleep(30)
print("not reached")
"""


def _start(cmd: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _signalled(cmd: list[str], cwd: Path, sig: int, wait: float = 0.2) -> tuple[int, str, str]:
    p = _start(cmd, cwd)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(wait)  # inside the sleep
        p.send_signal(sig)
        out, err = p.communicate(timeout=90)
    finally:
        p.kill()
    return p.returncode, out, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGSEGV, signal.SIGUSR1])
def test_signal_matrix_same_as_plain_python(tmp_path, sig):
    """Default plugins (the OpenCL probe loads PoCL/LLVM, which install handlers for
    SIGSEGV, SIGINT, SIGTERM...): the exit status is python's own."""
    script = tmp_path / "s.py"
    script.write_text(SIGNALLED)
    plain, plain_out, _ = _signalled([sys.executable, str(script)], tmp_path, sig)
    out = tmp_path / "s.polyprof"
    code, stdout, err = _signalled([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out),
                                    str(script)], tmp_path, sig, wait=1.5)  # a journal flush (1 s) in between
    assert plain == -sig, plain  # what python does: killed by the signal
    assert code == plain, err
    assert stdout == plain_out
    if sig != signal.SIGSEGV:  # unwound and saved before dying the same way
        names = polyprof.load(out).names().tolist()
        assert names.count("done before") == 1 and names.count("waiting") == 1, err
        assert "trace written to" in err
    else:  # like python: no unwinding; the crash journal keeps what was recorded
        assert polyprof.load(Path(f"{out}.partial")).names().tolist().count("done before") == 1


def test_script_with_its_own_handler_keeps_it(tmp_path):
    script = tmp_path / "h.py"
    script.write_text("""
import signal, sys, time, polyprof
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
print("ready", flush=True)
deadline = time.time() + 20
while not got and time.time() < deadline:
    time.sleep(0.01)
print("handled", got, flush=True)
""")
    code, out, err = _signalled([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host",
                                 "-o", str(tmp_path / "h.polyprof"), str(script)], tmp_path, signal.SIGUSR1)
    assert code == 0, err
    assert f"handled [{int(signal.SIGUSR1)}]" in out


def test_probing_plugins_leaves_signal_dispositions_alone():
    code = """
from polyprof.collect.signals import SavedDispositions
from polyprof.collect.registry import discover
s = SavedDispositions()
found = discover()
print(sorted(found), s.changed())
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "'opencl'" in r.stdout and r.stdout.strip().endswith("[]")
    # and without the restore, the probe does change them (so the test can fail)
    raw = """
from polyprof.collect.signals import SavedDispositions
s = SavedDispositions()
import pyopencl as cl
[p.get_devices() for p in cl.get_platforms()]
print(len(s.changed()))
"""
    r = subprocess.run([sys.executable, "-c", raw], capture_output=True, text=True, timeout=120)
    assert int(r.stdout.strip()) > 0


FORKS = """
import os, sys, threading, polyprof
def busy():
    for i in range(50000):
        with polyprof.section("busy"):
            pass
t = threading.Thread(target=busy); t.start()
for k in range(10):
    pid = os.fork()
    if pid == 0:
        with polyprof.section("child"):
            pass
        sys.exit(5)  # back into polyprof run: must neither write nor delete the trace
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 5
t.join()
print("parent ok")
"""


def test_forking_script_under_run(tmp_path):
    script = tmp_path / "f.py"
    script.write_text(FORKS)
    out = tmp_path / "f.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host",
                        "-o", str(out), str(script)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("parent ok") == 1 and r.stderr.count("trace written") == 1
    names = polyprof.load(out).names().tolist()
    assert names.count("busy") == 50000 and names.count("child") == 0


def test_dataloader_workers_under_run(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "dl.py"
    script.write_text("""
import torch, polyprof
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        with polyprof.section("worker item"):  # in a forked worker: records nothing
            return torch.full((4,), float(i))
total = 0.0
for batch in DataLoader(D(), batch_size=8, num_workers=2):
    with polyprof.section("step"):
        total += float(batch.sum())
print("total", total)
""")
    out = tmp_path / "dl.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host",
                        "-o", str(out), str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"total {4.0 * sum(range(64))}" in r.stdout
    names = polyprof.load(out).names().tolist()
    assert names.count("step") == 8 and names.count("worker item") == 0


def test_output_in_a_missing_directory_is_made(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import polyprof\nwith polyprof.section('w'):\n    print('hi')\n")
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host",
                        "-o", "missing/dir/x.polyprof", str(script)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "trace written to missing/dir/x.polyprof" in r.stderr
    assert polyprof.load(tmp_path / "missing/dir/x.polyprof").names().tolist() == ["w"]


def test_output_dev_full_says_so_and_saves_elsewhere(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import sys, polyprof\nwith polyprof.section('w'):\n    print('hi')\nsys.exit(4)\n")
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host",
                        "-o", "/dev/full", str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 4 and r.stdout == "hi\n"
    assert "/dev/full is not a regular file" in r.stderr
    assert "trace written to /dev/full" not in r.stderr
    line = next(l for l in r.stderr.splitlines() if "trace written to" in l)
    alt = Path(line.split("trace written to ")[1].split(" instead")[0])
    assert polyprof.load(alt).names().tolist() == ["w"]
    alt.unlink()


def test_run_module_finds_packages_in_the_current_directory(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("VALUE = 41\n")
    (pkg / "__main__.py").write_text("from mypkg.helper import VALUE\nprint('value', VALUE + 1)\n")
    plain = subprocess.run([sys.executable, "-m", "mypkg"], capture_output=True, text=True, cwd=tmp_path)
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host", "-m", "mypkg"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert plain.stdout == "value 42\n"
    assert r.returncode == 0 and r.stdout == plain.stdout, r.stderr
    assert (tmp_path / "mypkg.polyprof").is_file()


def test_script_that_profiles_itself_composes_with_run(tmp_path):
    """The README's own pattern under polyprof run: the inner profile() nests."""
    script = tmp_path / "own.py"
    script.write_text("""
import polyprof
with polyprof.profile() as prof:
    with polyprof.section("inner work"):
        pass
print("inner", prof.trace.names().tolist())
""")
    out = tmp_path / "own.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host",
                        "-o", str(out), str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "inner ['inner work']" in r.stdout
    names = polyprof.load(out).names().tolist()
    assert names.count("inner work") == 1 and names.count("polyprof.profile") == 1
