"""The job's critical path across ranks (ranks/critical_path.py): 4 ranks made from a real
trace (tests/rankmaker.py, clocks equal), joined through their matched all-reduces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import depgraph
from polyprof.analyze.critical_path import event_times, step_windows
from polyprof.analyze.frames import column
from polyprof.analyze.longest_path import longest_path
from polyprof.ranks.critical_path import job_graph, path_table
from polyprof.ranks.what_if import what_if, with_factors
from rankmaker import make_ranks, slow_kernel

SRC = Path(__file__).parent / "data" / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
STEP, SLOW = 1, 3


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    paths = make_ranks(SRC, tmp_path_factory.mktemp("base"), [0, 0, 0, 0])
    return paths, {r: polyprof.load(p) for r, p in enumerate(paths)}


def test_identical_ranks_job_path_equals_one_ranks(jobs):
    _, traces = jobs
    jg = job_graph(traces, STEP)
    assert jg.collectives >= 5  # the step's all-reduces, matched across the 4 ranks
    from polyprof.analyze.critical_path import critical_path

    one = critical_path(traces[0])
    steps = np.unique(column(one, "step"))
    single = int(column(one, "path_ns")[column(one, "step") == steps[STEP]][0])
    # identical ranks add nothing to one rank's own joined graph; that graph is HTA's
    # with the stream order it leaves out (gaps of 1.5 ms and more), so no shorter
    alone = longest_path(job_graph({0: traces[0]}, STEP).graph).length
    assert longest_path(jg.graph).length == alone >= single


def test_what_if_on_the_joined_graph(jobs):
    """Identical ranks hold the step together: one rank's op on the path 3 ms longer makes
    the step 3 ms longer (that rank alone now holds it), 3 ms shorter changes nothing (the
    other ranks still hold it); an op off the path changes nothing until its slack is used."""
    _, traces = jobs
    jg = job_graph(traces, STEP)
    p = longest_path(jg.graph)
    on = path_table(jg, p)
    assert set(column(on, "rank").tolist()) == {0}  # ties go to the first rank
    d = 3_000_000
    big = np.flatnonzero(column(on, "dur_ns") == column(on, "on_path_ns"))  # wholly on the path
    i = int(big[np.argmax(column(on, "on_path_ns")[big])])
    t = traces[SLOW]
    row = int(np.flatnonzero((t.events["start_ns"] == column(on, "start_ns")[i])
                             & (t.events["dur_ns"] == column(on, "dur_ns")[i]))[0])
    assert what_if(jg, SLOW, row, d) == d
    assert what_if(jg, SLOW, row, -d) == 0
    assert what_if(jg, 0, row, -int(column(on, "dur_ns")[i])) == 0  # rank 0 too: the others hold it
    # the job path after the change runs through that rank's op
    g = jg.graph
    e = jg.event(SLOW, row)
    w = g.weight.copy()
    w[(g.owner == e) & ((g.etype == 0) | ((g.etype == depgraph.SYNC) & (g.dst == 2 * e + 1)))] += d  # its span
    from polyprof.analyze.depgraph import DepGraph

    p2 = longest_path(DepGraph(g.rows, g.device, g.time, g.src, g.dst, w, g.etype, g.owner))
    assert e in set((p2.nodes >> 1).tolist())
    assert SLOW in set(column(path_table(jg, p2), "rank").tolist())


def _raw_waits(path: Path) -> dict[int, int]:
    """From the JSON itself: per collective kernel (correlation id), the correlation id of
    the last device activity its host thread launched before it onto another stream."""
    doc = json.load(gzip.open(path))
    dev = {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("ph") == "X"
           and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    calls = sorted((e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"
                    and e["args"].get("correlation") in dev), key=lambda e: e["ts"])
    out, last = {}, {}
    for c in calls:
        k = dev[c["args"]["correlation"]]
        if k["name"].startswith("nccl"):
            prev = last.get((c["tid"], "other"))
            if prev is not None:
                out[k["args"]["correlation"]] = prev
        else:
            last[(c["tid"], "other")] = k["args"]["correlation"]
    return out


def test_collective_waits_for_the_compute_stream():
    """The A100 NCCL trace has no cuda_sync records: each all-reduce and broadcast of a step
    waits (a zero-weight sync edge into its start) for the last activity its thread launched
    on the compute stream before it, found here from the JSON alone; none is contradicted
    by the timestamps."""
    t = polyprof.load(SRC)
    numbers, starts, ends = step_windows(t)
    g = depgraph.build(t, int(starts[STEP]), int(ends[STEP]))
    names = t.names()
    corr = np.asarray(t.stat("correlation_id").dense(t.n_events, -1), np.int64)
    coll = [i for i in range(len(g.rows)) if g.device[i] and names[g.rows[i]].startswith("nccl")]
    assert len(coll) == 7
    want = _raw_waits(SRC)
    for i in coll:
        into = np.flatnonzero((g.dst == 2 * i) & (g.etype == depgraph.SYNC))
        assert len(into) == 1
        src = int(g.src[into[0]]) >> 1
        assert int(corr[g.rows[src]]) == want[int(corr[g.rows[i]])]
        assert g.time[2 * src + 1] <= g.time[2 * i]


#: how much longer the step's path gets: the slowed kernel takes its slack and this much more
D = 3_000_000


@pytest.fixture(scope="module")
def slowed(jobs, tmp_path_factory):
    """Rank 3's kernel before the step's last all-reduce (found in the joined graph: the
    compute activity that collective waits for) slower by its slack in the joined graph
    and 3 ms more (whole µs), the delay passed on through its device as the device would
    (tests/rankmaker.slow_kernel): (row, its path, the delay, the kernel's slack). The step
    is host-bound (the backward pass on the autograd thread holds it): the kernel's slack
    is 23 ms, so 3 ms alone would change nothing."""
    _, traces = jobs
    jg = job_graph(traces, STEP)
    g = jg.graph
    t = traces[SLOW]
    names = t.names()
    corr = np.asarray(t.stat("correlation_id").dense(t.n_events, -1), np.int64)
    mine = [i for i in np.flatnonzero((jg.rank == SLOW) & g.device).tolist() if names[g.rows[i]].startswith("nccl")]
    last = max(mine, key=lambda i: int(g.time[2 * i]))
    into = np.flatnonzero((g.dst == 2 * last) & (g.etype == depgraph.SYNC) & (jg.rank[g.src >> 1] == SLOW))
    kernel = [int(s) >> 1 for s in g.src[into] if not names[g.rows[int(s) >> 1]].startswith("nccl")]
    assert len(kernel) == 1
    row = int(g.rows[kernel[0]])
    slack = int(event_times(g, longest_path(g))[1][kernel[0]])
    assert 20_000_000 < slack < 26_000_000
    delay = -(-(slack + D) // 1000) * 1000
    out = tmp_path_factory.mktemp("slow") / "rank-3.json.gz"
    return row, slow_kernel(SRC, out, SLOW, 4, int(corr[row]), delay / 1000), delay, slack


def test_a_slower_kernel_before_an_all_reduce(jobs, slowed):
    """Must-show: the job's critical path on the modified ranks runs through rank 3's
    slowed kernel, and the what-if on the unmodified ranks predicts the step's change
    within 5% of the change measured."""
    _, traces = jobs
    row, path, delay, slack = slowed
    jg = job_graph(traces, STEP)
    g = jg.graph
    t = traces[SLOW]
    names = t.names()
    assert what_if(jg, SLOW, row, slack) == 0  # its slack taken: the path no longer
    predicted = what_if(jg, SLOW, row, delay)
    assert D <= predicted <= D + 1000
    modified = dict(traces)
    modified[SLOW] = polyprof.load(path)
    js = job_graph(modified, STEP)
    ps = longest_path(js.graph)
    measured = ps.length - longest_path(g).length
    assert measured > 0.9 * D
    assert abs(predicted - measured) <= 0.05 * measured
    on = path_table(js, ps)
    hit = ((column(on, "rank") == SLOW) & (column(on, "name") == names[row])
           & (column(on, "dur_ns") == int(t.events["dur_ns"][row]) + delay))  # the slowed kernel
    assert hit.sum() == 1
    assert int(column(on, "on_path_ns")[hit][0]) == int(t.events["dur_ns"][row]) + delay  # wholly on the path


def test_critical_path_command_on_the_job(jobs, slowed, tmp_path):
    """`polyprof critical-path DIR` on the modified job (clocks aligned from the collectives):
    step 1's path names rank 3's slowed kernel, wholly on it, and is as long as the API's
    on the traces; a what-if halving rank 3's all-reduces is the joined graph's own change
    with those events' own time on any path halved (``with_factors``: each joined
    all-reduce's stretch from the last arrival to its end)."""
    import shutil
    import subprocess
    import sys

    paths, traces = jobs
    row, path, delay, _ = slowed
    for r in range(3):
        shutil.copy(paths[r], tmp_path / f"rank-{r}.json.gz")
    shutil.copy(path, tmp_path / "rank-3.json.gz")
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(tmp_path), "--step", str(STEP),
                        "--what-if", "3:ncclKernel_AllReduce:0.5", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    t = traces[SLOW]
    name, dur = t.names()[row], int(t.events["dur_ns"][row]) + delay
    hit = [x for x in out["critical_path"] if x["rank"] == SLOW and x["name"] == name and x["dur_ns"] == dur]
    assert len(hit) == 1 and hit[0]["on_path_ns"] == dur and hit[0]["step"] == STEP
    modified = dict(traces)
    modified[SLOW] = polyprof.load(path)
    js = job_graph(modified, STEP)
    assert {x["path_ns"] for x in out["critical_path"]} == {longest_path(js.graph).length}
    assert [c["aligned"] for c in out["clocks"]] == [True] * 4
    (w,) = out["what_if"]
    g, names = js.graph, modified[SLOW].names()
    ev = np.array([i for i in np.flatnonzero(js.rank == SLOW).tolist()
                   if names[g.rows[i]].startswith("ncclKernel_AllReduce")], np.int64)
    assert w["events"] == len(ev) == 5
    assert w["change_ns"] == with_factors(js, ev, 0.5) < 0


def test_job_critical_path_track_in_perfetto_and_chrome(jobs, slowed, tmp_path):
    """`polyprof export DIR --critical-path` of the modified job: one "critical path" track
    whose slices are the joined path's weighted edges, step by step (Perfetto protobuf read
    back, Chrome JSON parsed): step 1's slices sum to its job path length, and the slowed
    kernel of rank 3 is one of them, as long as it became."""
    import shutil
    import subprocess
    import sys

    from polyprof.ranks.critical_path import align

    paths, traces = jobs
    row, path, delay, _ = slowed
    job = tmp_path / "job"
    job.mkdir()
    for r in range(3):
        shutil.copy(paths[r], job / f"rank-{r}.json.gz")
    shutil.copy(path, job / "rank-3.json.gz")
    outs = {"perfetto": tmp_path / "cp.pftrace", "chrome": tmp_path / "cp.json"}
    for fmt, out in outs.items():
        r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(job), "-f", fmt, "-o", str(out),
                            "--critical-path"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    modified = dict(traces)
    modified[SLOW] = polyprof.load(path)
    js = job_graph(modified, STEP, align(modified))
    p = longest_path(js.graph)
    weighted = int((js.graph.weight[p.edges] > 0).sum())
    doc = json.loads(outs["chrome"].read_text())
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    (meta,) = [e for e in evs if e.get("name") == "thread_name" and e["args"]["name"] == "critical path"]
    slices = [e for e in evs if e.get("ph") == "X" and (e["pid"], e["tid"]) == (meta["pid"], meta["tid"])]
    number = int(step_windows(traces[0])[0][STEP])  # the step's number, as the one-rank track's
    mine = [e for e in slices if e["args"]["step"] == number]
    assert len(mine) == weighted
    assert abs(sum(e["dur"] for e in mine) * 1000 - p.length) <= len(mine)  # µs with 3 decimals
    t = traces[SLOW]
    kernel = [e for e in mine if e["name"] == t.names()[row] and e["args"]["rank"] == SLOW
              and round(e["dur"] * 1000) == int(t.events["dur_ns"][row]) + delay]
    assert len(kernel) == 1
    back = polyprof.load(outs["perfetto"])
    (track,) = [tr.id for tr in back.tracks if tr.name == "critical path"]
    on = np.flatnonzero(back.events["track"] == track)
    assert len(on) == len(slices)
    assert int(back.events["dur_ns"][on].sum()) == sum(round(e["dur"] * 1000) for e in slices)
    # --steps: that step's path alone (the job's path was every step's, numbered by position)
    one = tmp_path / "one.json"
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(job), "-f", "chrome", "-o", str(one),
                        "--critical-path", "--steps", str(number)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    evs = json.loads(one.read_text())
    evs = evs["traceEvents"] if isinstance(evs, dict) else evs
    (meta,) = [e for e in evs if e.get("name") == "thread_name" and e["args"]["name"] == "critical path"]
    only = [e for e in evs if e.get("ph") == "X" and (e["pid"], e["tid"]) == (meta["pid"], meta["tid"])]
    assert {e["args"]["step"] for e in only} == {number} and len(only) == len(mine)


def test_transfers_join_by_peer_and_order_not_as_collectives(tmp_path):
    """NCCL SendRecv kernels with their peers (test_transfers' fake of the A100 layout, no GPU
    here): the k-th send 0 -> 1 joins the k-th recv on rank 1 (its end waits for the send's
    start), sends are never matched with each other as a collective would be."""
    from polyprof.ranks.collectives import collective_table
    from polyprof.ranks.critical_path import align
    from test_transfers import _nccl_rank

    traces = {}
    for r in (0, 1):  # each kernel launched by its c10d op on the host, as torch records them
        path = _nccl_rank(tmp_path, r, 5000.0 * r)
        doc = json.loads(path.read_text())
        host = []
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                corr, op = e["args"]["correlation"], e["args"]["Collective name"]
                t0 = e["ts"] - 20
                host += [{"ph": "X", "cat": "cpu_op", "name": f"c10d::{op}", "pid": 100, "tid": 1, "ts": t0,
                          "dur": 10, "args": {"External id": corr}},
                         {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1,
                          "ts": t0 + 2, "dur": 5, "args": {"correlation": corr, "External id": corr}}]
        doc["traceEvents"] += host
        path.write_text(json.dumps(doc))
        traces[r] = polyprof.load(path)
    jg = job_graph(traces, 0, align(traces))
    g = jg.graph
    assert jg.collectives == 0
    names = {r: t.names() for r, t in zip(jg.ranks, jg.traces)}
    kernels = {}
    for r in jg.ranks:  # graph nodes of each rank's kernels, in time order, with the op of each
        t = traces[r]
        ev = np.flatnonzero((jg.rank == r) & g.device)
        ev = ev[np.argsort(g.time[2 * ev], kind="stable")]
        ct = collective_table(t)
        op_of = dict(zip(np.asarray(ct["row"], np.int64).tolist(), ct["op"].tolist()))
        ops = [op_of.get(int(g.rows[e])) for e in ev.tolist()]
        assert all(names[r][g.rows[e]].startswith("ncclDevKernel_SendRecv") for e in ev.tolist())
        kernels[r] = {op: [e for e, o in zip(ev.tolist(), ops) if o == op] for op in ("send", "recv")}
    edges = set(zip(g.src.tolist(), g.dst.tolist()))
    for a, b in ((0, 1), (1, 0)):
        assert len(kernels[a]["send"]) == len(kernels[b]["recv"]) == 6
        for s, r in zip(kernels[a]["send"], kernels[b]["recv"]):
            assert (2 * s, 2 * r + 1) in edges and (2 * r, 2 * r + 1) in edges  # the send's and its own start
        for s1, s2 in zip(kernels[a]["send"], kernels[b]["send"]):
            assert (2 * s1, 2 * s2 + 1) not in edges  # two sends are not one collective


#: rank 1's delay at the start of steps 2-5: far above what a loaded 2-core machine adds to
#: a step of this job on its own (rank 0 once held 30 ms of a step's path with 4 other
#: processes busy), so the straggler's share of the path, its lead-in on it and rank 0's
#: waiting are the sleep's, whatever the load (with 20 ms they were not always)
STRAGGLE_NS = 100_000_000

DDP_SLEEP = """
import time, torch, torch.nn as nn, torch.distributed as dist
import polyprof
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
for i in range(6):
    if rank == 1 and i >= 2:
        time.sleep(0.1)  # the straggler: rank 1 starts these steps 100 ms late, outside any op
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step(); opt.zero_grad()
    polyprof.step()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory):
    """The DDP job's two rank files (run once for the module)."""
    pytest.importorskip("torch")
    from test_rank_outputs import _torchrun

    tmp_path = tmp_path_factory.mktemp("ddp")
    _torchrun(tmp_path, "ddp.py", DDP_SLEEP)
    files = sorted(tmp_path.glob("*.polyprof"))
    assert len(files) == 2
    return files


def test_gloo_ddp_straggler_holds_the_job_path(gloo_job):
    """A real 2-rank DDP job on gloo (torchrun on 127.0.0.1, under polyprof run): rank 1
    sleeps 100 ms at the start of steps 2-5. gloo's all-reduces run on its worker threads
    (``gloo:all_reduce`` ranges, no kernels): each starts once the c10d op enqueued it, the
    rank's main thread goes on after the bucket's all-reduce ends, the ranks' ranges join,
    and a rank's time from its step's start to its first op counts. Before, the ranges
    were no graph events and nothing joined: "critical path 3.578 ms; rank 0 holds 100%"
    of a 31.2 ms step."""
    import subprocess
    import sys

    from polyprof.ranks.critical_path import align
    from test_rank_outputs import SRC as PKG

    files = gloo_job
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", *map(str, files), "--json"],
                       env={**__import__("os").environ, "PYTHONPATH": str(PKG)}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)["critical_path"]
    traces = {k: polyprof.load(p) for k, p in enumerate(files)}
    numbers = step_windows(traces[1])[0].tolist()
    slept = [k for k, n in enumerate(numbers) if 2 <= n <= 5 and k < len(step_windows(traces[0])[0])]
    assert len(slept) >= 3
    for k in slept:
        mine = [x for x in rows if x["step"] == k]
        path = mine[0]["path_ns"]
        assert path > STRAGGLE_NS  # the sleep is on it
        by_rank = {rk: sum(x["on_path_ns"] for x in mine if x["rank"] == rk) for rk in (0, 1)}
        assert by_rank[1] > 0.6 * path
        lead = [x for x in mine if x["rank"] == 1 and x["kind"] == "step"]  # rank 1's step before its first op
        assert len(lead) == 1 and lead[0]["on_path_ns"] >= STRAGGLE_NS - 1_000_000
        assert path <= mine[0]["span_ns"]
        assert job_graph(traces, k, align(traces)).collectives >= 2  # the ranks' all-reduces joined
    # through a joined all-reduce: once the host time between rank 1's ops counts too, the
    # path may stay on rank 1's thread while its last all-reduce is in flight
    assert any(x["name"].startswith("gloo:") for x in rows if x["step"] in slept)


