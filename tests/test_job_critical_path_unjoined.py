"""Ranks a step joins to no other (ranks/critical_path.py: ``job_graph``'s ``unjoined`` and
``left_out``), on real recordings: the 3-rank gloo job of tests/data/traces/gloo_sections
(rank 2 sleeps 80 ms in its ``load`` section in steps 3 and 4) and, as a fourth rank, rank
0 of another run (tests/data/traces/gloo_ddp ``even``: the same gloo all-reduces, recorded
another day, so no collective of it matches: its clock stays as recorded).

Before, a collective was joined only where it matched on every rank given, so that one
unaligned rank (its collectives numbered -1) turned the join off for all: step 3 read
"rank 0 holds 100%", its ``gloo:broadcast`` 80.7 ms (the rank waiting for rank 2), the
step's span 132,409 s (the two runs' clocks mixed), ``--what-if 2:load:0`` 0, and nothing
said the ranks were not joined. Now the collectives matched across ranks 0-2 join them,
rank 3 is left out of the graph (its collectives' spans hold waits for ranks it is not
joined to) and every output names it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import step_windows
from polyprof.analyze.depgraph import OPERATOR
from polyprof.analyze.longest_path import longest_path
from polyprof.ranks.critical_path import align, job_graph, path_table
from polyprof.ranks.what_if import what_if_op

#: rank 2's sleep in its ``load`` section, steps 3 and 4
SLEEP_NS = 80_000_000


@pytest.fixture(scope="module")
def job(traces_dir: Path) -> dict[int, polyprof.Trace]:
    d = traces_dir / "gloo_sections"
    traces = {r: polyprof.load(d / f"sections3.rank{r}.pt.trace.json.gz") for r in (0, 1, 2)}
    traces[3] = polyprof.load(traces_dir / "gloo_ddp" / "even.rank0.pt.trace.json.gz")
    return traces


def _slept(t: polyprof.Trace) -> list[int]:
    numbers = step_windows(t)[0].tolist()
    return [numbers.index(3), numbers.index(4)]


def test_an_unaligned_rank_leaves_the_others_joined(job):
    clocks = align(job)
    assert [clocks[r].aligned for r in range(4)] == [True, True, True, False]  # rank 3: another run
    three = {r: job[r] for r in (0, 1, 2)}
    c3 = align(three)
    for k in _slept(job[0]):
        jg = job_graph(job, k, clocks)
        assert jg.collectives == 2  # the broadcast and the all-reduce, joined across ranks 0-2
        assert jg.left_out == [3] and list(jg.unjoined) == [3]
        assert "not aligned from collectives" in jg.unjoined[3]
        assert not (jg.rank == 3).any()  # none of its events in the graph
        p = longest_path(jg.graph)
        alone = job_graph(three, k, c3)
        assert p.length == longest_path(alone.graph).length and jg.span_ns == alone.span_ns  # as if not given
        assert p.length <= jg.span_ns < 200_000_000  # one clock: not the two runs' mixed
        t = path_table(jg, p)
        rank, name, on = np.asarray(t["rank"]), t["name"], np.asarray(t["on_path_ns"])
        load = (rank == 2) & (name == "load")
        assert load.sum() == 1 and 0.95 * SLEEP_NS < int(on[load][0]) < 1.1 * SLEEP_NS  # the sleep holds it
        assert on[rank == 2].sum() > 0.9 * p.length
        change, n = what_if_op(jg, 2, "load", 0.0)
        assert n == 1 and abs(change + SLEEP_NS) < 0.2 * SLEEP_NS


def test_a_rooted_collective_joins_only_with_all_its_ranks(job):
    """Ranks 1 and 2 alone (the job's group is 3, recorded with its collectives): their
    all-reduce joins them (each waits for the other's input), the broadcast from rank 0
    does not (neither waits for the other in it: both wait for the root, not given), so
    each keeps its broadcast's span. With rank 0, both join."""
    two = {r: job[r] for r in (1, 2)}
    clocks = align(two)
    for k in _slept(job[0]):
        jg = job_graph(two, k, clocks)
        assert jg.collectives == 1 and not jg.unjoined
        g = jg.graph
        for r in (1, 2):
            names = job[r].names()
            mine = np.flatnonzero(jg.rank == r)
            bcast = [int(e) for e in mine if names[g.rows[e]] == "gloo:broadcast"]
            reduce = [int(e) for e in mine if names[g.rows[e]] == "gloo:all_reduce"]
            assert len(bcast) == len(reduce) == 1
            assert ((g.owner == bcast[0]) & (g.etype == OPERATOR)).any()  # its own span kept
            assert not ((g.owner == reduce[0]) & (g.etype == OPERATOR)).any()  # replaced by the join
        assert job_graph({r: job[r] for r in (0, 1, 2)}, k, align({r: job[r] for r in (0, 1, 2)})).collectives == 2


def test_no_rank_joined_each_its_own(job):
    """Rank 0 of the job with the other run's rank: nothing joins them, so each keeps its
    own graph (neither is left out: there is no join to leave them out of) and both are
    named; the step's span is the longer rank's own, not from one run's clock to the
    other's (before: "the step's 132409 s")."""
    pair = {0: job[0], 1: job[3]}
    clocks = align(pair)
    k = _slept(job[0])[0]
    jg = job_graph(pair, k, clocks)
    assert jg.collectives == 0 and not jg.left_out and sorted(jg.unjoined) == [0, 1]
    assert "matched another rank's" in jg.unjoined[0] and "not aligned" in jg.unjoined[1]
    assert longest_path(jg.graph).length <= jg.span_ns < 200_000_000


def _job_dir(job_src: Path, traces_dir: Path, tmp: Path) -> Path:
    d = tmp / "job"
    d.mkdir()
    for r in (0, 1, 2):  # (ranks by file name)
        shutil.copy(job_src / f"sections3.rank{r}.pt.trace.json.gz", d / f"r{r}.pt.trace.json.gz")
    shutil.copy(traces_dir / "gloo_ddp" / "even.rank0.pt.trace.json.gz", d / "r3.pt.trace.json.gz")
    return d


def test_the_command_says_which_rank_is_not_joined(job, traces_dir, tmp_path):
    d = _job_dir(traces_dir / "gloo_sections", traces_dir, tmp_path)
    k = _slept(job[0])[0]
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(d), "--step", str(k), "--step",
                        str(k + 1), "--what-if", "2:load:0"], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("not joined in any step: rank 3: its clock was not aligned from collectives")
    assert "left out of the path" in lines[0]
    heads = [x for x in lines if x.startswith("step ")]
    assert len(heads) == 2 and all("rank 2 holds" in x for x in heads)
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(d), "--step", str(k), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    (note,) = out["unjoined"]
    assert note["step"] == k and note["rank"] == 3 and note["in_graph"] is False
    assert {x["rank"] for x in out["critical_path"]} <= {0, 1, 2}
    # every rank given joined: no note
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", *sorted(map(str, d.glob("r[012]*"))),
                        "--step", str(k)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "not joined" not in r.stdout


def test_the_export_track_names_the_unjoined_rank(job, traces_dir, tmp_path):
    d = _job_dir(traces_dir / "gloo_sections", traces_dir, tmp_path)
    out = tmp_path / "cp.json"
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(d), "-f", "chrome", "-o", str(out),
                        "--critical-path"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    (meta,) = [e for e in evs if e.get("name") == "thread_name" and e["args"]["name"] == "critical path"]
    slices = [e for e in evs if e.get("ph") == "X" and (e["pid"], e["tid"]) == (meta["pid"], meta["tid"])]
    assert slices and all(e["args"]["unjoined"].startswith("rank 3: its clock was not aligned") for e in slices)
    assert {e["args"]["rank"] for e in slices} <= {0, 1, 2}
