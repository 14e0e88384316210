"""CUDA graph launches: every kernel of a graph shares the ``cudaGraphLaunch`` call's
correlation id. No shared trace has graph launches, so one is made from the real V100
trace's structure (a fake only in that sense; the kernels, ops and times are the
trace's): the launches each of 25 framework ops made become one ``cudaGraphLaunch`` call
spanning them, whose correlation id every one of their kernels carries, as Kineto
writes a graph replay. The analyses must attribute every kernel to that call and its
op, and count one launch per graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import polyprof
import polyprof.analyze as A
from polyprof.derive import cache
from polyprof.trace import keys
from polyprof.trace.stats import StatColumn
from polyprof.trace.subset import take

GRAPH = "cudaGraphLaunch"


def graphify(t: polyprof.Trace, n_ops: int = 25) -> tuple[polyprof.Trace, list[dict]]:
    """``t`` with the launches of ``n_ops`` framework ops (each with 3+ launches matched by
    id) made into one graph launch each; and what was made (rows in the new trace)."""
    corr = cache.correlation(t)
    ev = t.events
    by_op: dict[int, set[int]] = {}
    for lrow, op, m in zip(corr.launch.tolist(), corr.op.tolist(), corr.method.tolist()):
        if lrow >= 0 and op >= 0 and m == 1:
            by_op.setdefault(op, set()).add(lrow)
    chosen = [(op, sorted(ls, key=lambda r: ev["start_ns"][r])) for op, ls in by_op.items() if len(ls) >= 3]
    chosen = sorted(chosen, key=lambda x: ev["start_ns"][x[0]])[:n_ops]
    assert len(chosen) == n_ops
    strings = list(t.strings) + [GRAPH]
    name = ev["name"].copy()
    dur = ev["dur_ns"].copy()
    keep = np.ones(t.n_events, bool)
    cid_col = t.stats[keys.CORRELATION_ID]
    cid = cid_col.dense(t.n_events, -1).astype(np.int64)
    made = []
    for op, launches in chosen:
        g, rest = launches[0], launches[1:]
        name[g] = len(strings) - 1
        dur[g] = ev["start_ns"][launches[-1]] + ev["dur_ns"][launches[-1]] - ev["start_ns"][g]
        keep[rest] = False
        kernels = corr.device_rows[np.isin(corr.launch, launches)]
        cid[kernels] = cid[g]
        made.append({"op": op, "launch": g, "kernels": kernels, "removed": len(rest),
                     "dur": int(dur[g]), "device_ns": int(ev["dur_ns"][kernels].sum())})
    out = polyprof.Trace(strings=strings, planes=t.planes, tracks=t.tracks,
                         events={**ev, "name": name, "dur_ns": dur}, stats=t.stats.copy(), flows=t.flows,
                         counters=t.counters, metadata=t.metadata, sources=t.sources)
    out.stats[keys.CORRELATION_ID] = StatColumn(cid_col.rows, cid[cid_col.rows])
    new_row = np.cumsum(keep) - 1
    for m in made:
        m["op"], m["launch"], m["kernels"] = int(new_row[m["op"]]), int(new_row[m["launch"]]), new_row[m["kernels"]]
    return take(out, keep), made


@pytest.fixture(scope="module")
def graphs(kineto_files):
    t = polyprof.load(next(p for p in kineto_files if p.name.startswith("v100")))
    g, made = graphify(t)
    return t, g, made


def test_every_kernel_of_a_graph_goes_to_its_launch_and_op(graphs):
    t, g, made = graphs
    corr = cache.correlation(g)
    pos = {int(r): i for i, r in enumerate(corr.device_rows.tolist())}
    for m in made:
        idx = [pos[int(k)] for k in m["kernels"]]
        assert (corr.launch[idx] == m["launch"]).all()
        assert (corr.op[idx] == m["op"]).all()
    before, after = cache.correlation(t).counts, corr.counts
    assert after["matched_by_correlation_id"] + after["matched_by_flow"] == \
        before["matched_by_correlation_id"] + before["matched_by_flow"]
    assert after["unmatched_device_activities"] == before["unmatched_device_activities"]
    removed = sum(m["removed"] for m in made)
    assert after["launch_calls"] == before["launch_calls"] - removed
    assert after["launch_calls_without_device_activity"] == before["launch_calls_without_device_activity"]


def test_launch_tables_count_one_launch_per_graph(graphs):
    t, g, made = graphs
    ls = A.launch_summary(g).to_pandas()
    row = ls[ls["launch_name"] == GRAPH].iloc[0]
    assert row["launches"] == row["graph_launches"] == len(made)
    assert row["count"] == sum(len(m["kernels"]) for m in made)
    assert row["cpu_mean_ns"] == pytest.approx(np.mean([m["dur"] for m in made]))
    other = ls[ls["launch_name"] != GRAPH]
    assert (other["graph_launches"] == 0).all()
    # every launch call counts once: calls in the summary = distinct matched launches
    corr = cache.correlation(g)
    assert int(ls["launches"].sum()) == len(np.unique(corr.launch[corr.launch >= 0]))
    st = A.launch_stats(g).to_pandas()
    assert st.loc[st["graph_launch"], "launch_name"].eq(GRAPH).all()
    assert int(st["graph_launch"].sum()) == row["count"]
    # steps: the same activities, fewer launch calls (distinct calls)
    a, b = A.step_stats(t).to_pandas(), A.step_stats(g).to_pandas()
    assert a["activities"].tolist() == b["activities"].tolist()
    assert a["launch_count"].sum() - b["launch_count"].sum() == sum(m["removed"] for m in made)


def test_op_device_time_is_unchanged_by_graph_launches(graphs):
    t, g, made = graphs
    a, b = A.op_stats(t).to_pandas().set_index("name"), A.op_stats(g).to_pandas().set_index("name")
    assert a["self_device_ns"].sum() == b["self_device_ns"].sum()
    names = {g.strings[g.events["name"][m["op"]]] for m in made}
    for n in names:
        assert a.loc[n, "self_device_ns"] == b.loc[n, "self_device_ns"], n
