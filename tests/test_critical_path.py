"""The critical path of one rank against HTA's: its own test traces (tests/data/peers/
hta_critical_path, MIT, from HolisticTraceAnalysis' tests/data/critical_path) and the values
its tests assert (tests/test_critical_path_analysis.py), its end-to-end expected output, and
the counts HTA 0.6 computes on the other traces (HTA's path, run on each: nodes, events,
edges, length)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import depgraph
from polyprof.analyze.critical_path import critical_path, event_times, path_owner
from polyprof.analyze.frames import column
from polyprof.analyze.longest_path import longest_path
from polyprof.analyze.registry import ANALYSES

DATA = Path(__file__).parent / "data" / "peers" / "hta_critical_path"
ALEXNET_FWD = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"


def _load(case: str) -> polyprof.Trace:
    return polyprof.load(next((DATA / case).glob("*.json.gz")))


def _window(t: polyprof.Trace, annotation: str, instance: int) -> tuple[int, int]:
    """HTA's window: the instance-th event whose name holds ``annotation`` ("" = all)."""
    s = np.asarray(t.events["start_ns"], np.int64)
    e = s + np.asarray(t.events["dur_ns"], np.int64)
    if not annotation:
        return int(s.min()), int(e.max())
    names = t.names()
    rows = np.flatnonzero(np.fromiter((annotation in str(n) for n in names), bool, len(names)))
    rows = rows[np.argsort(s[rows], kind="stable")]
    return int(s[rows[instance]]), int(e[rows[instance]])


def _graph(case: str, annotation: str, instance: int, stream_order: bool = False):
    """HTA's graph (``stream_order=False``, as HTA builds it) or polyprof's (with each
    stream's order) of the window, and its longest path."""
    t = _load(case)
    g = depgraph.build(t, *_window(t, annotation, instance), stream_order=stream_order)
    return t, g, longest_path(g)


def _in_graph(g) -> int:
    return len(np.unique(np.concatenate([g.src, g.dst])))


@pytest.fixture(scope="module")
def simple_add():
    return _graph("simple_add", ALEXNET_FWD, 1)


def test_simple_add_path_as_hta_asserts(simple_add):
    _, g, p = simple_add
    assert len(p.nodes) == 315  # HTA: len(cp_graph.critical_path_nodes)
    assert len(np.unique(p.nodes >> 1)) == 159  # marked_critical_events
    assert len(p.edges) == 314  # marked_critical_edges
    assert (_in_graph(g), len(g.src)) == (414, 440)  # HTA 0.6's graph
    assert p.length == 241_724_000  # HTA 0.6: 241724 µs
    assert int(g.weight[p.edges].sum()) == p.length


def test_simple_add_edges_as_hta_asserts(simple_add):
    t, g, _ = simple_add
    names = t.names()[g.rows]

    def out(node: int) -> list[tuple[str, int, int, str, str]]:
        return [(names[g.dst[i] >> 1], int(g.dst[i] & 1), int(g.weight[i]), depgraph.EDGE_TYPES[g.etype[i]],
                 names[g.owner[i]] if g.owner[i] >= 0 else "") for i in np.flatnonzero(g.src == node)]

    relu = int(np.flatnonzero(names == "aten::relu_")[0])
    clamp = int(np.flatnonzero(names == "aten::clamp_min_")[0])
    launch = int(g.dst[np.flatnonzero(g.src == 2 * clamp)[0]] >> 1)
    # relu_ > clamp_min_ > cudaLaunchKernel: e1..e5 of HTA's test, µs -> ns, owners as HTA's
    assert out(2 * relu) == [("aten::clamp_min_", 0, 15_000, "operator", "aten::relu_")]
    assert out(2 * clamp) == [("cudaLaunchKernel", 0, 14_000, "operator", "aten::clamp_min_")]
    assert out(2 * launch)[0][:4] == ("cudaLaunchKernel", 1, 17_000, "operator")
    assert out(2 * launch + 1) == [("aten::clamp_min_", 1, 15_000, "operator", "aten::clamp_min_")]
    assert out(2 * clamp + 1) == [("aten::relu_", 1, 32_000, "operator", "aten::relu_")]

    # launch delay 27 µs into an FFT kernel, then 7 µs kernel-kernel delay to the next,
    # which keeps a zero-weight launch edge
    into = {int(g.dst[i]): i for i in np.flatnonzero(g.etype == depgraph.LAUNCH)}
    fft = [k for k in np.flatnonzero(g.device) if "fft" in names[k] and 2 * k in into
           and g.weight[into[2 * k]] == 27_000]
    assert fft
    kk = np.flatnonzero((g.etype == depgraph.KERNEL_KERNEL) & (g.src == 2 * fft[0] + 1))
    assert len(kk) == 1 and g.weight[kk[0]] == 7_000
    nxt = int(g.dst[kk[0]])
    assert names[nxt >> 1].startswith("ampere")
    zero = np.flatnonzero((g.etype == depgraph.LAUNCH) & (g.dst == nxt))
    assert len(zero) == 1 and g.weight[zero[0]] == 0
    # the device sync waits for the last kernels: zero-weight sync edges into its end
    sync = int(np.flatnonzero(names == "cudaDeviceSynchronize")[-1])
    into_sync = np.flatnonzero((g.dst == 2 * sync + 1) & (g.etype == depgraph.SYNC))
    assert len(into_sync) >= 1 and not g.weight[into_sync].any()
    assert any(names[s >> 1].startswith("void epilogue") for s in g.src[into_sync])
    # span and kernel-kernel edges have an owner, no other edge does
    spans = np.isin(g.etype, [depgraph.OPERATOR, depgraph.KERNEL_KERNEL])
    assert (g.owner[spans] >= 0).all() and (g.owner[~spans] == -1).all()


