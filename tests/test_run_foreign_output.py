"""A file at the output that is no polyprof trace is never replaced (collect/output.py
``foreign``). Before, ``polyprof run -o notes.txt w.py`` replaced the user's notes with
the trace, without a word and with exit code 0: ``run`` now refuses such an output before
the program starts, and a session in a program (``polyprof.profile(output=...)``) puts
its trace beside the file, saying so. A trace there, or an empty file, is replaced as
before (a run again with the same output)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polyprof

PROGRAM = "open('ran', 'w').close()\n"


def _run(tmp_path: Path, out: str) -> subprocess.CompletedProcess:
    (tmp_path / "w.py").write_text(PROGRAM)
    cmd = [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--no-summary", "-o", out, "w.py"]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_run_refuses_an_output_that_is_no_trace_before_the_program_runs(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("precious user data\n")
    p = _run(tmp_path, "notes.txt")
    assert p.returncode != 0
    assert "notes.txt is there and is not a polyprof trace: refusing to replace it" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert notes.read_text() == "precious user data\n"
    assert not (tmp_path / "ran").exists()  # the program was not run


def test_run_refuses_a_zip_that_is_no_trace(tmp_path: Path) -> None:
    """NumPy's ``.npz`` is a zip archive too: the first check (the zip's magic) took it
    for a trace and replaced the user's arrays (a reviewer)."""
    import numpy as np

    np.savez(tmp_path / "data.npz", a=np.arange(5))
    before = (tmp_path / "data.npz").read_bytes()
    p = _run(tmp_path, "data.npz")
    assert p.returncode != 0 and "data.npz is there and is not a polyprof trace" in p.stderr, p.stderr
    assert (tmp_path / "data.npz").read_bytes() == before


def test_run_replaces_its_own_trace_and_an_empty_file(tmp_path: Path) -> None:
    for out in ("t.polyprof", "empty.polyprof"):
        (tmp_path / out).write_bytes(b"")
        for _ in range(2):  # the second run replaces the first's trace
            p = _run(tmp_path, out)
            assert p.returncode == 0, p.stderr
            assert "not replaced" not in p.stderr
        assert polyprof.load(tmp_path / out).n_events >= 0
    assert not list(tmp_path.glob("*.1.polyprof"))


def test_a_session_in_a_program_puts_its_trace_beside_a_file_that_is_no_trace(tmp_path: Path, caplog) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("precious user data\n")
    with polyprof.profile(output=notes, plugins=["host"]) as s:
        with polyprof.section("work"):
            pass
    assert notes.read_text() == "precious user data\n"
    assert s.written is not None and s.written.path == tmp_path / "notes.1.txt"
    assert "notes.txt is not a polyprof trace: not replaced; this run's trace is" in caplog.text
    assert "work" in polyprof.load(tmp_path / "notes.1.txt").strings
