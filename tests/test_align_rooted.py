"""Rooted collectives (broadcast, scatter, reduce, gather) across ranks: their root read
from the trace, the clock constraints they give (one way, between the root and another
rank: a broadcast's root may finish before a receiver begins), and the waits of
stragglers (a root that finished early waited for nobody; a receiver that waited for a
late root did).

On real 4-rank gloo jobs on one host (every rank on one clock: the true offset is 0):
tests/data/traces/gloo_rooted (recorded, see its README) and a torchrun job run here."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.collectives import collective_table
from polyprof.analyze.frames import column
from polyprof.ranks.align import MATCHED, align_ranks
from rankmaker import make_ranks

ROOTED = Path(__file__).parent / "data" / "traces" / "gloo_rooted"
SRC = Path(__file__).parents[1] / "src"


def _job(kind: str):
    return polyprof.load_ranks(sorted(ROOTED.glob(f"{kind}.rank*.pt.trace.json.gz"))).analyze(
        "serial", progress=None)


def _records(table) -> list[dict]:
    return [dict(zip(table.columns, row)) for row in zip(*(column(table, c).tolist() for c in table.columns))]


def _aligned_within_bounds(rep) -> None:
    """Every rank aligned from collectives, the true offset (0: one host's clock) within its bound."""
    for a in _records(rep.tables["rank_alignment"]):
        assert a["aligned"] and a["method"] in ("reference", "collectives"), a
        assert abs(a["offset_ns"]) <= a["bound_ns"] < 10e6, a


def _straggler(rep) -> int:
    found = [f for f in rep.findings if f.id == "straggler"]
    assert len(found) == 1, [f.title for f in rep.findings]
    return int(found[0].evidence["rank"])


def test_the_root_is_read_from_the_c10d_op():
    """gloo's work range (``gloo:broadcast``, on a worker thread) names no root; the c10d
    op that posted it does (``c10d::broadcast_``'s ``root_rank``, ``c10d::reduce_``'s),
    paired k-th with k-th."""
    for kind, op, root in (("bcast", "broadcast", 0), ("rootlate", "broadcast", 2), ("reduce", "reduce", 1)):
        for r in range(4):
            t = collective_table(polyprof.load(ROOTED / f"{kind}.rank{r}.pt.trace.json.gz"))
            ops, roots = np.asarray(t["op"], object), np.asarray(t["root"], np.int64)
            assert (roots[ops == op] == root).all() and (ops == op).sum() == 6, (kind, r)
            assert (roots[ops == "allreduce"] == -1).all()  # not rooted


def test_the_root_is_read_from_the_comms_args(traces_dir, tmp_path):
    """PyTorch 2.4+ writes the root of a broadcast as the comms args' ``Rank`` (a rank of
    ``Process Group Ranks``); the A100 trace's PyTorch wrote none: unknown (-1)."""
    src = traces_dir / "kineto" / "a100_nccl_rank0.json.gz"
    t = collective_table(polyprof.load(src))
    assert (np.asarray(t["root"], np.int64) == -1).all()
    files = make_ranks(src, tmp_path, [0, 0])  # rankmaker: the k-th broadcast rooted at rank k mod 2
    t = collective_table(polyprof.load(files[1]))
    bc = np.asarray(t["op"], object) == "broadcast"
    assert np.asarray(t["root"], np.int64)[bc].tolist() == [0, 1, 0, 1, 0, 1]


def test_a_late_receiver_of_a_broadcast_is_aligned_and_named():
    """Rank 3 enters the broadcasts of steps 2-4 30 ms after the root, rank 0, which has
    finished by then; rank 1 waits for rank 3 in them. Before: rank 3 not aligned (a
    collective cannot end on one rank before it began on another, said of the broadcasts
    too, contradicted itself), and rank 1 named the straggler."""
    rep = _job("bcast")
    _aligned_within_bounds(rep)
    assert _straggler(rep) == 3
    sc = [r for r in _records(rep.tables["straggler_collectives"]) if r["op"] == "broadcast" and 2 <= r["seq"] <= 4]
    assert len(sc) == 3 and all(r["last_rank"] == 3 and r["spread_ns"] > 25e6 for r in sc), sc
    # the root finished first and waited for nobody: only rank 1's wait (the others
    # summed would be about three spreads)
    assert all(r["wait_ns"] < 1.5 * r["spread_ns"] for r in sc), sc
    # rank 1 came last at some all-reduces by a hair, having waited for rank 3 in the
    # broadcast just before: those are charged to rank 3
    per_rank = {r["rank"]: r for r in _records(rep.tables["stragglers"])}
    assert per_rank[3]["caused_wait_ns"] > 10 * max(per_rank[r]["caused_wait_ns"] for r in (0, 1, 2))


def test_a_late_root_is_waited_for():
    """Rank 2 roots the broadcasts and is 30 ms late: every receiver waits for it (the
    waits of all three count). Before: rank 3 placed 796 µs off with a bound of 498 µs."""
    rep = _job("rootlate")
    _aligned_within_bounds(rep)
    assert _straggler(rep) == 2
    sc = [r for r in _records(rep.tables["straggler_collectives"]) if r["op"] == "broadcast" and 2 <= r["seq"] <= 4]
    assert len(sc) == 3 and all(r["last_rank"] == 2 and r["wait_ns"] > 2.5 * r["spread_ns"] for r in sc), sc


def test_a_late_sender_of_a_reduce():
    """A reduce's root cannot end before each sender began: one-way constraints, the
    all-reduces' two-way ones; rank 3, late, is named."""
    rep = _job("reduce")
    _aligned_within_bounds(rep)
    assert _straggler(rep) == 3


def test_a_broadcast_whose_root_is_unknown_bounds_no_clock(traces_dir, tmp_path):
    """The A100 trace's broadcasts name no root: they bound nothing, and the bound is the
    all-reduces' (the shortest 1.69 ms long), the offsets still recovered within it (where
    with the roots named, tests/rankmaker.py's default, it is tens of µs)."""
    src = traces_dir / "kineto" / "a100_nccl_rank0.json.gz"
    offsets = [0, 3_500_000]
    for named, most in ((False, 2_000_000), (True, 60_000)):
        files = make_ranks(src, tmp_path / str(named), offsets, broadcast_roots=named)
        clocks = align_ranks({r: collective_table(polyprof.load(f)) for r, f in enumerate(files)})
        for r in (1,):
            c = clocks[r]
            assert c.aligned and abs(c.fit.offset_ns + offsets[r]) <= c.fit.bound_ns < most, (named, r, c.fit)
            if not named:
                assert c.fit.bound_ns > 1_600_000


def test_rooted_collectives_alone_say_why_they_do_not_align():
    """Only broadcasts from rank 0: each bounds a receiver's clock from below, none from
    above, so rank 1 is not aligned and the message says why (before: aligned from the
    broadcasts' two-way constraints)."""
    tables = {r: collective_table(polyprof.load(ROOTED / f"bcast.rank{r}.pt.trace.json.gz")) for r in (0, 1)}
    tables = {r: t.take(np.asarray(t["op"], object) == "broadcast") for r, t in tables.items()}
    c = align_ranks(tables)[1]
    assert not c.aligned
    assert "no collective bound its clock from both sides: its 6 collective(s) that pair with the reference " \
           "rank's are rooted" in c.message and "one side only" in c.message, c.message


PROGRAM = (ROOTED / "README.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]


def test_torchrun_gloo_broadcast_with_a_late_receiver(tmp_path):
    """The same job run here under torchrun (4 ranks on 127.0.0.1, one clock): every rank
    aligned from collectives within its bound of the truth, 0, and rank 3, late at the
    broadcasts from rank 0, named the straggler (about 20 s on 2 cores)."""
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    (tmp_path / "rooted.py").write_text(PROGRAM)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "OP": "broadcast", "ROOT": "0",
           "LATE_RANK": "3"}
    with socket.socket() as sock:  # a free port on loopback for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    r = subprocess.run([torchrun, "--nproc-per-node", "4", "--master-addr", "127.0.0.1", "--master-port", port,
                        "-m", "polyprof", "run", "--no-summary", "--plugins", "host,torch", "rooted.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    files = sorted(tmp_path.glob("rooted.rank*.polyprof"))
    assert len(files) == 4
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", *map(str, files), "--json"],
                       env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    for a in doc["tables"]["rank_alignment"]["records"]:
        # on a loaded machine the collectives' fit is wider than ONE_HOST_BOUND_NS and the
        # ranks' one host's clock places them (ranks/align.py _on_one_host)
        assert a["aligned"] and a["method"] in MATCHED, a
        assert abs(a["offset_ns"]) <= a["bound_ns"], a
    found = [f for f in doc["findings"] if f["id"] == "straggler"]
    assert [f["evidence"]["rank"] for f in found] == [3], [f["title"] for f in doc["findings"]]


def test_the_timeline_names_the_rank_a_collective_waited_on():
    """The report's marks: rank 1 came last at all-reduce #2 having waited for rank 3 in
    the broadcast just before; a mark whose arrivals differ within twice the bound names
    no rank."""
    from polyprof.report.timeline_job import offsets, straggler_marks

    rep = _job("bcast")
    labels = [m["label"] for m in straggler_marks(rep, offsets(rep))]
    assert any(x.startswith("allreduce #2: rank 1 last, ") and x.endswith("(it had waited for rank 3 just before)")
               for x in labels), labels
    assert any(x.startswith("broadcast #5: arrivals ") and x.endswith("no known last rank") for x in labels), labels


def test_a_subgroup_broadcast_whose_root_is_late():
    """Group [1, 3] broadcasts from rank 3, 25 ms late in steps 2 and 4; rank 1 waits for
    it there, then reaches the world all-reduce with it, by a hair last, while ranks 0
    and 2 (not in the group) wait for both. Before: all-reduce #4 charged to rank 1 (53 ms
    "others waited", "2.0x what rank 1 caused"): nobody left the broadcast early, so
    nothing was passed on. And the alignment said the broadcasts, of a group rank 0 is
    not in, were missing from one of the recordings."""
    from polyprof.report.timeline_job import offsets, straggler_marks

    rep = _job("subgroup")
    _aligned_within_bounds(rep)
    assert _straggler(rep) == 3
    found = next(f for f in rep.findings if f.id == "straggler")
    assert "what rank 1 caused" not in found.title, found.title
    ar = {r["seq"]: r for r in _records(rep.tables["straggler_collectives"]) if r["op"] == "allreduce"}
    assert ar[4]["last_rank"] == 1 and ar[4]["held_by"] == 3 and ar[4]["spread_ns"] > 20e6, ar[4]
    per_rank = {r["rank"]: r for r in _records(rep.tables["stragglers"])}
    assert per_rank[3]["caused_wait_ns"] > 20 * per_rank[1]["caused_wait_ns"], per_rank
    labels = [m["label"] for m in straggler_marks(rep, offsets(rep))]
    assert any(x.startswith("allreduce #4: rank 1 last, ") and x.endswith("(it had waited for rank 3 just before)")
               for x in labels), labels
    notes = {r["rank"]: r["message"] for r in _records(rep.tables["rank_alignment"])}
    for r in (1, 3):
        assert "missing from one" not in notes[r] and "6 collective(s) of rank" in notes[r], notes[r]
        assert "a process group rank 0 is not in, nothing missing" in notes[r], notes[r]