@pytest.mark.parametrize("case, annotation, instance, expected", [
    # (path nodes, path events, path edges, length ns, graph nodes, graph edges), HTA 0.6's
    ("alexnet", ALEXNET_FWD, 1, (149, 77, 148, 35_834_000, 418, 456)),
    ("cuda_event_sync", "ProfilerStep", 0, (40, 21, 39, 2_411_000, 54, 57)),
    ("cuda_event_sync_multi_stream", "", 0, (59, 31, 58, 1_178_000, 78, 85)),
    ("simple_add", "", 0, (1210, 625, 1209, 41_435_045_000, 1428, 1493)),
])
def test_path_equals_htas(case, annotation, instance, expected):
    _, g, p = _graph(case, annotation, instance)
    got = (len(p.nodes), len(np.unique(p.nodes >> 1)), len(p.edges), p.length, _in_graph(g), len(g.src))
    assert got == expected
    sync = g.etype == depgraph.SYNC
    assert sync.any() and not g.weight[sync].any()  # HTA: sync edges exist, all weigh 0
    # polyprof's graph adds each stream's order where HTA's has no edge (zero weight, none
    # against time): on HTA's own traces the path is the same, node for node
    t, full, q = _graph(case, annotation, instance, stream_order=True)
    order = full.etype == depgraph.STREAM_ORDER
    assert len(full.src) == len(g.src) + int(order.sum())
    assert not full.weight[order].any() and (full.time[full.dst[order]] >= full.time[full.src[order]]).all()
    assert q.length == p.length and q.nodes.tolist() == p.nodes.tolist()


def test_end_to_end_critical_events_as_htas_output():
    """HTA's end-to-end case: the whole simple_add trace; its expected overlaid trace marks
    the critical events (`critical` in args). HTA's test allows 1% difference in count."""
    with gzip.open(DATA / "end_to_end" / "simple_add" / "output" / "overlaid_critical_path_trace.json.gz") as f:
        events = json.load(f)["traceEvents"]
    expected = {(e["name"], round(e["ts"] * 1000)) for e in events
                if e.get("ph") == "X" and e.get("args", {}).get("critical")}
    t, g, p = _graph("simple_add", "", 0)
    rows = g.rows[np.unique(p.nodes >> 1)]
    names, start = t.names(), t.events["start_ns"]
    mine = {(names[r], int(start[r])) for r in rows}
    assert len(expected) == 624
    assert abs(len(mine) - len(expected)) / len(expected) <= 0.01
    assert len(mine & expected) >= 0.99 * len(expected)


