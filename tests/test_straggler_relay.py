"""A late rank's waiting passed along a chain of collectives it held up: the rank that
came last because it was held there is not the straggler.

Real 4-rank gloo job on one host (true clock offset 0), torch.profiler's own traces:
tests/data/traces/gloo_world_late (see its README). Rank 3 sleeps 40 ms before the world
broadcast in steps 4 and 6; gloo's broadcast reaches rank 1 through rank 3, so rank 1
waits for it there, comes last to the subgroup broadcast ([1, 3]) by 0.7 ms (charged to
rank 3) and last to the all-reduce by about 40 ms. Before, that all-reduce was charged to
rank 1 (``_held_by`` passed a charge back only where the last rank had *waited* in its
collective before, not where it had come last to it, held by another), and rank 1 was
named the straggler."""

from __future__ import annotations

from pathlib import Path

import polyprof
from polyprof.analyze.frames import column

LATE = Path(__file__).parent / "data" / "traces" / "gloo_world_late"


def _records(table) -> list[dict]:
    return [dict(zip(table.columns, row)) for row in zip(*(column(table, c).tolist() for c in table.columns))]


def test_the_rank_that_slept_is_named_not_the_one_it_held_up():
    rep = polyprof.load_ranks(sorted(LATE.glob("worldlate.rank*.pt.trace.json.gz"))).analyze(
        "serial", progress=None)
    for a in _records(rep.tables["rank_alignment"]):
        assert a["aligned"] and abs(a["offset_ns"]) <= a["bound_ns"], a
    found = [f for f in rep.findings if f.id == "straggler"]
    assert [int(f.evidence["rank"]) for f in found] == [3], [f.title for f in rep.findings]
    assert found[0].evidence["steps"] == [4, 6], found[0].evidence
    events = _records(rep.tables["straggler_collectives"])
    # the two long all-reduces: rank 1 came last (held at the broadcasts), charged to rank 3
    long = [e for e in events if e["key"] == "allreduce" and e["spread_ns"] > 30e6]
    assert len(long) == 2 and {(e["last_rank"], e["held_by"]) for e in long} == {(1, 3)}, long
    per_rank = {x["rank"]: x for x in _records(rep.tables["stragglers"])}
    # the others waited about 40 ms in each of 2 steps for it, at each collective it held
    assert per_rank[3]["caused_wait_ns"] > 150e6 > 4 * per_rank[1]["caused_wait_ns"], per_rank
