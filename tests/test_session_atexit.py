"""A session started and never stopped is stopped and saved at the interpreter's normal
exit (collect/exits.py ``_at_exit``), with one line on stderr that says so and where the
trace went, and ``session.ended_by`` "atexit" with a warning in the trace. Before,
nothing stopped it: only the crash journal was left, its last half second lost (a
10 ms section: 0 events), read back with a warning asking whether the run was killed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"

NEVER_STOPPED = """\
import time
import polyprof
p = polyprof.profile(plugins=[{plugins}], output={output!r})
p.start()
with polyprof.section("x"):
    time.sleep(0.01)
{more}
print("exiting without stop", flush=True)
"""


def _run(tmp_path: Path, plugins: str = '"host"', output: str | None = "ss.polyprof",
         more: str = "") -> subprocess.CompletedProcess[str]:
    (tmp_path / "prog.py").write_text(NEVER_STOPPED.format(plugins=plugins, output=output, more=more))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_")}, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "exiting without stop" in r.stdout, (r.returncode, r.stdout, r.stderr[-3000:])
    return r


def test_a_session_never_stopped_is_saved_at_exit(tmp_path: Path) -> None:
    r = _run(tmp_path)
    assert not (tmp_path / "ss.polyprof.partial").exists()  # the journal removed, as at a stop
    t = polyprof.load(tmp_path / "ss.polyprof")
    df = t.to_pandas()
    assert df["name"].tolist() == ["x"] and df["dur_ns"].iloc[0] >= 10_000_000
    assert t.metadata["session"]["ended_by"] == "atexit"
    assert any("never stopped" in w["message"] for w in t.metadata["warnings"] if isinstance(w, dict))
    line = [ln for ln in r.stderr.splitlines() if "never stopped" in ln]
    assert len(line) == 1 and "stopped at the interpreter's exit: trace written to ss.polyprof (1 events)" in line[0]


def test_nested_sessions_never_stopped_are_each_saved(tmp_path: Path) -> None:
    more = ("q = polyprof.profile(output='inner.polyprof')\nq.start()\n"
            "with polyprof.section('y'):\n    time.sleep(0.01)\n")
    r = _run(tmp_path, more=more)
    outer, inner = polyprof.load(tmp_path / "ss.polyprof"), polyprof.load(tmp_path / "inner.polyprof")
    # (the inner session is a section of the outer's trace: collect/nested.py)
    assert sorted(outer.to_pandas()["name"]) == ["polyprof.profile", "x", "y"]
    assert inner.to_pandas()["name"].tolist() == ["y"]
    assert inner.metadata["session"]["ended_by"] == outer.metadata["session"]["ended_by"] == "atexit"
    said = [ln for ln in r.stderr.splitlines() if "never stopped" in ln]
    assert len(said) == 2 and "inner.polyprof" in said[0] and "ss.polyprof" in said[1]  # innermost first


def test_a_session_without_output_says_its_trace_is_lost(tmp_path: Path) -> None:
    r = _run(tmp_path, output=None)
    assert "never stopped" in r.stderr and "the trace of its session is lost" in r.stderr
    assert not list(tmp_path.glob("*.polyprof*"))


def test_a_stopped_session_says_nothing_at_exit(tmp_path: Path) -> None:
    r = _run(tmp_path, more="p.stop()\n")
    assert "never stopped" not in r.stderr
    assert "ended_by" not in polyprof.load(tmp_path / "ss.polyprof").metadata["session"]


def test_a_torch_session_never_stopped_keeps_the_profilers_ops(tmp_path: Path) -> None:
    """The hook runs before those torch registered when its profiler started."""
    pytest.importorskip("torch")
    more = "import torch\nwith polyprof.section('mm'):\n    torch.randn(64, 64) @ torch.randn(64, 64)\n"
    _run(tmp_path, plugins='"host", "torch"', more=more)
    t = polyprof.load(tmp_path / "ss.polyprof")
    names = set(t.to_pandas()["name"])
    assert {"x", "mm", "aten::mm"} <= names, names
    assert t.metadata["plugins"] == {"host": "ok", "torch": "ok"}