def test_view_rows_times_and_slack():
    t = _load("cuda_event_sync_multi_stream")
    cp = critical_path(t)
    assert {"rank", "step", "name", "kind", "start_ns", "dur_ns", "on_path_ns", "slack_ns"} <= set(cp.columns)
    on, slack, path = column(cp, "on_path_ns"), column(cp, "slack_ns"), column(cp, "path_ns")
    assert (path == 1_178_000).all()  # whole trace (no steps): HTA's path length
    assert ((on > 0) <= (slack == 0)).all()  # time on the path -> no slack
    assert (slack >= 0).all() and (slack <= path).all()
    assert (slack > 0).any()
    kinds = set(column(cp, "kind").tolist())
    assert {"cpu_op", "runtime", "kernel", "sync"} <= kinds
    # the graph's own numbers: slack is the path length less the longest path through it
    g = depgraph.build(t, *_window(t, "", 0))
    p = longest_path(g)
    got_on, got_slack = event_times(g, p)
    own = (g.owner[p.edges] >= 0) & (g.etype[p.edges] != depgraph.KERNEL_KERNEL)  # not the stream's gaps
    assert int(got_on.sum()) == int(g.weight[p.edges][own].sum())
    off = np.flatnonzero(got_slack > 0)
    for i in off.tolist():
        own = g.owner == i
        best = p.through[own].max() if own.any() else (p.fwd + p.bwd)[2 * i:2 * i + 2].max()
        assert got_slack[i] == p.length - best


def test_registered_and_per_step():
    assert any(a.name == "critical_path" and a.per_event for a in ANALYSES)
    t = polyprof.load(Path(__file__).parent / "data" / "traces" / "kineto" / "cuda_event_sync_multistream.json.gz")
    cp = critical_path(t)
    steps = np.unique(column(cp, "step"))
    assert len(steps) >= 1
    for s in steps.tolist():
        mine = column(cp, "step") == s
        assert (column(cp, "slack_ns")[mine] == 0).any()  # each step has a path


def test_terminal_table_sums_the_path():
    import io

    from rich.console import Console

    from polyprof.analyze.critical_path import on_path_totals
    from polyprof.report.terminal import print_summary

    t = _load("cuda_event_sync_multi_stream")
    cp = critical_path(t)
    tot = on_path_totals(cp)
    assert int(column(tot, "on_path_ns").sum()) == int(column(cp, "on_path_ns").sum())
    assert (np.diff(column(tot, "on_path_ns")) <= 0).all()
    top = column(tot, "name")[0]
    mine = column(cp, "name") == top
    assert column(tot, "on_path_ns")[0] == column(cp, "on_path_ns")[mine].sum()
    buf = io.StringIO()
    print_summary(t, console=Console(file=buf, width=160))
    assert "Critical path" in buf.getvalue() and top[:20] in buf.getvalue()


def test_critical_path_track_in_perfetto_and_chrome(tmp_path):
    """`polyprof export --critical-path`: a "critical path" track whose slices are the path's
    edges with time, read back from the Perfetto protobuf and the Chrome JSON written."""
    import subprocess
    import sys

    src = next((DATA / "cuda_event_sync_multi_stream").glob("*.json.gz"))
    t, g, p = _graph("cuda_event_sync_multi_stream", "", 0, stream_order=True)  # (the graph export takes)
    timed = p.edges[g.weight[p.edges] > 0]
    outs = {}
    for fmt, name in (("perfetto", "cp.pftrace"), ("chrome", "cp.json")):
        outs[fmt] = tmp_path / name
        r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(src), "-f", fmt, "-o", str(outs[fmt]),
                            "--critical-path"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    back = polyprof.load(outs["perfetto"])
    track = [tr.id for tr in back.tracks if tr.name == "critical path"]
    assert len(track) == 1
    mine = np.flatnonzero(back.events["track"] == track[0])
    assert len(mine) == len(timed)
    assert int(back.events["dur_ns"][mine].sum()) == p.length
    assert sorted(back.events["start_ns"][mine].tolist()) == sorted(g.time[g.src[timed]].tolist())
    doc = json.loads(outs["chrome"].read_text())
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    meta = [e for e in evs if e.get("ph") == "M" and e.get("args", {}).get("name") == "critical path"]
    assert len(meta) == 1
    slices = [e for e in evs if e.get("ph") == "X" and (e["pid"], e["tid"]) == (meta[0]["pid"], meta[0]["tid"])]
    assert len(slices) == len(timed)
    owner = path_owner(g, timed)  # a stream's gap is no event's: "kernel gap"
    owned = owner >= 0
    assert sorted(e["name"] for e in slices if e["name"] not in ("launch delay", "kernel gap", "wait")) == \
        sorted(t.names()[g.rows[owner[owned]]].tolist())


