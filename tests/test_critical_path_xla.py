"""The critical path on XLA's CPU runtime (``analyze/xla_links.py``), on real JAX CPU
recordings made here, with JAX's own Chrome traces of the same profiles as the truth.

One process (tests/data/jax_cpu/jax_train.*): the thread that runs the program records
``ThunkExecutor::Execute (wait for completion)`` while XLA's worker threads run the rest
of its ops. Before, XLA's ops (host events of kind KERNEL) were no graph events and the
wait was the step's work: 16.0 of the 20.4 ms path of step 1, the ops on no path.

Two processes on gloo (tests/data/traces/jax_cpu_job): XLA's ``all-reduce.2`` ops are
the job's collectives (``analyze/inputs.xla_host_rows``) but were no graph events, so
nothing joined the ranks: rank 1's 100 ms sleep before step 3's all-reduce was on no
path ("rank 0 holds 100%", its wait for completion), and the what-if removing it
predicted -0.134 ms."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.frames import column
from polyprof.ranks.critical_path import align, job_critical_path, job_graph
from polyprof.ranks.what_if import what_if_op

DATA = Path(__file__).parent / "data"
TRAIN = DATA / "jax_cpu" / "jax_train.xplane.pb.gz"
TRAIN_OWN = DATA / "jax_cpu" / "jax_train.trace.json.gz"
JOB = DATA / "traces" / "jax_cpu_job"
WAIT = "ThunkExecutor::Execute (wait for completion)"


def _own(path: Path) -> tuple[list[dict], dict[tuple[int, int], str]]:
    """JAX's own Chrome trace: its complete events and thread names."""
    d = json.loads(gzip.decompress(path.read_bytes()))
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in d["traceEvents"]
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return [e for e in d["traceEvents"] if e.get("ph") == "X"], threads


def _expected_paths() -> list[float]:
    """Per step (µs), from JAX's own trace: the client thread's ``ThunkExecutor::Execute``
    before its wait (its ops and the gaps between them), then the longest of the worker
    threads' ``ThunkExecutor::Execute`` regions begun during the wait, summed per thread
    (the time between a thread's regions is idle: it counts nothing, as between HTA's
    top-level ops)."""
    ev, threads = _own(TRAIN_OWN)
    out = []
    for s in sorted((e for e in ev if e["name"] == "train"), key=lambda e: e["ts"]):
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        (w,) = [e for e in ev if e["name"] == WAIT and t0 <= e["ts"] < t1]
        me = (w["pid"], w["tid"])
        own = sum(e["dur"] for e in ev if (e["pid"], e["tid"]) == me and e["name"] == "ThunkExecutor::Execute"
                  and t0 <= e["ts"] < w["ts"])
        workers: dict[tuple[int, int], float] = {}
        for e in ev:
            k = (e["pid"], e["tid"])
            if (k != me and threads[k].startswith("tf_XLAEigen") and e["name"] == "ThunkExecutor::Execute"
                    and w["ts"] <= e["ts"] < w["ts"] + w["dur"]):
                workers[k] = workers.get(k, 0.0) + min(e["ts"] + e["dur"], t1) - e["ts"]
        out.append(own + max(workers.values()))
    return out


#: the data dependencies of ``jit_step``'s ops, as its HLO (in the XSpace) has them: each
#: op's operands that run as ops, through parameters and constants (which do not)
STEP_READS = {
    "ynn_fusion.6": set(), "add_tanh_fusion": {"ynn_fusion.6"}, "ynn_fusion.5": {"add_tanh_fusion"},
    "wrapped_tanh": {"ynn_fusion.5"}, "ynn_fusion.4": {"wrapped_tanh"}, "wrapped_subtract": {"ynn_fusion.4"},
    "broadcast_multiply_fusion": {"wrapped_subtract"}, "ynn_fusion.3": {"broadcast_multiply_fusion"},
    "multiply_add_fusion.1": {"wrapped_tanh", "ynn_fusion.3"}, "ynn_fusion.2": {"multiply_add_fusion.1"},
    "multiply_add_fusion": {"add_tanh_fusion", "ynn_fusion.2"}, "ynn_fusion.1": {"multiply_add_fusion"},
    "multiply_subtract_fusion.3": {"ynn_fusion.1"}, "dot": {"multiply_add_fusion"},
    "multiply_subtract_fusion.2": {"dot"}, "dot.1": {"add_tanh_fusion", "multiply_add_fusion.1"},
    "multiply_subtract_fusion.1": {"dot.1"}, "dot.2": {"wrapped_tanh", "broadcast_multiply_fusion"},
    "multiply_subtract_fusion": {"dot.2"}, "ynn_fusion": {"wrapped_subtract"}, "wrapped_multiply": {"ynn_fusion"},
}


