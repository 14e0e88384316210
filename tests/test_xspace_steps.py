"""XSpace conventions XProf reads and polyprof must read alike, on real files:

* the device ``Steps`` line TensorFlow saves on each GPU plane (XProf's step markers:
  one step per ``group_id``) gives the steps XProf's overview_page counts, with its
  step times (TensorFlow's own GPU demo file, ``tests/data/peers/tensorflow_profiler``);
* XLA's CPU runtime marks the completion of each HLO op with a TraceMe named
  ``end: <op>``: not a framework op (a JAX CPU profile, recorded here and made afresh
  with real JAX where it is installed).

XProf runs in a subprocess, as in ``tests/test_xprof.py``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import polyprof
from polyprof.analyze.ops import op_stats
from polyprof.derive.steps import find_steps
from polyprof.trace.categories import Kind

DATA = Path(__file__).parent / "data"
TF_GPU = DATA / "peers" / "tensorflow_profiler" / "gpu_multi_worker_34.83.195.179_6003.xplane.pb.gz"
JAX_CPU = DATA / "jax_cpu" / "jax_cpu_steps.xplane.pb"

_HAS_XPROF = importlib.util.find_spec("xprof") is not None

_OVERVIEW = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "overview_page", {"use_saved_result": False})
doc = json.loads(data)
steps = []
for t in doc:
    ids = [c.get("id") for c in t.get("cols", [])] if isinstance(t, dict) else []
    if "stepnum" in ids and "stepTimeMs" in ids:
        for row in t["rows"]:
            v = [c.get("v") for c in row["c"]]
            steps.append([v[ids.index("stepnum")], v[ids.index("stepTimeMs")]])
json.dump(steps, open(sys.argv[2], "w"))
"""