def test_left_out_above_its_event_limit(monkeypatch, caplog):
    """A summary or report of a huge trace leaves the critical path out with one warning
    (its graph is built step by step); the API lifts the limit with max_events=None."""
    t = _load("cuda_event_sync_multi_stream")
    full = critical_path(t)
    assert len(full) > 0
    monkeypatch.setenv("POLYPROF_CRITICAL_PATH_MAX_EVENTS", "10")
    with caplog.at_level("WARNING", logger="polyprof"):
        assert len(critical_path(t)) == 0
    assert any("critical path left out" in r.getMessage() for r in caplog.records)
    assert critical_path(t, max_events=None).equals(full)


def test_path_totals_sort_names_as_numpys_text_without_the_text_array():
    """``on_path_totals`` orders (name, kind) as ``np.unique`` of the names as fixed-width
    text did (ties in time go by name), without making that array: 4 bytes a character
    of the longest name, every row, which was a V100 summary's peak (65 MB)."""
    from polyprof.analyze.critical_path import _sorted_codes
    from polyprof.analyze.table import Table

    rng = np.random.default_rng(3)
    words = ["b", "a", "ab", "B", "é", "a" * 300, "z\u2192", ""]
    for vals in ([words[i] for i in rng.integers(0, len(words), 200)], ["x", None, "y", "x"], ["a\x00", "a", "b"]):
        arr = np.asarray(vals, object)
        u, i = _sorted_codes(arr)
        ru, ri = np.unique(np.asarray(arr, str), return_inverse=True)
        assert u.dtype == object and u.tolist() == ru.tolist() and i.tolist() == ri.tolist(), vals
    from polyprof.analyze.critical_path import on_path_totals

    n = 60
    cp = Table({"step": np.repeat([0, 1], n // 2), "path_ns": np.repeat([1000, 900], n // 2),
                "on_path_ns": rng.integers(0, 3, n) * 10,
                "name": np.asarray([words[i] for i in rng.integers(0, 5, n)], object),
                "kind": np.asarray([["kernel", "cpu_op"][i] for i in rng.integers(0, 2, n)], object)})
    t = on_path_totals(cp)
    keys = list(zip(column(t, "name").tolist(), column(t, "kind").tolist()))
    sums = column(t, "on_path_ns").tolist()
    assert sorted(zip([-s for s in sums], keys)) == list(zip([-s for s in sums], keys))  # ties by name, then kind


def test_terminal_says_the_path_against_the_step():
    """Under the "Critical path" table, one line: the steps' path length against their
    span (medians over the steps analysed), e.g. the A100 NCCL trace's."""
    import io

    from rich.console import Console

    from polyprof.analyze.units import fmt_ns
    from polyprof.report.terminal import print_summary

    t = polyprof.load(Path(__file__).parent / "data" / "traces" / "kineto" / "a100_nccl_rank0.json.gz")
    buf = io.StringIO()
    print_summary(t, console=Console(file=buf, width=160))
    text = buf.getvalue()
    from polyprof.report.tables import build

    cp = build(t).tables["critical_path"]
    steps, first = np.unique(np.asarray(column(cp, "step")), return_index=True)
    path = np.median(np.asarray(column(cp, "path_ns"))[first])
    span = np.median(np.asarray(column(cp, "span_ns"))[first])
    line = f"critical path {fmt_ns(float(path))} of the step's {fmt_ns(float(span))} (start to end of its work; medians over {len(steps)} steps)"
    assert line in text
    assert text.index("Critical path") < text.index(line)


def test_its_event_limit_counts_the_analysed_window_not_the_trace(caplog):
    """A JAX profile with the Python tracer on: 320,000 import and compile events before
    its steps, 5,735 in them; the limit counted the whole trace (a window's view shares
    its rows) and left the path out. Here: the ops before the first step are past the
    limit, those in the steps within it."""
    from polyprof.trace import TraceBuilder

    b = TraceBuilder(metadata={"source": {"format": "test"}})
    main = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
    for i in range(200):  # before the steps: imports
        b.event(main, "import", i * 100, 50, "python_function")
    for s in range(3):
        t0 = 100_000 + s * 10_000
        b.event(main, f"ProfilerStep#{s}", t0, 9_000, "user_annotation")
        for k in range(4):
            b.event(main, "aten::mm", t0 + 100 + k * 2_000, 1_500, "cpu_op")
    t = b.build()
    with caplog.at_level("WARNING", logger="polyprof"):
        got = critical_path(t, max_events=50)
    assert len(got) > 0 and not any("left out" in r.getMessage() for r in caplog.records)
    assert len(critical_path(t, max_events=10)) == 0
