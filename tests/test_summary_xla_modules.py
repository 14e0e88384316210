"""The summary's per-name tables key XLA ops by (module, name), as ``diff`` does
(docs/analysis.md, "XLA ops are rows of their module"): XLA names ops uniquely within
a module only, so ``ynn_fusion`` of ``jit_augment`` and of ``jit_train_step`` are two
rows, ``jit_augment/ynn_fusion`` and ``jit_train_step/ynn_fusion`` (``event_stats``;
``kernel_breakdown`` for XLA's GPU kernels), each with its ``module``. A store's rank
read window by window (ranks/stepwise.py) gives the same rows and quantiles as read
whole: the windows' spilled keys (ranks/window_values.py) name the module too.

Real file: tests/data/traces/jax_cpu_two_jits (two jitted functions whose ops share
names; its README), its steps renamed ``ProfilerStep#N`` for the windowed read, which
cuts a rank at those. The GPU case (two modules launching a kernel of one name) is
built inline, as in tests/test_xspace_gpu.py.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_xspace_golden import Space

import polyprof
from polyprof.analyze.breakdown import kernel_breakdown
from polyprof.analyze.events import event_stats
from polyprof.cli import main
from polyprof.formats import xplane_pb2
from polyprof.ranks import fits, stepwise
from summary_json import summary_json

TWO_JITS = Path(__file__).parent / "data" / "traces" / "jax_cpu_two_jits" / "run_slow.xplane.pb.gz"
STEPS = 12  # of the inline GPU trace




def _records(doc: dict, table: str) -> list[dict]:
    return list(doc["tables"][table]["records"])


def test_event_stats_has_a_row_per_module_of_an_xla_op() -> None:
    """``ynn_fusion`` ran 32 times in ``jit_augment`` (its scan: 4 a call, 8 calls) and 8
    times in ``jit_train_step``: two rows, not one of 40, their counts and times those
    of the events of each module."""
    trace = polyprof.load(TWO_JITS)
    ev = event_stats(trace).to_pandas()
    ops = ev[ev["category"] == "xla_op"]
    assert "ynn_fusion" not in set(ops["name"])
    assert (ops["module"] != "").all()
    assert all(n.startswith(m + "/") for n, m in zip(ops["name"], ops["module"]))
    got = ops.set_index("name")
    assert got.loc["jit_augment/ynn_fusion", "count"] == 32 and got.loc["jit_train_step/ynn_fusion", "count"] == 8
    assert got.loc["jit_augment/ynn_fusion", "module"] == "jit_augment"
    # the two rows hold every ynn_fusion event once; the module's from its hlo_module stat
    rows = np.flatnonzero((trace.events["name"] == trace.string_id("ynn_fusion")) & (trace.events["dur_ns"] > 0))
    col = trace.stats.loaded()["hlo_module"]
    has, mods = col.lookup(rows)
    assert has.all()
    dur = trace.events["dur_ns"][rows]
    for m in ("jit_augment", "jit_train_step"):
        mine = np.asarray(mods, object) == m
        assert got.loc[f"{m}/ynn_fusion", "total_ns"] == int(dur[mine].sum())
        assert got.loc[f"{m}/ynn_fusion", "count"] == int(mine.sum())
    # events without a module keep their name
    assert "PjitFunction(augment)" in set(ev["name"]) and set(ev[ev["category"] == "traceme"]["module"]) == {""}


def test_summary_names_the_module_in_json_and_terminal(capsys) -> None:
    """``summary``'s --json event rows (steps 1-7: 7 calls of augment, 4 ynn_fusion each)
    and its terminal table name each op in its module."""
    doc = summary_json(TWO_JITS)
    rows = {r["name"]: r for r in _records(doc, "event_stats")}
    assert rows["jit_augment/ynn_fusion"]["count"] == 28 and rows["jit_augment/ynn_fusion"]["module"] == "jit_augment"
    assert rows["jit_train_step/ynn_fusion"]["count"] == 7
    assert "ynn_fusion" not in rows
    assert main(["summary", str(TWO_JITS)]) == 0
    text = capsys.readouterr().out
    assert "jit_augment/ynn_fusion" in text and "jit_train_step/ynn_fusion" in text


def _gpu_space(steps: int = STEPS) -> bytes:
    """``steps`` steps of 100 µs (``ProfilerStep#N``), each launching a kernel ``fusion``
    of module ``jit_a`` (10 + N µs) and one of ``jit_b`` (2 + 3N mod 7 µs), then a copy
    (no module)."""
    s = Space()
    host = s.plane("/host:CPU", 1)
    host.metadata(1, "cuLaunchKernel")
    host.metadata(2, "cuMemcpyHtoDAsync_v2")
    for k in range(steps):
        host.metadata(10 + k, f"ProfilerStep#{k}")
    py = host.line("python", lid=1)
    th = host.line("Host Threads/11", lid=11)
    gpu = s.plane("/device:GPU:0", 2, device_vendor="Nvidia")
    gpu.metadata(1, "fusion")
    gpu.metadata(2, "MemcpyH2D")
    stream = gpu.line("Stream #7(Kernel,MemcpyH2D)", lid=7)
    us = 1_000_000  # ps
    for k in range(steps):
        t = (k * 100 + 10) * us
        py.event(10 + k, t, 95 * us)
        corr = 3 * k + 1
        th.event(1, t + 5 * us, 2 * us, correlation_id=corr)
        th.event(1, t + 8 * us, 2 * us, correlation_id=corr + 1)
        th.event(2, t + 11 * us, 2 * us, correlation_id=corr + 2)
        stream.event(1, t + 20 * us, (10 + k) * us, correlation_id=corr, hlo_op="fusion", hlo_module="jit_a")
        stream.event(1, t + 45 * us, (2 + 3 * k % 7) * us, correlation_id=corr + 1, hlo_op="fusion",
                     hlo_module="jit_b")
        stream.event(2, t + 60 * us, 4 * us, correlation_id=corr + 2, memcpy_details="kind:HtoD size:64")
    return s.bytes()


def test_kernel_breakdown_has_a_row_per_module_of_a_kernel(tmp_path: Path) -> None:
    """Kernels of one name launched by two modules: a row each (count, total, median of
    their own), the copy (no module) by its name; per device likewise."""
    path = tmp_path / "gpu.xplane.pb"
    path.write_bytes(_gpu_space())
    trace = polyprof.load(path)
    kb = kernel_breakdown(trace).to_pandas().set_index("name")
    assert sorted(kb.index) == ["MemcpyH2D", "jit_a/fusion", "jit_b/fusion"]
    a = [(10 + k) * 1000 for k in range(STEPS)]
    b = [(2 + 3 * k % 7) * 1000 for k in range(STEPS)]
    assert (kb.loc["jit_a/fusion", "count"], kb.loc["jit_a/fusion", "total_ns"]) == (STEPS, sum(a))
    assert (kb.loc["jit_b/fusion", "count"], kb.loc["jit_b/fusion", "total_ns"]) == (STEPS, sum(b))
    assert kb.loc["jit_a/fusion", "median_ns"] == np.median(a) and kb.loc["jit_b/fusion", "median_ns"] == np.median(b)
    assert kb.loc["jit_a/fusion", "module"] == "jit_a" and kb.loc["MemcpyH2D", "module"] == ""
    by_dev = kernel_breakdown(trace, by_device=True).to_pandas()
    assert sorted(zip(by_dev["name"], by_dev["plane"])) == [
        ("MemcpyH2D", "/device:GPU:0"), ("jit_a/fusion", "/device:GPU:0"), ("jit_b/fusion", "/device:GPU:0")]


def _profiler_steps(src: Path, out: Path) -> Path:
    """The JAX trace with its ``train`` steps (StepTraceAnnotation) renamed
    ``ProfilerStep#N``: the steps a store's rank is cut into windows at."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(gzip.decompress(src.read_bytes()))
    host = next(p for p in space.planes if p.name == "/host:CPU")
    train = next(i for i, m in host.event_metadata.items() if m.name == "train")
    k = 0
    for line in host.lines:
        for e in line.events:
            if e.metadata_id == train:
                mid = max(host.event_metadata) + 1
                host.event_metadata[mid].id, host.event_metadata[mid].name = mid, f"ProfilerStep#{k}"
                e.metadata_id = mid
                k += 1
    assert k == 8
    out.write_bytes(space.SerializeToString())
    return out


def _whole_and_windowed(store: Path, most: int) -> tuple[dict, dict]:
    whole = summary_json(store)
    mp = pytest.MonkeyPatch()
    seen: list = []
    try:
        mp.setenv("POLYPROF_MEMORY_BOUND", str(fits.BASE_BYTES >> 20))  # every rank above the bound
        mp.setattr(fits, "window_events", lambda bound: most)
        real = stepwise.summarise
        mp.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
        windowed = summary_json(store)
    finally:
        mp.undo()
    assert seen and len(seen[0].events) >= 3, "the windowed path ran, in three windows or more"
    return whole, windowed


@pytest.mark.parametrize("case", ["jax_cpu", "gpu"])
def test_windowed_store_read_is_the_whole_read(case: str, tmp_path: Path) -> None:
    """A store's rank read window by window: the same ``event_stats`` and
    ``kernel_breakdown`` rows (module/op) as read whole, medians and p99s included (the
    windows' spilled quantile keys name the module; before, they named the op alone and
    the rank kept the windows' weighted medians), and every other table alike."""
    if case == "jax_cpu":
        src = _profiler_steps(TWO_JITS, tmp_path / "steps.xplane.pb")
    else:
        src = tmp_path / "gpu.xplane.pb"
        src.write_bytes(_gpu_space())
    store = polyprof.load_ranks([src]).convert(tmp_path / "s")
    whole, windowed = _whole_and_windowed(store, 100 if case == "jax_cpu" else 12)
    table = "event_stats" if case == "jax_cpu" else "kernel_breakdown"
    names = {r["name"]: r for r in _records(whole, table)}
    if case == "jax_cpu":
        assert names["jit_augment/ynn_fusion"]["count"] == 28 and names["jit_train_step/ynn_fusion"]["count"] == 7
    else:
        # steps 1..11 (the first is a warm-up): each module's own median
        assert names["jit_a/fusion"]["median_ns"] == np.median([(10 + k) * 1000 for k in range(1, STEPS)])
        assert names["jit_b/fusion"]["median_ns"] == np.median([(2 + 3 * k % 7) * 1000 for k in range(1, STEPS)])
    for t in ("event_stats", "kernel_breakdown"):
        assert _records(windowed, t) == _records(whole, t), t
    assert windowed["tables"] == whole["tables"]


# --- XLA CPU's "end: <op>" marks, qualified_names once per trace, a fresh JAX profile ---

def _end_rows(trace: polyprof.Trace) -> dict[str, int]:
    """event_stats' ``end: <op>`` rows (category ``xla_op_end``): name -> count."""
    ev = event_stats(trace).to_pandas()
    ends = ev[ev["category"] == "xla_op_end"]
    assert all(n.startswith(f"{m}/end: ") for n, m in zip(ends["name"], ends["module"]))
    return dict(zip(ends["name"], ends["count"]))


def _without_contexts(src: Path, out: Path) -> Path:
    """The file without XLA's TraceMe producer/consumer stats (``_p``, ``_pt``, ``_c``,
    ``_ct``): each ``end: <op>`` mark is known by its op's name alone."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(gzip.decompress(src.read_bytes()))
    for plane in space.planes:
        drop = {i for i, m in plane.stat_metadata.items() if m.name in ("_p", "_pt", "_c", "_ct")}
        for line in plane.lines:
            for e in line.events:
                keep = [s for s in e.stats if s.metadata_id not in drop]
                del e.stats[:]
                e.stats.extend(keep)
    out.write_bytes(space.SerializeToString())
    return out


def test_op_end_marks_are_rows_of_their_ops_module(tmp_path: Path) -> None:
    """XLA's CPU runtime marks each op's completion with ``end: <op>``; the mark of
    jit_augment's ``ynn_fusion`` (32 runs) and of jit_train_step's (8) are two rows, as
    their ops are; before, one row ``end: ynn_fusion`` of 40. The same where the file has
    no context stats to pair a mark with its op (the op of that name that last began on
    the mark's thread)."""
    want = {"jit_augment/end: ynn_fusion": 32, "jit_train_step/end: ynn_fusion": 8,
            "jit_augment/end: ynn_fusion.1": 8, "jit_train_step/end: ynn_fusion.1": 8}
    trace = polyprof.load(TWO_JITS)
    ends = _end_rows(trace)
    assert {k: ends.get(k) for k in want} == want
    ops = event_stats(trace).to_pandas()
    ops = dict(zip(ops["name"], ops["count"]))
    assert all(ops[n.replace("/end: ", "/")] == c for n, c in ends.items())  # a mark per op run, in its module
    assert _end_rows(polyprof.load(_without_contexts(TWO_JITS, tmp_path / "plain.xplane.pb"))) == ends


def test_qualified_names_are_found_once_per_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary's tables ask ``qualified_names`` for their rows (four times here, five on a GPU trace);
    each event's code is found once per trace (before, every call searched the module
    rows again), and each call answers as before: its rows' (module, name) pairs, by
    module then name id, after the strings."""
    from polyprof.analyze import common
    from polyprof.report import tables

    trace = polyprof.load(TWO_JITS)
    builds: list[bool] = []  # per call of qualified_names: whether it found the codes anew
    real = common._event_names
    monkeypatch.setattr(common, "_event_names", lambda t: builds.append(
        not any(k.startswith("event_names:") for k in t.__dict__.get("_polyprof_memo", {}))) or real(t))
    tables.build(trace, window=None)
    assert len(builds) >= 4 and sum(builds) == 1, builds
    # against the names spelled out event by event
    n = len(trace.strings)
    mrows, mcodes, modules = common.module_rows(trace)
    module_of = dict(zip(mrows.tolist(), mcodes.tolist()))
    for rows in (np.arange(trace.n_events), np.flatnonzero(trace.events["dur_ns"] > 0)[::7][::-1], mrows[:3]):
        codes, labels, mods = common.qualified_names(trace, rows)
        names = trace.events["name"][rows].tolist()
        pairs = sorted({(module_of[r], x) for r, x in zip(rows.tolist(), names) if r in module_of})
        assert labels.tolist() == trace.strings + [f"{modules[m]}/{trace.strings[x]}" for m, x in pairs]
        assert mods.tolist() == [""] * n + [modules[m] for m, _ in pairs]
        want = [n + pairs.index((module_of[r], x)) if r in module_of else x for r, x in zip(rows.tolist(), names)]
        assert codes.dtype == np.int64 and codes.tolist() == want


_TWO_JITS_PROGRAM = r"""
import sys
import jax, jax.numpy as jnp

@jax.jit
def forward(x, w):
    return jnp.tanh(x @ w).sum()

@jax.jit
def update(x, w):
    g = jnp.tanh(x @ w.T)
    return w - 0.01 * (x.T @ g)

x = jnp.ones((64, 64)); w = jnp.ones((64, 64)) * 0.01
forward(x, w); update(x, w)
jax.profiler.start_trace(sys.argv[1])
for i in range(3):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        w = update(x, w)
        forward(x, w).block_until_ready()
jax.profiler.stop_trace()
"""


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_a_fresh_jax_profile_of_two_jits(tmp_path: Path) -> None:
    """A JAX program (CPU backend) jitting two functions whose XLA ops share a name
    (``ynn_fusion``): their ops, their ``end:`` marks and the critical path track's
    slices are each a name of their module."""
    from polyprof.analyze.critical_path_track import with_critical_path

    proc = subprocess.run([sys.executable, "-c", _TWO_JITS_PROGRAM, str(tmp_path / "prof")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = sorted((tmp_path / "prof").rglob("*.xplane.pb"))
    trace = polyprof.load(path)
    ev = event_stats(trace).to_pandas()
    ops = dict(zip(ev[ev["category"] == "xla_op"]["name"], ev[ev["category"] == "xla_op"]["count"]))
    assert {"jit_forward/ynn_fusion", "jit_update/ynn_fusion"} <= set(ops) and "ynn_fusion" not in ops
    ends = _end_rows(trace)
    assert {"jit_forward/end: ynn_fusion", "jit_update/end: ynn_fusion"} <= set(ends)
    assert all(ops[n.replace("/end: ", "/")] == c for n, c in ends.items())
    cp = with_critical_path(trace)
    tracks = [t.id for t in cp.tracks if t.name.startswith("critical path")]
    slices = set(cp.names(np.flatnonzero(np.isin(cp.events["track"], tracks))).tolist())
    assert slices & set(ops) and not slices & {n.split("/", 1)[1] for n in ops}
