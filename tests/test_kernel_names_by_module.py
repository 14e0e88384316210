"""The tables and findings that name kernels name an XLA kernel or op as
``kernel_breakdown`` and ``event_stats`` do (docs/analysis.md, "XLA ops are rows of
their module"): ``module/op`` with a ``module`` column (``common.qualified_names``), so
a row of one table can be found in another, and ops of one name in two modules are two
rows. Before, ``kernel_efficiency``, the critical path, ``launch_stats``,
``op_efficiency``'s kernels and the copy findings' evidence named the kernel alone
(``fusion_381``, where "Top device activity" shows ``jit_step/fusion_381``), and
``kernel_efficiency`` merged ``fusion`` of ``jit_a`` and of ``jit_b`` into one row.

Real files: tests/data/h200/jax_transformer_h200.xplane.pb.gz (JAX on an H200, one
module ``jit_step``), tests/data/traces/jax_cpu_two_jits (XLA's CPU ops of
``jit_augment`` and ``jit_train_step``, names shared); the two-module GPU trace is
tests/test_summary_xla_modules.py's, with a ``flops`` stat on its kernels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import test_xspace_golden
from test_summary_xla_modules import STEPS, TWO_JITS, _gpu_space, _records, _whole_and_windowed

import polyprof
from polyprof.analyze import kernel_roofline, registry
from polyprof.analyze.copy_findings import _top as top_copies
from polyprof.analyze.copies import per_copy
from polyprof.analyze.findings import _top_copies, findings
from polyprof.trace import keys
from polyprof.trace.categories import Kind
from polyprof.trace.core import Trace

H200 = Path(__file__).parent / "data" / "h200" / "jax_transformer_h200.xplane.pb.gz"
FLOPS = {"jit_a": 1000.0, "jit_b": 5000.0}  # per kernel, of each module's ``fusion``


def _names(tables: registry.Tables, table: str, col: str = "name") -> list[str]:
    return [str(x) for x in tables[table].to_pandas()[col].tolist()]


def test_h200_kernel_names_are_kernel_breakdowns() -> None:
    """kernel_efficiency, the critical path's device rows, launch_stats, op_efficiency's
    kernels and the copy evidence name the kernels of jit_step as kernel_breakdown's
    rows (48 kernels with FLOPs; before, none of their names was one of its rows)."""
    trace = polyprof.load(H200)
    t = registry.Tables(trace)
    kb = t["kernel_breakdown"].to_pandas()
    rows = set(kb["name"])
    ke = t["kernel_efficiency"].to_pandas()
    assert len(ke) == 48 and set(ke["name"]) <= rows and set(ke["module"]) == {"jit_step"}
    assert "jit_step/fusion_381" in set(ke["name"]) and "fusion_381" not in set(ke["name"])
    # each row's time is that of kernel_breakdown's row of its name (all of its launches costed)
    kt = kb.set_index("name")["total_ns"]
    assert all(float(d) == float(kt[n]) for n, d in zip(ke["name"], ke["device_ns"]))
    cp = t["critical_path"].to_pandas()
    dev = cp[cp["kind"].isin(["kernel", "memcpy", "memset"])]
    assert len(dev) == 51_800 and set(dev["name"]) <= rows
    assert set(cp["module"]) == {"", "jit_step"} and (cp["module"] != "").sum() == 51_600  # the memsets' too
    assert set(_names(t, "launch_stats")) <= rows
    oe = t["op_efficiency"].to_pandas()
    kernels = {k for ks in oe["kernels"] if ks for k in ks.split("; ")}
    assert kernels and kernels <= rows
    assert oe.set_index("name").loc["jit_step/fusion.381", "kernels"] == "jit_step/fusion_381"
    # the copies of the copy-bound finding's evidence, and the copy findings'
    copies = _top_copies(trace, "/device:GPU:0")
    assert copies and {c["name"] for c in copies} <= rows
    c = per_copy(trace)
    assert {e["name"] for e in top_copies(trace, c, np.ones(len(c.rows), bool))} <= rows
    # findings that name kernels name kernel_breakdown's rows (launch, occupancy); low_mfu op_efficiency's
    for f in findings(trace, t):
        names = {e.get("name") for e in f.events if isinstance(e, dict)} - {None}
        if f.id == "low_mfu":
            assert names and names <= set(oe["name"])
        elif f.id in ("launch_bound", "low_occupancy", "copy_bound"):
            assert names <= rows, f.id


def test_two_jits_cpu_ops_are_named_in_their_module() -> None:
    """XLA's CPU ops (no kernel_breakdown rows: they run on host threads) on the critical
    path and in op_efficiency are event_stats' ``module/op`` rows: ``ynn_fusion`` of
    jit_augment and of jit_train_step are rows of their own."""
    trace = polyprof.load(TWO_JITS)
    t = registry.Tables(trace)
    es = set(_names(t, "event_stats"))
    cp = t["critical_path"].to_pandas()
    ops = cp[cp["module"] != ""]
    assert len(ops) and set(ops["kind"]) == {"kernel"} and set(ops["name"]) <= es
    assert all(n.startswith(m + "/") for n, m in zip(ops["name"], ops["module"]))
    assert {"jit_augment", "jit_train_step"} <= set(ops["module"])
    oe = t["op_efficiency"].to_pandas().set_index("name")
    assert set(oe.index) <= es and "ynn_fusion" not in oe.index
    assert oe.loc["jit_augment/ynn_fusion", "module"] == "jit_augment"
    # per module its own calls, as event_stats counts them: 32 of augment's ynn_fusion (4 a call), 8 of train_step's
    assert (oe.loc["jit_augment/ynn_fusion", "count"], oe.loc["jit_train_step/ynn_fusion", "count"]) == (32, 8)


@pytest.fixture
def costed_gpu(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """The two-module GPU trace with a ``flops`` stat on each module's ``fusion``."""
    real = test_xspace_golden.Line.event

    def event(self: Any, mid: int, *a: Any, **stats: Any) -> Any:
        if "hlo_module" in stats:
            stats["flops"] = FLOPS[stats["hlo_module"]]
        return real(self, mid, *a, **stats)

    monkeypatch.setattr(test_xspace_golden.Line, "event", event)

    def own_costs(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # a kernel's own figure costs it here without a framework op around its launch
        # (this trace has none; kernel_roofline.kernel_costs reads the stat for those it selects)
        col = trace.stats.get(keys.FLOPS)
        rows = np.sort(np.asarray(col.rows, np.int64))
        _, vals = col.lookup(rows)
        return rows, np.asarray(vals, np.float64), np.full(len(rows), np.nan)

    monkeypatch.setattr(kernel_roofline, "kernel_costs", own_costs)
    return _gpu_space()


def test_kernel_efficiency_has_a_row_per_module(costed_gpu: bytes, tmp_path: Path) -> None:
    """``fusion`` of jit_a and of jit_b: two kernel_efficiency rows, each with its own
    count, FLOPs and time (12 steps); before, one row ``fusion`` of both."""
    path = tmp_path / "gpu.xplane.pb"
    path.write_bytes(costed_gpu)
    t = registry.Tables(polyprof.load(path))
    ke = t["kernel_efficiency"].to_pandas().set_index("name")
    assert sorted(ke.index) == ["jit_a/fusion", "jit_b/fusion"]
    assert set(ke.index) <= set(_names(t, "kernel_breakdown"))
    n = STEPS  # (the whole trace: no window)
    for m, ns in (("jit_a", [(10 + k) * 1000 for k in range(STEPS)]),
                  ("jit_b", [(2 + 3 * k % 7) * 1000 for k in range(STEPS)])):
        row = ke.loc[f"{m}/fusion"]
        assert (row["module"], row["count"], row["flops"], row["device_ns"]) == (m, n, n * FLOPS[m], sum(ns))


def test_windowed_kernel_efficiency_is_the_whole_reads(costed_gpu: bytes, tmp_path: Path) -> None:
    """A store's rank read window by window: kernel_efficiency's module/kernel rows (the
    windows' rows merged by that name) and every other table as read whole."""
    src = tmp_path / "gpu.xplane.pb"
    src.write_bytes(costed_gpu)
    store = polyprof.load_ranks([src]).convert(tmp_path / "s")
    whole, windowed = _whole_and_windowed(store, 12)
    rows = _records(whole, "kernel_efficiency")
    assert sorted(r["name"] for r in rows) == ["jit_a/fusion", "jit_b/fusion"]
    assert _records(windowed, "kernel_efficiency") == rows
    assert windowed["tables"] == whole["tables"]


def test_a_module_named_like_a_collective_leaves_its_ops_in_low_mfu():
    """low_mfu leaves collectives out by name; with op names module/op, a module whose name
    says all-reduce or all-gather made every op of it a collective (a review found it)."""
    from polyprof.analyze.efficiency_findings import _bare
    from polyprof.analyze.frames import frame
    from polyprof.trace.categories import collective_names

    oe = frame({"name": np.array(["jit_allreduce_step/dot.1", "pmap_train_all_gather/fusion.3", "all-reduce.1"],
                                 object),
                "module": np.array(["jit_allreduce_step", "pmap_train_all_gather", ""], object)})
    assert _bare(oe) == ["dot.1", "fusion.3", "all-reduce.1"]
    assert collective_names(_bare(oe)).tolist() == [False, False, True]


def test_the_job_critical_path_names_xla_ops_by_module(capsys):
    """``critical-path`` of a job named its path's XLA ops alone (``ynn_fusion``) where
    each rank's tables say ``jit_step/ynn_fusion`` (a review found it)."""
    import json

    from polyprof.cli import main

    assert main(["critical-path", str(Path(__file__).parent / "data" / "traces" / "jax_cpu_job"), "--json"]) == 0
    names = {r["name"] for r in json.loads(capsys.readouterr().out)["critical_path"]}
    xla = {n for n in names if "fusion" in n or n.split("/")[-1].startswith(("dot", "all-reduce"))}
    assert xla and all(n.startswith("jit_step/") for n in xla), sorted(xla)


def test_cuda_graphs_first_kernel_is_a_kernel_breakdown_row() -> None:
    """``cuda_graphs``' ``first_kernel`` of JAX's command buffers (XLA's CUDA graphs on
    the H200) is ``kernel_breakdown``'s row of that kernel, ``module/kernel``; before, the
    kernel alone (``triton_softmax_36``, where the kernel table says ``jit_step/triton_softmax_36``)."""
    from polyprof.analyze.breakdown import kernel_breakdown
    from polyprof.analyze.cuda_graphs import cuda_graphs

    h200 = H200.parent
    want = {"jax_train_step_h200.xplane.pb": "jit_step/gemm_fusion_dot_2",
            "jax_transformer_h200.xplane.pb.gz": "jit_step/triton_softmax_36"}
    for name, first in want.items():
        trace = polyprof.load(h200 / name)
        got = cuda_graphs(trace).to_pandas()["first_kernel"].tolist()
        assert got == [first], name
        assert first in set(kernel_breakdown(trace).to_pandas()["name"]), name


def _track_names(trace: Trace) -> list[str]:
    """The names of the slices on the "critical path" tracks of ``trace``."""
    tracks = [t.id for t in trace.tracks if t.name.startswith("critical path") and t.kind == "derived"]
    assert tracks
    return [str(n) for n in trace.names(np.flatnonzero(np.isin(trace.events["track"], tracks))).tolist()]


def test_the_critical_path_track_names_xla_ops_by_module() -> None:
    """The timeline's "critical path" track (HTML, Perfetto, Chrome JSON) names an XLA op
    as the tables do, ``module/op``: jit_augment's and jit_train_step's ``ynn_fusion`` are
    two names there, each one of event_stats' rows; before, both were ``ynn_fusion``."""
    from polyprof.analyze.critical_path_track import with_critical_path
    from polyprof.analyze.events import event_stats

    trace = polyprof.load(TWO_JITS)
    names = _track_names(with_critical_path(trace))
    es = event_stats(trace).to_pandas()
    ops = set(es[es["category"] == "xla_op"]["name"])
    bare = {n.split("/", 1)[1] for n in ops}
    assert not set(names) & bare  # no op by its name alone
    on_path = set(names) & ops
    assert {"jit_augment/ynn_fusion", "jit_train_step/ynn_fusion"} <= on_path, sorted(on_path)


def test_the_job_critical_path_track_names_xla_ops_by_module() -> None:
    """The job's track (``export DIR --critical-path``, the job timeline) likewise:
    ``jit_step/ynn_fusion``, as each rank's tables and ``critical-path DIR`` name it."""
    from polyprof.ranks.critical_path import align
    from polyprof.ranks.critical_path_track import with_job_critical_path

    job = Path(__file__).parent / "data" / "traces" / "jax_cpu_job"
    traces = {r: polyprof.load(job / f"rank{r}.xplane.pb.gz") for r in (0, 1)}
    names = set(_track_names(with_job_critical_path(traces[0], traces, align(traces))))
    t = traces[0]
    xla = t.rows_of_kind(Kind.KERNEL)
    bare = set(t.names(xla).tolist())
    assert bare and not names & bare, sorted(names & bare)
    mine = {n for n in names if n.startswith("jit_step/")}
    assert mine and {n.split("/", 1)[1] for n in mine} <= bare