def _longest_chains() -> list[float]:
    """Per step (µs), from JAX's own trace: the longest chain of its ops each reading the
    one before (:data:`STEP_READS`: the last run of each op read, ending by the reader's
    start), in op time: a path the step's ops cannot beat."""
    ev, _ = _own(TRAIN_OWN)
    ops = sorted((e for e in ev if e["name"] in STEP_READS), key=lambda e: e["ts"])
    out = []
    for s in sorted((e for e in ev if e["name"] == "train"), key=lambda e: e["ts"]):
        mine = [e for e in ops if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        best: list[float] = []
        for e in mine:
            last: dict[str, int] = {}  # op read -> its last run before e
            for j, f in enumerate(mine[:len(best)]):
                ends = f["ts"] + f["dur"]
                if f["name"] in STEP_READS[e["name"]] and ends <= e["ts"] + 1:
                    k = last.get(f["name"])
                    if k is None or ends > mine[k]["ts"] + mine[k]["dur"]:
                        last[f["name"]] = j
            best.append(e["dur"] + max((best[j] for j in last.values()), default=0.0))
        out.append(max(best))
    return out


def test_xla_wait_for_completion_is_carried_by_the_worker_ops():
    """Each step's path runs through XLA's ops, not the client thread's wait: it is at
    least the path through the client thread and the busiest worker thread that JAX's
    own trace gives (:func:`_expected_paths`, the graph before the ops' data
    dependencies), the wait holds none of it, the ops at least 90%, and each op on the
    path holds its own time less its children's (step 1: ``ynn_fusion.2`` 6379.1 µs on a
    worker thread, ``ynn_fusion.5`` 5511.3 µs on the client thread; ``ynn_fusion.6``
    3397.0 less its 56.6 µs pool wait)."""
    cp = critical_path(polyprof.load(TRAIN))
    step, path = np.asarray(column(cp, "step")), np.asarray(column(cp, "path_ns"), np.int64)
    name, kind = column(cp, "name"), column(cp, "kind")
    on, dur = np.asarray(column(cp, "on_path_ns"), np.int64), np.asarray(column(cp, "dur_ns"), np.int64)
    expected, chains = _expected_paths(), _longest_chains()
    assert sorted(set(step.tolist())) == [0, 1, 2, 3]
    for k, (want, chain) in enumerate(zip(expected, chains)):
        m = step == k
        length = int(path[m][0])
        assert length / 1e3 >= want - 2.0, (k, length, want)
        assert length / 1e3 >= chain - 2.0, (k, length, chain)  # before the data dependencies: 20.18 < 21.96 ms
        assert on[m & (name == WAIT)].tolist() == [0]
        assert on[m & (kind == "kernel")].sum() >= 0.9 * length
        assert (on[m] <= dur[m]).all()
    m = (step == 1) & (on > 0)
    # (an XLA op is named module/op, its module apart; JAX's JSON names the op alone)
    mod = column(cp, "module")
    assert set(mod[m & (kind == "kernel")].tolist()) == {"jit_step"}
    got = {n[len(d) + 1:] if d else n: int(o) for n, d, o in zip(name[m].tolist(), mod[m].tolist(), on[m].tolist())}
    want = {"ynn_fusion.2": 6_379_100, "ynn_fusion.5": 5_511_300, "ynn_fusion.6": 3_397_000 - 56_600,
            "dot": 2_055_400}  # JAX's JSON: to 0.1 µs
    assert all(abs(got[n] - w) <= 200 for n, w in want.items()), {n: got[n] for n in want}


def test_the_ops_data_dependencies_are_the_hlos():
    """``formats/xspace/xla_deps.py`` reads each op's producers from the HLO in the file:
    through parameters and constants, to the ops that run (:data:`STEP_READS`)."""
    from polyprof.analyze import depgraph
    from polyprof.formats.xspace.xla_deps import op_dependencies

    trace = polyprof.load(TRAIN)
    deps = op_dependencies(trace, depgraph.context(trace).on_host)
    names = trace.names(deps.rows)
    op_name = {int(o): str(n) for o, n in zip(deps.op.tolist(), names.tolist())}
    got = {op_name[o]: {op_name[int(q)] for q in deps.producers[deps.ptr[o]:deps.ptr[o + 1]]}
           for o in op_name}
    assert {n: r for n, r in got.items() if n in STEP_READS} == STEP_READS
    assert len(deps.rows) == 84 and (deps.op >= 0).all()


def test_xla_all_reduce_joins_the_ranks():
    """The job's all-reduces join the ranks' graphs (one per step). In step 3 rank 1 sleeps
    100 ms before its all-reduce (JAX's own trace: 100.127 ms from its step's start to
    its ``PjitFunction(step)``) and rank 0 waits 104.7 ms in its own: rank 1 holds the path
    (its step's lead-in), and removing it (``1:train:0``) predicts about -100 ms (the
    path then the other steps' size). In the other steps the ranks arrive together: the
    path is the ops and the all-reduce after the last arrival, and the thread blocked in
    ``block_until_ready`` holds none of it: a ``step`` row holds at most its rank's
    lead-in (the job graph's edge from the step's start to the rank's first call: in
    step 0 rank 1's, 338 µs, on the path since its dispatch leads into its run,
    ``xla_links.launched_runs``; under 0.1 ms in the others), the ops 90% of the rest."""
    traces = {r: polyprof.load(JOB / f"rank{r}.xplane.pb.gz") for r in (0, 1)}
    clocks = align(traces)
    rows = job_critical_path(traces, None, clocks)
    step, rank, kind = np.asarray(rows["step"]), np.asarray(rows["rank"]), np.asarray(rows["kind"])
    on, path = np.asarray(rows["on_path_ns"], np.int64), np.asarray(rows["path_ns"], np.int64)
    span = np.asarray(rows["span_ns"], np.int64)
    assert sorted(set(step.tolist())) == list(range(6))
    for k in range(6):
        assert job_graph(traces, k, clocks).collectives == 1
        m = step == k
        assert int(path[m][0]) <= int(span[m][0])
        if k == 3:
            assert on[m & (rank == 1)].sum() >= 0.99 * path[m][0]
            lead = on[m & (rank == 1) & (kind == "step")]
            assert len(lead) == 1 and 100_000_000 <= lead[0] <= 100_300_000
        else:
            g = job_graph(traces, k, clocks)
            lead = max(int(g.graph.weight[g.graph.owner == e].sum()) for e in g.leads.tolist())
            held = int(on[m & (kind == "step")].sum())
            assert path[m][0] < 12_000_000
            assert held <= lead and (held < 100_000 or k == 0), (k, held, lead)
            assert on[m & (kind == "kernel")].sum() >= 0.9 * (path[m][0] - held)
    change, n = what_if_op(job_graph(traces, 3, clocks), 1, "train", 0.0)
    assert n == 1 and -100_300_000 <= change <= -90_000_000
    normal = max(int(path[step == k][0]) for k in range(6) if k != 3)
    assert int(path[step == 3][0]) + change <= normal


def test_a_wait_waits_for_its_own_devices_ops():
    """A process with several CPU devices runs one program per device at once, each with
    its own wait: a wait (thread 0, device 0, 0-100 ns) is joined to the ops of other
    threads during it on its device or naming none, not to another device's."""
    from polyprof.analyze.xla_links import wait_edges

    thread = np.array([0, 1, 2, 3, 1])
    node_time = np.array([0, 100, 10, 50, 20, 60, 30, 40, 90, 120])  # call i: nodes 2i, 2i+1
    is_op = np.array([False, True, True, True, True])
    is_wait = np.array([True, False, False, False, False])
    device = np.array([0, 0, 1, -1, 0])
    src, dst = wait_edges(thread, node_time, is_op, is_wait, device)
    edges = sorted(zip(src.tolist(), dst.tolist()))
    # into the starts of calls 1, 3, 4 (4 starts in the wait, ends after it: no edge out)
    assert edges == sorted([(0, 2), (0, 6), (0, 8), (3, 1), (7, 1)])


def test_an_op_reads_the_run_of_its_producer_before_it() -> None:
    """Two trips of a loop body on one thread (P, C reading P, P, C): each C depends on
    the P before it, never on a later one (that would run against time, a cycle in the
    graph), and not on another device's run of P (one run id spans the devices)."""
    from polyprof.analyze.xla_links import data_edges
    from polyprof.formats.xspace.xla_deps import OpDependencies

    deps = OpDependencies(np.arange(4), np.array([0, 1, 0, 1]), np.array([0, 0, 1]), np.array([0]))
    times = np.array([0, 100, 150, 300, 350, 600, 650, 900])  # P 0-100, C 150-300, P 350-600, C 650-900
    src, dst = data_edges(deps, np.arange(4), np.ones(4, bool), times, np.full(4, 7), np.zeros(4, np.int64))
    assert list(zip(times[src].tolist(), times[dst].tolist())) == [(100, 150), (600, 650)]
    # the second trip's P on another device: the second C reads the first P
    src, dst = data_edges(deps, np.arange(4), np.ones(4, bool), times, np.full(4, 7), np.array([0, 0, 1, 0]))
    assert list(zip(times[src].tolist(), times[dst].tolist())) == [(100, 150), (100, 650)]
