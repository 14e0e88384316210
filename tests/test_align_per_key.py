"""Clock alignment key by key: a key whose pairs disagree (or whose counts differ) is
left out, not every key with it; sizes tell apart collectives of one key.

Real 4-rank gloo job on one host (true clock offset 0), recorded by ``polyprof run``
before it wrote the ranks' process groups: tests/data/traces/gloo_subgroup_sizes (see its
README). Ranks 1 and 3's world (16 KiB) and subgroup (4 KiB) broadcasts share the key
``broadcast``: 16 against rank 0's 8; their all-reduces and reduces match rank 0's by key,
count and size. Before: one shift for every key, and every pair had to agree, so the
broadcasts' wrong pairs sank the others' (and the fallback around gaps wants ends within
50 µs, as NCCL's, never gloo's): ranks 1 and 3 not aligned, no straggler named."""

from __future__ import annotations

from pathlib import Path

import polyprof
from polyprof.analyze.collectives import collective_table
from polyprof.analyze.frames import column
from polyprof.ranks.align import align_pair

SIZES = Path(__file__).parent / "data" / "traces" / "gloo_subgroup_sizes"


def _records(table) -> list[dict]:
    return [dict(zip(table.columns, row)) for row in zip(*(column(table, c).tolist() for c in table.columns))]


def _paths() -> list[Path]:
    return sorted(SIZES.glob("sub.rank*.pt.trace.json.gz"))


def test_every_rank_aligned_within_its_bound_and_the_late_rank_named():
    rep = polyprof.load_ranks(_paths()).analyze("serial", progress=None)
    al = {a["rank"]: a for a in _records(rep.tables["rank_alignment"])}
    for a in al.values():
        assert a["aligned"] and a["method"] in ("reference", "collectives"), a
        assert abs(a["offset_ns"]) <= a["bound_ns"] < 10e6, a  # the truth: 0
    for r in (1, 3):  # every all-reduce, reduce, world broadcast and the barrier: 8 + 8 + 8 + 1
        assert al[r]["collectives"] == 25, al[r]
        assert "8 collective(s) of rank %d (broadcast of 4.0 KiB)" % r in al[r]["message"], al[r]
        assert "missing" not in al[r]["message"].replace("nothing missing", ""), al[r]
    found = [f for f in rep.findings if f.id == "straggler"]
    assert [int(f.evidence["rank"]) for f in found] == [3], [f.title for f in rep.findings]
    assert found[0].evidence["steps"] == [3, 4, 5], found[0].evidence


def test_pairs_by_size_where_a_key_counts_differ():
    ref, other = (collective_table(polyprof.load(p)) for p in _paths()[:2])
    fit, n, _, seq_map = align_pair(ref, other, (0, 1))
    assert fit is not None and fit.consistent and n == 25 and seq_map is not None
    size = dict(zip(zip(column(other, "key").tolist(), column(other, "seq").tolist()), column(other, "bytes").tolist()))
    paired = [k for k in seq_map if k[0] == "broadcast"]
    # the 16 KiB broadcasts with rank 0's, in order; the 4 KiB ones with none
    assert len(paired) == 8 and {size[k] for k in paired} == {16384}, paired
    assert [seq_map[k] for k in sorted(paired, key=lambda k: k[1])] == list(range(8))