def test_gloo_ddp_wait_is_a_union_over_time(gloo_job):
    """The same job's stragglers: DDP's two bucket all-reduces are in flight at once, so
    summing a rank's waits counted their common time twice (rank 0 "waited 175 ms" in a
    133 ms window). ``waited_ns`` is the union over time of the rank's waits (from its
    arrival to the last arrival), never more than the window; ``caused_wait_ns`` likewise
    per waiting rank."""
    from polyprof.ranks.collectives import collective_table
    from polyprof.ranks.critical_path import align
    from polyprof.ranks.stragglers import arrivals, stragglers

    traces = {k: polyprof.load(p) for k, p in enumerate(gloo_job)}
    tables = {r: collective_table(t) for r, t in traces.items()}
    clocks = align(traces)
    per_rank, per_coll = stragglers(tables, clocks)
    a = arrivals(tables, clocks)
    key, seq, rank, arr = (np.asarray(a[c]) for c in ("key", "seq", "rank", "arrival_ns"))
    last = {}
    for k, q, t in zip(key.tolist(), seq.tolist(), arr.tolist()):
        last[(k, q)] = max(last.get((k, q), t), t)
    for r in (0, 1):
        mine = [(int(t), int(last[(k, q)])) for k, q, rk, t in zip(key.tolist(), seq.tolist(), rank.tolist(),
                                                                  arr.tolist()) if rk == r and last[(k, q)] > t]
        covered = set()  # the union by brute force, in µs
        for s0, e0 in mine:
            covered.update(range(s0 // 1000, e0 // 1000))
        row = {c: per_rank[c][list(per_rank["rank"]).index(r)] for c in per_rank.columns}
        assert abs(row["waited_ns"] - 1000 * len(covered)) <= 1000 * len(mine)
        total = sum(e0 - s0 for s0, e0 in mine)
        t = traces[r]
        window = int((t.events["start_ns"] + t.events["dur_ns"]).max() - t.events["start_ns"].min())
        assert row["waited_ns"] <= min(total, window)
        if r == 0:
            assert total > row["waited_ns"] + 10_000_000  # the overlapping buckets counted once
            assert row["waited_ns"] > 3 * STRAGGLE_NS  # four sleeps of rank 1, waited for
    by = {int(r): int(w) for r, w in zip(per_rank["rank"], per_rank["caused_wait_ns"])}
    waited = {int(r): int(w) for r, w in zip(per_rank["rank"], per_rank["waited_ns"])}
    assert by[1] <= waited[0] and by[0] <= waited[1]  # two ranks: one's caused wait is the other's


def test_gloo_what_if_on_a_step_scales_its_lead_in(gloo_job):
    """A what-if on a step mark (``--what-if 1:step N:0``) is about what the path's
    ``step`` row is: rank 1's lead-in, from the job's step start to its first call (its
    100 ms sleep). Scaled to 0 the step's path gets shorter by that lead-in, less what the
    other rank's own path then holds it for; halved, by about half of it. Before, the
    step event's duration was applied to edges it does not own: "(1 events): step +0.000
    ms" where the lead-in was 20.9 ms. The mark also owns the host time between rank 1's
    ops (a rank joined through a CPU collective): scaled with it."""
    from polyprof.analyze.depgraph import DepGraph
    from polyprof.derive import cache
    from polyprof.ranks.critical_path import align
    from polyprof.ranks.what_if import what_if_op

    traces = {k: polyprof.load(p) for k, p in enumerate(gloo_job)}
    clocks = align(traces)
    numbers = step_windows(traces[1])[0].tolist()
    k = next(i for i, n in enumerate(numbers) if n == 3)
    jg = job_graph(traces, k, clocks)
    g = jg.graph
    mark = jg.event(1, int(cache.steps(traces[1]).rows[k]))  # rank 1's step mark: its one edge, the lead-in
    lead = (g.owner == mark) & (g.src == 2 * mark)
    assert mark >= 0 and lead.sum() == 1
    weight = int(g.weight[lead][0])
    assert weight > STRAGGLE_NS - 1_000_000  # the sleep
    owned = g.owner == mark  # the lead-in and the host time between the rank's ops
    total = int(g.weight[owned].sum())
    base = longest_path(g).length
    rest = longest_path(DepGraph(g.rows, g.device, g.time, g.src, g.dst, np.where(owned, 0, g.weight), g.etype,
                                 g.owner)).length
    change, n = what_if_op(jg, 1, f"step {numbers[k]}", 0.0)
    assert n == 1 and change == rest - base
    assert -total <= change < -0.5 * weight
    half, _ = what_if_op(jg, 1, f"step {numbers[k]}", 0.5)
    # each owned edge is halved and rounded on its own (to even): up to half a ns each
    assert -(total + int(owned.sum())) // 2 - 1 <= half < -0.25 * weight


def test_gloo_sleep_mid_step_is_on_the_job_path(traces_dir):
    """A real 2-rank DDP job on gloo (tests/data/traces/gloo_ddp, ``mid``): rank 1 sleeps
    50 ms between its forward and backward pass in steps 3-5, so rank 0 waits for it at
    the bucket all-reduces. That sleep is host time between two top-level ops, which
    HTA's graph weighs nothing: before, step 4's path was 36.5 ms of an 82.4 ms step, half
    of it on rank 0, and the sleep on no path (steps 3 and 5 likewise). Now the host time
    between a CPU-collective rank's ops counts, owned by its step mark, less any part the
    thread spent waiting for a collective's end: the path runs through rank 1's sleep,
    and the waiting rank's own wait is not made its step's time."""
    from polyprof.ranks.critical_path import align, job_critical_path
    from polyprof.ranks.what_if import what_if_op

    d = traces_dir / "gloo_ddp"
    traces = {r: polyprof.load(d / f"mid.rank{r}.pt.trace.json.gz") for r in (0, 1)}
    clocks = align(traces)
    numbers = step_windows(traces[1])[0].tolist()
    slept = [k for k, n in enumerate(numbers) if n in (3, 4, 5)]
    assert len(slept) == 3
    rows = job_critical_path(traces, slept, clocks)
    step, rank, name, on = (np.asarray(rows[c]) for c in ("step", "rank", "name", "on_path_ns"))
    path, span = np.asarray(rows["path_ns"]), np.asarray(rows["span_ns"])
    for k in slept:
        m = step == k
        length = int(path[m][0])
        assert 60_000_000 < length <= int(span[m][0])  # the 50 ms sleep and the step's ops
        mark = m & (rank == 1) & (name == f"ProfilerStep#{numbers[k]}")
        assert mark.sum() == 1 and int(on[mark][0]) > 45_000_000  # rank 1's time between its ops
        waiting = m & (rank == 0) & (name == f"ProfilerStep#{numbers[k]}")
        assert int(on[waiting].sum()) < 5_000_000  # rank 0 waited: none of its own
        assert on[m & (rank == 1)].sum() > 0.7 * length
        change, n = what_if_op(job_graph(traces, k, clocks), 1, f"ProfilerStep#{numbers[k]}", 0.0)
        assert n == 1 and change < -40_000_000  # without the sleep the step gets shorter by most of it


def test_gloo_wait_inside_a_range_with_children_is_replaced(traces_dir):
    """FSDP2 on gloo (tests/data/traces/gloo_fsdp2, torch.profiler's JSON): rank 1 sleeps
    200 ms before its optimizer step in ProfilerStep#3, so rank 0 waits for it in the first
    all-gather of ProfilerStep#4. That ``gloo:all_gather`` range holds ops (``aten::empty``
    at its start, the ``aten::select`` / ``aten::copy_`` that copy the shards in at its
    end), so its span is several parts of the graph, not one edge. Only a start-to-end
    edge was replaced by the joining edges: the 202.8 ms part between its children stayed,
    and once rank 1's lead-in was taken away (``--what-if 1:ProfilerStep#4:0``) the path
    ran through rank 0's own wait: "step -16.608 ms" for a 200 ms lead-in. Now every part
    of a joined collective's span is replaced: without the sleep the step is a normal one.
    The sleep is ProfilerStep#3's (rank 1's own step, on whose path it is); step 4's lead-in
    counts from rank 1's end of step 3, so step 4's path is a normal step's, not rank 0's
    wait. (Before, step 4's lead-in ran from rank 0's start of step 4, and the one sleep
    was on both steps' paths: 215.7 and 229.1 ms, 485.5 ms over 303.9 ms of steps.)"""
    from polyprof.analyze.depgraph import OPERATOR
    from polyprof.ranks.critical_path import align
    from polyprof.ranks.what_if import what_if_op

    d = traces_dir / "gloo_fsdp2"
    traces = {r: polyprof.load(d / f"rank{r}.pt.trace.json.gz") for r in (0, 1)}
    clocks = align(traces)
    numbers = step_windows(traces[1])[0].tolist()
    k = numbers.index(4)
    jg = job_graph(traces, k, clocks)
    g = jg.graph
    names0 = traces[0].names()
    mine = np.flatnonzero(jg.rank == 0)
    gathers = [int(e) for e in mine if names0[g.rows[e]] == "gloo:all_gather"]
    wait = max(gathers, key=lambda e: int(g.time[2 * e + 1] - g.time[2 * e]))
    assert int(g.time[2 * wait + 1] - g.time[2 * wait]) > 190_000_000  # rank 0's wait for rank 1
    parts = np.flatnonzero((g.owner == wait) & (g.etype == OPERATOR))
    assert len(parts) == 0  # none of its span left beside the joining edges (there were 7)
    inside = (g.time[2 * mine] > g.time[2 * wait]) & (g.time[2 * mine + 1] < g.time[2 * wait + 1])
    assert inside.sum() >= 3  # the range holds ops: its span was more than one edge
    base = longest_path(g).length
    assert base < 45_000_000  # a normal step (about 29 ms), not rank 0's 200 ms wait
    change, n = what_if_op(jg, 1, f"ProfilerStep#{numbers[k]}", 0.0)
    assert n == 1 and -10_000_000 < change <= 0
    j3 = job_graph(traces, numbers.index(3), clocks)
    assert longest_path(j3.graph).length > 200_000_000  # the sleep holds the step it is in
    change, n = what_if_op(j3, 1, "ProfilerStep#3", 0.0)
    assert n == 1 and change < -180_000_000


def test_tensor_parallel_wait_is_the_late_ranks(traces_dir):
    """Tensor parallel on gloo (tests/data/traces/gloo_tp, torch.profiler's JSON): rank 0
    sleeps 200 ms in ProfilerStep#2, and rank 1 waits for it in ProfilerStep#3's forward
    all-reduce, a functional collective whose result its main thread waits for in
    ``_c10d_functional::wait_tensor``. That op's span kept the wait as its own time, so
    the path of ProfilerStep#3 blamed the waiting rank ("rank 1 holds 100%":
    ``wait_tensor`` 201.7 ms) and the what-if taking away rank 0's lead-in changed nothing
    ("+0.000 ms"). Now the op's time until the collective it waits for ends weighs
    nothing, its end depends on that collective's end, and the path runs through rank 0's
    late start: in ProfilerStep#2, where rank 0 slept (its own step's host time). Step 3's
    lead-in counts from rank 0's end of step 2, so step 3's path is a normal step's.
    (Before, the sleep was on both steps' paths: 203.4 and 204.8 ms, 414.6 ms over 214.7
    ms of steps, and the what-ifs on both steps' marks predicted -200 ms each.)"""
    from polyprof.ranks.critical_path import align, job_critical_path
    from polyprof.ranks.what_if import what_if_op

    d = traces_dir / "gloo_tp"
    traces = {r: polyprof.load(d / f"tp.rank{r}.pt.trace.json.gz") for r in (0, 1)}
    clocks = align(traces)
    numbers = step_windows(traces[1])[0].tolist()
    k = numbers.index(3)
    rows = job_critical_path(traces, [k], clocks)
    name, on = (np.asarray(rows[c]) for c in ("name", "on_path_ns"))
    length = int(np.asarray(rows["path_ns"])[0])
    assert length < 10_000_000 < 190_000_000 < int(np.asarray(rows["span_ns"])[0])  # a normal step's path
    assert int(on[name == "_c10d_functional::wait_tensor"].sum()) < 5_000_000  # not the wait
    k = numbers.index(2)
    rows = job_critical_path(traces, [k], clocks)
    rank, on = np.asarray(rows["rank"]), np.asarray(rows["on_path_ns"])
    length = int(np.asarray(rows["path_ns"])[0])
    assert 190_000_000 < length <= int(np.asarray(rows["span_ns"])[0])
    assert on[rank == 0].sum() > 0.9 * length  # the late rank holds the step it slept in
    change, n = what_if_op(job_graph(traces, k, clocks), 0, f"ProfilerStep#{numbers[k]}", 0.0)
    assert n == 1 and change < -180_000_000  # without rank 0's sleep, a normal step
