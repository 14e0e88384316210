"""gloo subgroups: which group each collective is in, the global rank of a subgroup's
root, and world and subgroup collectives told apart across ranks.

gloo's work ranges (``gloo:broadcast``) name no process group, and the c10d op that
posts one names its root as a rank of its group (``dist.broadcast(t, src=3,
group=[1, 3])`` -> ``root_rank`` 1). The thread a range ran on tells the group: each
gloo group runs its work on threads of its own, made with the group
(``analyze/process_groups.py: gloo_groups``). Real 4-rank jobs on one host (true clock
offset 0) recorded by torch.profiler: tests/data/traces/gloo_rooted/subworld*.rank*
(see its README): a world broadcast from rank 0, a broadcast in group [1, 3] from rank
3, a world all-reduce; rank 3 (subworld) or rank 1 (subworld_late1) 25 ms late in
steps 4 and 6. Before: the subgroup's root read as global rank 1, world and subgroup
broadcasts one key ``broadcast`` (so ranks 1 and 3, with twice rank 0's broadcasts,
matched none of rank 0's: not aligned, and no straggler named)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.collectives import collective_table
from polyprof.analyze.frames import column
from polyprof.ranks.stragglers import _held_by, _waits, chain_ends

ROOTED = Path(__file__).parent / "data" / "traces" / "gloo_rooted"


def _rows(path: Path) -> list[tuple[str, int, int, int]]:
    t = collective_table(polyprof.load(path))
    return list(zip(*(column(t, c).tolist() for c in ("key", "seq", "root", "group_size"))))


def _records(table) -> list[dict]:
    return [dict(zip(table.columns, row)) for row in zip(*(column(table, c).tolist() for c in table.columns))]


def test_a_subgroup_broadcast_has_its_root_global_rank_and_its_own_key():
    for r in range(4):
        rows = _rows(ROOTED / f"subworld.rank{r}.pt.trace.json.gz")
        world = [x for x in rows if x[0] == "broadcast"]
        sub = [x for x in rows if x[0] == "1/broadcast"]
        # the default group's keep the bare op (as collectives whose group is not told)
        assert {x[0] for x in rows} == ({"broadcast", "allreduce"} | ({"1/broadcast"} if r in (1, 3) else set()))
        assert [x[1] for x in world] == list(range(6)) and {(x[2], x[3]) for x in world} == {(0, 4)}, world
        if r in (1, 3):  # root_rank 1 of group [1, 3]: global rank 3; the group's size, 2
            assert [x[1] for x in sub] == list(range(6)) and {(x[2], x[3]) for x in sub} == {(3, 2)}, sub


def _job(kind: str):
    return polyprof.load_ranks(sorted(ROOTED.glob(f"{kind}.rank*.pt.trace.json.gz"))).analyze(
        "serial", progress=None)


def test_ranks_match_each_collective_with_its_own_group():
    """Every rank aligned from collectives within its bound of the truth (0), and the late
    rank named, in the steps it slept."""
    for kind, late in (("subworld", 3), ("subworld_late1", 1)):
        rep = _job(kind)
        for a in _records(rep.tables["rank_alignment"]):
            assert a["aligned"] and a["method"] in ("reference", "collectives") and a["collectives"] == 12, a
            assert abs(a["offset_ns"]) <= a["bound_ns"] < 5e6, a
        found = [f for f in rep.findings if f.id == "straggler"]
        assert [int(f.evidence["rank"]) for f in found] == [late], [f.title for f in rep.findings]
        assert found[0].evidence["steps"] == [4, 6], found[0].evidence
        per_rank = {x["rank"]: x for x in _records(rep.tables["stragglers"])}
        # the others waited for it about 25 ms in each of 2 steps, summed over the 3 others
        assert 100e6 < per_rank[late]["caused_wait_ns"] < 250e6, per_rank


def test_a_root_is_unknown_where_the_trace_does_not_tell_the_group(tmp_path):
    """Where a rank's threads do not tell its groups apart (here: two of its 4 gloo
    threads' work recorded as one thread's), a root that the groups it is in map to
    different global ranks is unknown (-1), never a wrong rank, and its collectives all
    have the bare key. Before: the world's broadcasts rooted at 0, the subgroup's at 1 (the
    group's rank 1 is rank 3)."""
    doc = json.loads(gzip.decompress((ROOTED / "subworld.rank3.pt.trace.json.gz").read_bytes()))
    gloo = sorted({e["tid"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("gloo:")})
    assert len(gloo) == 4
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("gloo:") and e["tid"] == gloo[-1]:
            e["tid"] = gloo[-2]
    p = tmp_path / "rank3.pt.trace.json"
    p.write_text(json.dumps(doc))
    rows = _rows(p)
    assert {x[0] for x in rows} == {"broadcast", "allreduce"}
    # world broadcasts (root_rank 0: global 0 in the world, 1 in [1, 3]) and the subgroup's
    # (root_rank 1: 1 or 3): unknown
    assert {x[2] for x in rows if x[0] == "broadcast"} == {-1}, rows


def test_a_recording_without_the_groups_listed_gives_no_wrong_root():
    """polyprof's own recording of a subgroup broadcast (``subgroup``: no ``pg_config``; rank
    1 and 3's gloo work on two groups' threads): the root, a rank of a group the trace does
    not list, is unknown. Before: 1, a wrong global rank (the root is rank 3)."""
    for r in (1, 3):
        rows = _rows(ROOTED / f"subgroup.rank{r}.pt.trace.json.gz")
        assert {x[2] for x in rows if x[0] == "broadcast"} == {-1}, rows


def test_chain_ends_follows_chains_of_any_length():
    """Pointer jumping to each chain's end: chains far longer than 64, a forest of them."""
    rng = np.random.default_rng(0)
    n = 100_000
    perm = rng.permutation(n)
    up = np.empty(n, np.int64)
    up[perm[1:]] = perm[:-1]  # one chain through every node, n - 1 long
    up[perm[0]] = perm[0]
    assert (chain_ends(up) == perm[0]).all()
    forest = np.where(rng.random(n) < 0.001, np.arange(n), rng.integers(0, np.maximum(np.arange(n), 1)))
    forest[0] = 0  # each points to an earlier one or to itself: every chain ends
    naive = forest.copy()
    while not (naive[naive] == naive).all():
        naive = naive[naive]
    assert (chain_ends(forest) == naive).all()


def test_waiting_is_not_passed_around_a_cycle():
    """Two collectives b and c whose last ranks each waited in the other, within the clocks'
    bound: rank 0 waited in b for rank 1 (last there at 100 ns), then came last to c at 101
    ns; rank 1 left c at 99 ns, before rank 0 arrived there, so it cannot have waited for
    it. c's waiting is charged to rank 1, b's stays rank 1's. Before: each pointed at the
    other, and the pointer jumping stopped at each one's own last rank (rank 0 for c)."""
    #                  z  z  b    b    b    c    c   c
    group = np.array([0, 0, 1, 1, 1, 2, 2, 2])
    rank = np.array([0, 1, 0, 1, 3, 0, 1, 2])
    arr = np.array([0, 0, 0, 100, 50, 101, 0, 50], np.int64)
    end = np.array([0, 0, 99, 101, 101, 102, 99, 101], np.int64)
    last = np.full(3, np.iinfo(np.int64).min)
    np.maximum.at(last, group, arr)
    bound = np.full(3, 1.0)
    wait = _waits(arr, end, last[group], bound[group])
    rows = np.arange(len(arr))
    last_row = np.full(3, len(arr))
    np.minimum.at(last_row, group[arr == last[group]], rows[arr == last[group]])
    assert _held_by(group, rank, arr, end, wait, last_row, last, bound).tolist() == [0, 1, 1]