def _xprof_steps(xplane: Path, tmp: Path) -> list[tuple[int, float]]:
    """XProf's overview_page steps of a plain ``.xplane.pb``: (step number, step time in ms)."""
    out = tmp / "steps.json"
    proc = subprocess.run([sys.executable, "-c", _OVERVIEW, str(xplane), str(out)], capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [(int(n), float(ms)) for n, ms in json.loads(out.read_text())]


# --- the device Steps line of a TensorFlow GPU XSpace --------------------------------

def test_tf_gpu_steps_are_the_device_steps_line() -> None:
    """Step 0 is marked on /device:GPU:4 (19.87 ms) and /device:GPU:6 (21.31 ms), 0.65 s
    apart, by ``group_id`` 0 (the events carry no ``step_num``): XProf counts one step,
    as long as the longest marker."""
    t = polyprof.load(TF_GPU)
    steps = find_steps(t)
    assert steps.source == "xprof" and not steps.renumbered
    assert steps.number.tolist() == [0]
    assert steps.start.tolist() == [2568855601]
    assert (steps.end - steps.start).tolist() == [21310352]
    row = int(steps.rows[0])
    assert t.tracks[int(t.events["track"][row])].name == "Steps"
    assert t.planes[int(t.track_plane[t.events["track"][row]])].name == "/device:GPU:6"


#: XProf's line ids 0xdeadbeef.. (C++ ints, so negative in the file): the lines it derives
_DERIVED_LINES = range(0xDEADBEEF - 2**32, 0xDEADBEEF - 2**32 + 32)


def _regrouped(dst: Path, moved: Callable[[str, str], bool], names: dict[str, str] | None = None) -> Path:
    """The TensorFlow GPU file with the device activity ``moved(plane, event name)``
    selects put in group 99 (no marker names it), and event names replaced by ``names``."""
    from polyprof.formats import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(gzip.decompress(TF_GPU.read_bytes()))
    for plane in space.planes:
        for m in plane.event_metadata.values():
            m.name = (names or {}).get(m.name, m.name)
        gid = [k for k, m in plane.stat_metadata.items() if m.name == "group_id"]
        if not plane.name.startswith("/device:GPU") or not gid:
            continue
        for line in plane.lines:
            if line.id in _DERIVED_LINES:
                continue
            for e in line.events:
                if moved(plane.name, plane.event_metadata[e.metadata_id].name):
                    for st in e.stats:
                        if st.metadata_id == gid[0]:
                            st.int64_value = 99
    dst.mkdir()
    out = dst / "tf_gpu.xplane.pb"
    out.write_bytes(space.SerializeToString())
    return out


#: variants of the file, and the steps XProf 2.24's overview_page gives each (step, ms)
_VARIANTS: dict[str, tuple[Callable[[str, str], bool], dict[str, str] | None, list[tuple[int, float]]]] = {
    # the kernels in another group: step 0 keeps its copies, which XProf takes for compute
    # by their names ("MemcpyH2D": its copy names are MemcpyHToD, MemcpyDToH, MemcpyDToD)
    "copies_only": (lambda p, n: not n.startswith("Memcpy"), None, [(0, 21.310352)]),
    # ... named as XProf's copies: no compute, no step
    "xprof_named_copies_only": (lambda p, n: not n.startswith("Memcpy"),
                                {"MemcpyH2D": "MemcpyHToD", "MemcpyD2H": "MemcpyDToH"}, []),
    # GPU:6's activity in another group: its marker no longer counts, GPU:4's is the step
    "gpu6_elsewhere": (lambda p, n: p == "/device:GPU:6", None, [(0, 19.865491)]),
    # no device activity in group 0: no step
    "no_activity": (lambda p, n: True, None, []),
}


@pytest.mark.parametrize("variant", sorted(_VARIANTS))
def test_tf_gpu_steps_follow_xprofs_rules(variant: str, tmp_path: Path) -> None:
    """XProf's rules on variants of the file: a plane's marker counts only with device
    activity of its group on that plane (kernels, copies: events with a correlation id),
    and a group is a step only with compute among that activity."""
    moved, names, want = _VARIANTS[variant]
    path = _regrouped(tmp_path / variant, moved, names)
    steps = find_steps(polyprof.load(path))
    got = [(int(n), (e - s) / 1e6) for n, s, e in zip(steps.number, steps.start, steps.end)]
    assert got == want
    assert steps.source == ("xprof" if want else "")
    if _HAS_XPROF:
        assert _xprof_steps(path, tmp_path) == want


@pytest.mark.skipif(not _HAS_XPROF, reason="xprof is not installed (pip install xprof)")
def test_tf_gpu_steps_match_xprof_overview_page(tmp_path: Path) -> None:
    plain = tmp_path / "tf_gpu.xplane.pb"
    plain.write_bytes(gzip.decompress(TF_GPU.read_bytes()))
    want = _xprof_steps(plain, tmp_path)
    assert want == [(0, 21.310352)]  # what XProf 2.24 answers
    steps = find_steps(polyprof.load(plain))
    got = [(int(n), (e - s) / 1e6) for n, s, e in zip(steps.number, steps.start, steps.end)]
    assert [n for n, _ in got] == [n for n, _ in want]
    assert np.allclose([ms for _, ms in got], [ms for _, ms in want], rtol=0, atol=1e-6)


def test_the_summary_header_names_the_device_steps_line() -> None:
    from polyprof.report import tables

    rep = tables.build(polyprof.load(TF_GPU))
    assert rep.overview["steps"] == 1
    assert rep.overview["step_source"] == "the device Steps line"
    assert rep.overview["analysed_span_ns"] == 21310352


# --- XLA CPU's "end: <op>" TraceMe ----------------------------------------------------

def _check_op_ends(t: polyprof.Trace) -> None:
    """Every ``end: <op>`` follows an HLO op of the trace and is not a framework op; every
    other TraceMe still is one."""
    ev = t.events
    names = np.asarray(t.strings, object)[ev["name"]]
    cats = np.asarray(t.strings, object)[ev["category"]]
    is_end = np.array([str(n).startswith("end: ") for n in names])
    assert is_end.any()
    ops = set(names[cats == "xla_op"].tolist())
    assert {str(n)[5:] for n in names[is_end]} <= ops
    assert (cats[is_end] == "xla_op_end").all()
    kinds = t.kinds
    assert not (kinds[is_end] == Kind.CPU_OP).any()
    # nothing else changed kind: every other TraceMe is a framework op, the HLO ops device activity
    assert (kinds[cats == "traceme"] == Kind.CPU_OP).all()
    assert (kinds[cats == "xla_op"] == Kind.KERNEL).all()
    assert (cats == "xla_op").sum() == is_end.sum()  # one completion per op execution
    table = op_stats(t)
    listed = set(table["name"].tolist())
    assert not {n for n in listed if n.startswith("end: ")}
    assert listed == set(names[cats == "traceme"].tolist())  # no other op lost


def test_jax_cpu_op_ends_are_not_framework_ops() -> None:
    t = polyprof.load(JAX_CPU)
    _check_op_ends(t)
    assert len(find_steps(t)) == 3


def test_jax_cpu_op_ends_in_the_summary() -> None:
    """``polyprof summary --json``: no ``end:`` row among the framework ops or on the
    critical path; they stay among the trace's events (as in XProf's trace viewer), each
    a row of its op's module (``jit_step/end: ynn_fusion``, as the op is ``jit_step/ynn_fusion``)."""
    from polyprof.report import tables

    doc = json.loads(tables.to_json(tables.build(polyprof.load(JAX_CPU), window=None)))
    for name in ("op_stats", "critical_path"):
        recs = doc["tables"].get(name, {}).get("records", [])
        assert recs and not [r for r in recs if "end: " in str(r.get("name", ""))], name
    ev = doc["tables"]["event_stats"]["records"]
    ends = [r for r in ev if "end: " in r["name"]]
    assert {r["category"] for r in ends} == {"xla_op_end"}
    assert all(r["module"] == "jit_step" and r["name"].startswith("jit_step/end: ") for r in ends)


_JAX_PROGRAM = r"""
import sys
import jax, jax.numpy as jnp

@jax.jit
def step(x, w):
    y = jnp.tanh(x @ w)
    return y.sum(), (y * 2).mean()

x = jnp.ones((64, 64)); w = jnp.ones((64, 64)) * 0.01
step(x, w)
jax.profiler.start_trace(sys.argv[1])
for i in range(3):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        a, b = step(x, w)
        a.block_until_ready()
jax.profiler.stop_trace()
"""


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_cpu_op_ends_on_a_fresh_profile(tmp_path: Path) -> None:
    """The same on an XSpace JAX records now (CPU backend)."""
    proc = subprocess.run([sys.executable, "-c", _JAX_PROGRAM, str(tmp_path / "prof")], capture_output=True,
                          text=True, timeout=300, env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted((tmp_path / "prof").rglob("*.xplane.pb"))
    assert len(files) == 1
    t = polyprof.load(files[0])
    _check_op_ends(t)
    assert find_steps(t).number.tolist() == [0, 1, 2]


def test_tensorflows_derived_lines_are_derived():
    """TensorFlow 2 saves XProf's derived lines under their old names (``TensorFlow
    Ops``, ``TensorFlow Name Scope``): read as derived, as ``Framework Ops`` is, not as
    streams of uncategorised events."""
    t = polyprof.load(TF_GPU)
    kinds = {(t.planes[tr.plane].name, tr.name): tr.kind for tr in t.tracks}
    tf_lines = {k: v for k, v in kinds.items() if k[1] in ("TensorFlow Ops", "TensorFlow Name Scope")}
    assert len(tf_lines) == 4 and set(tf_lines.values()) == {"derived"}, tf_lines
