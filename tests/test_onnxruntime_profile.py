"""onnxruntime's own profiles (``formats/kineto/onnxruntime.py``): each ``model_run`` a
step, each ``<node>_kernel_time`` a framework op. Before, a summary of one had no steps
and no operators (the events kept onnxruntime's categories ``Session`` and ``Node``).
The file is a real profile (tests/data/onnxruntime/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import polyprof
from polyprof.derive import cache
from polyprof.trace.categories import Kind

DATA = Path(__file__).parent / "data" / "onnxruntime"
PROFILE = DATA / "onnxruntime_profile_matmul_relu.json"


def test_runs_are_steps_and_nodes_are_ops() -> None:
    raw = json.loads(PROFILE.read_text())
    runs = sorted((e["ts"], e["dur"]) for e in raw if e["name"] == "model_run")
    t = polyprof.load(PROFILE)
    steps = cache.steps(t)
    assert steps.source == "polyprof" and steps.number.tolist() == [0, 1, 2, 3, 4]
    base = int(t.events["start_ns"].min()) - min(e["ts"] for e in raw) * 1000
    assert [((int(s) - base) // 1000, (int(e) - int(s)) // 1000) for s, e in zip(steps.start, steps.end)] == runs
    ops = t.kinds == Kind.CPU_OP
    names = t.names()
    assert sorted(set(names[ops].tolist())) == ["MatMul_0_kernel_time", "Relu_1_kernel_time"]
    per_name = {n: sum(e["dur"] for e in raw if e["name"] == n) * 1000 for n in ("MatMul_0_kernel_time",)}
    assert int(t.events["dur_ns"][ops & (names == "MatMul_0_kernel_time")].sum()) == per_name["MatMul_0_kernel_time"]
    # the session's own phases keep their category; nothing else changed
    assert set(np.asarray(t.categories())[~ops & (t.kinds != Kind.STEP)].tolist()) == {"Session"}


def test_summary_shows_the_runs_and_the_operators() -> None:
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(PROFILE), "--skip-first", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "5 steps (step events)" in out.stdout
    assert "Top framework ops" in out.stdout and "MatMul_0_kernel_time" in out.stdout


def test_other_chrome_json_with_model_run_names_is_left_alone(tmp_path: Path) -> None:
    """A ``model_run`` of another category is not onnxruntime's."""
    ev = [{"ph": "X", "cat": "app", "name": "model_run", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
          {"ph": "X", "cat": "Node", "name": "a_kernel_time", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(ev))
    t = polyprof.load(p)
    assert sorted(t.categories()) == ["Node", "app"] and cache.steps(t).source == ""


def test_a_store_of_a_profile_keeps_its_steps_and_ops(tmp_path: Path) -> None:
    """``polyprof convert`` reads the profile whole (its runs and nodes are told over the
    whole trace): before, a store of it had no steps and no operators."""
    store = tmp_path / "ort.store"
    out = subprocess.run([sys.executable, "-m", "polyprof", "convert", str(PROFILE), "-o", str(store)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(store), "--json", "--skip-first", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ops = {r["name"] for r in doc["tables"]["op_stats"]["records"]}
    assert ops == {"MatMul_0_kernel_time", "Relu_1_kernel_time"}
    assert len(doc["tables"]["step_stats"]["records"]) == 5


CONCURRENT = DATA / "onnxruntime_profile_concurrent.json"


def test_concurrent_runs_are_not_steps_and_every_node_counts() -> None:
    """Runs that overlap in time (one session's ``run`` from 3 threads at once) are
    requests, not steps: before, each was a step numbered in time order, so steps
    overlapped (one inside another), and the warm-up skip left out the first run while
    the window, from the next run's start, still held most of its nodes."""
    raw = json.loads(CONCURRENT.read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"], e["tid"]) for e in raw if e["name"] == "model_run")
    assert len({tid for *_, tid in runs}) == 3 and any(b[0] < a[1] for a, b in zip(runs, runs[1:]))  # they overlap
    t = polyprof.load(CONCURRENT)
    assert len(cache.steps(t)) == 0 and not (t.kinds == Kind.STEP).any()
    assert any("model_run events start before another has ended" in w and "on 3 thread(s)" in w
               for w in t.metadata["warnings"])
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(CONCURRENT)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert not doc["tables"]["step_stats"]["records"]
    ops = {r["name"]: r["count"] for r in doc["tables"]["op_stats"]["records"]}
    assert ops == {n: sum(e["name"] == n for e in raw) for n in ("MatMul_0_kernel_time", "Relu_1_kernel_time")}
    events = {r["name"]: r["count"] for r in doc["tables"]["event_stats"]["records"]}
    assert events["model_run"] == len(runs)  # each request still listed, with its time
