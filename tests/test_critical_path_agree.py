"""One critical path per step: ``polyprof summary``'s ``critical_path`` table and
``polyprof critical-path`` of one trace take the same graph (HTA's, plus each stream's
order, ``analyze/depgraph.py``) and give the same length, and no path is longer than the
step's wall time with its device work (``span_ns``).

On the A100 NCCL trace the two used to disagree: the summary's graph was HTA 0.6's alone,
which leaves out the stream order across a gap of 1.5 ms or more, and gave 103.073 ms for
step #5; the joined graph of ``critical-path`` kept that order and gave 118.460 ms. Both
graphs now also tie the main thread to the backward pass it waits for on the autograd
thread (``depgraph``'s backward edges): 189.996 ms (tests/test_critical_path_backward.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import depgraph
from polyprof.analyze.critical_path import critical_path, rank_of, step_windows
from polyprof.analyze.frames import column
from polyprof.analyze.longest_path import longest_path
from polyprof.derive import cache
from polyprof.ranks.critical_path import job_critical_path, job_graph

DATA = Path(__file__).parent / "data"
A100 = DATA / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
#: every trace of tests/data/traces/kineto and tests/data/h200 that has steps
STEPPED = ["traces/kineto/a100_nccl_rank0.json.gz", "traces/kineto/cpu_only_rank34.json.gz",
           "traces/kineto/mi250_rocm_minitoy.json.gz", "traces/kineto/sampled_rank0.json.gz",
           "traces/kineto/sampled_rank1.json.gz", "traces/kineto/triton_example.json.gz",
           "traces/kineto/v100_ns_resolution_rank0.json.gz", "h200/torch_transformer_h200.json.gz",
           "h200/jax_transformer_h200.xplane.pb.gz", "h200/jax_train_step_h200.xplane.pb"]


def _cli(*args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _by_step(records: list[dict], column: str) -> dict[int, int]:
    return {int(r["step"]): int(r[column]) for r in records}


def test_summary_and_critical_path_command_give_one_path():
    """The user's two numbers for one step of one trace: ``summary --json``'s
    ``critical_path`` and ``critical-path --json`` (steps by position there)."""
    summary = _cli("summary", str(A100), "--json")["tables"]["critical_path"]["records"]
    joined = _cli("critical-path", str(A100), "--json")["critical_path"]
    numbers = step_windows(polyprof.load(A100))[0].tolist()
    for col in ("path_ns", "span_ns"):
        mine = _by_step(summary, col)
        theirs = {numbers[k]: v for k, v in _by_step(joined, col).items()}
        assert mine and set(mine) <= set(theirs)
        assert {s: theirs[s] for s in mine} == mine, col
        # path: 103.073 ms in the summary before the stream order, 118.460 ms before the backward pass
        assert mine[5] == {"path_ns": 189_995_701, "span_ns": 219_504_593}[col]


def test_stream_order_is_what_htas_graph_left_out():
    """Step #5 of the A100 trace without the backward pass's edges (HTA 0.5's threads):
    HTA's graph alone (``stream_order=False``) gives the summary's old 103.073 ms on the
    main thread; the stream order across its 1.5 ms gaps lets the path go on from the
    forward pass's launches through stream 7's kernels. (With the backward pass the path
    stays on the host threads, and both give 189.996 ms.)"""
    t = polyprof.load(A100)
    numbers, starts, ends = step_windows(t)
    k = numbers.tolist().index(5)
    hta = depgraph.build(t, int(starts[k]), int(ends[k]), stream_order=False, backward=False)
    ours = depgraph.build(t, int(starts[k]), int(ends[k]), backward=False)
    assert longest_path(hta).length == 103_072_539
    p = longest_path(ours)
    assert p.length == 118_460_124
    order = ours.etype == depgraph.STREAM_ORDER
    assert order.sum() == len(ours.src) - len(hta.src) > 0
    gap = ours.time[ours.dst[order]] - ours.time[ours.src[order]]
    assert not ours.weight[order].any() and (gap >= 0).all()
    assert (gap >= depgraph.KERNEL_GAP_LIMIT_NS).any()
    assert (ours.etype[p.edges] == depgraph.STREAM_ORDER).any()
    full = longest_path(depgraph.build(t, int(starts[k]), int(ends[k]))).length
    assert full == longest_path(depgraph.build(t, int(starts[k]), int(ends[k]), stream_order=False)).length
    assert longest_path(job_graph({0: t}, k).graph).length == full == 189_995_701


@pytest.mark.parametrize("name", STEPPED)
def test_no_path_longer_than_its_step(name):
    """Every step of every trace with steps: the path is at most ``span_ns``, the step's
    start to the last end of its calls and the device work they launched (on the V100
    trace that work runs on well past the step's host end: step #101's 35.1 ms on the
    host, 101.2 ms with its kernels, a 97.6 ms path), and the two tables agree."""
    t = polyprof.load(DATA / name)
    assert len(cache.steps(t))
    cp = critical_path(t, max_events=None)
    step, path, span = (np.asarray(column(cp, c), np.int64) for c in ("step", "path_ns", "span_ns"))
    assert (path <= span).all()
    numbers, starts, _ = step_windows(t)
    ev_end = np.asarray(t.events["start_ns"], np.int64) + np.asarray(t.events["dur_ns"], np.int64)
    assert (span <= int(ev_end.max()) - starts.min()).all()
    jt = job_critical_path({rank_of(t): t})
    mine = {int(s): (int(p), int(w)) for s, p, w in zip(step, path, span)}
    js = np.asarray(jt["step"], np.int64)
    for k, s in enumerate(numbers.tolist()):
        if (js == k).any():
            i = int(np.flatnonzero(js == k)[0])
            assert mine[s] == (int(jt["path_ns"][i]), int(jt["span_ns"][i])), s


def test_the_command_fits_its_rows_to_the_terminal_and_json_keeps_names_whole():
    """``critical-path FILE`` cut each name at 100 characters whatever the width (rows of
    ~131 columns at COLUMNS=80); the names are now shortened by meaning and cut where
    they differ, as the summary's tables (report/names.py); ``--json`` keeps them whole."""
    h200 = DATA / "h200" / "torch_transformer_h200.json.gz"
    env = dict(os.environ, COLUMNS="80")
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(h200), "--step", "1", "-n", "12"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80, max(lines, key=len)
    head = lines.index(next(x for x in lines if x.split()[:2] == ["rank", "kind"]))
    rows = [x.split(None, 4) for x in lines[head + 1:head + 13]]  # rank, kind, on path (value, unit), name
    assert len(rows) == 12 and all(x[0] == "0" for x in rows)
    shown = [x[4] for x in rows]
    assert len(set(shown)) == 12  # shortened, still told apart
    whole = [x for x in _cli("critical-path", str(h200), "--json")["critical_path"] if x["step"] == 1]
    summed: dict[str, int] = {}
    for x in whole:  # the text's rows add up the path's events of one name
        summed[x["name"]] = summed.get(x["name"], 0) + x["on_path_ns"]
    top = max(summed, key=lambda n: summed[n])
    assert len(top) > 49 and shown[0] != top and shown[0].endswith("…")
    from polyprof.report.names import ladder

    # the same name, without return type and namespaces (``void cutlass::``), then cut
    assert top.startswith("void cutlass::") and any(x.startswith(shown[0][:-1]) for x in ladder(top)[2:])
