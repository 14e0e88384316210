"""Deferred stats carried through row selection and merging (trace/stats.py ``RowMap``,
``StatTable.carried``/``adopt``; the torch plugin's re-homing, ``subset.take``, ``merge``).

A trace built from another (some of its events, at other rows, next to other traces)
takes the other's undecoded stats along undecoded; decoded there, each column must hold
exactly what an eager decode of the source gives for the events kept, at their new rows.
The eager reference is tests/kineto_reference.py (the reader before args were deferred),
on every real Kineto trace in tests/data/traces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from polyprof.errors import TraceSchemaError
from polyprof.formats import kineto
from polyprof.trace.core import Trace
from polyprof.trace.merge import merge
from polyprof.trace.stats import RowMap, StatColumn, StatTable
from polyprof.trace.subset import take

import kineto_reference as reference

KINETO_DIR = Path(__file__).resolve().parent / "data" / "traces" / "kineto"
SMALL = KINETO_DIR / "cpu_only_rank34.json.gz"


def col(rows, values) -> StatColumn:
    return StatColumn(np.asarray(rows, np.int64), np.asarray(values))


def expected(eager: Trace, keep: np.ndarray, base: int) -> dict[str, tuple[list, str, list]]:
    """key -> (rows, dtype kind, values) of the kept events, computed from the eager columns."""
    new_row = np.cumsum(keep) - 1 + base
    out = {}
    for key, c in eager.stats.items():
        k = keep[c.rows]
        if k.any():
            out[key] = (new_row[c.rows[k]].tolist(), c.kind, c.values[k].tolist())
    return out


def as_lists(stats: StatTable) -> dict[str, tuple[list, str, list]]:
    return {key: (c.rows.tolist(), c.kind, c.values.tolist()) for key, c in stats.items()}


@pytest.mark.parametrize("path", sorted(KINETO_DIR.glob("*.json.gz")), ids=lambda p: p.name.split(".")[0])
def test_selected_and_merged_stats_decode_to_the_eager_columns(path):
    first, part = kineto.load(SMALL), kineto.load(path)
    eager_first, eager_part = reference.load(SMALL), reference.load(path)
    keep = np.random.default_rng(len(path.name)).random(part.n_events) < 0.7
    merged = merge([first, take(part, keep)])
    # nothing was decoded on the way: both readers' args are still text
    assert merged.stats.pending == first.stats.pending + part.stats.pending >= 1
    assert part.stats.pending == 1
    want = expected(eager_first, np.ones(first.n_events, bool), 0)
    for key, v in expected(eager_part, keep, first.n_events).items():
        if key in want:  # both traces have the key: one column over both row ranges
            rows, kind, vals = want[key]
            kinds = {kind, v[1]}
            joined = (rows + v[0], kind if len(kinds) == 1 else ("f" if kinds <= set("iuf") else "O"),
                      vals + v[2])
            want[key] = joined if len(kinds) == 1 else (joined[0], joined[1], None)  # widened: compared below
        else:
            want[key] = v
    got = as_lists(merged.stats)
    assert set(got) == set(want)
    for key, (rows, kind, vals) in want.items():
        assert got[key][0] == rows, key
        if vals is not None:
            assert got[key][1] == kind and got[key][2] == vals, key


@pytest.mark.parametrize("name", ["v100_ns_resolution_rank0", "mtia_inference_rank0"])
def test_lookup_of_one_key_and_of_some_rows_through_a_selection(name):
    path = KINETO_DIR / f"{name}.json.gz"
    part, eager = kineto.load(path), reference.load(path)
    keep = np.random.default_rng(5).random(part.n_events) < 0.5
    sel = take(part, keep)
    want = expected(eager, keep, 0)
    key = next(k for k in ("queue", "stream", "Input Dims") if k in want)
    rows = np.unique(np.random.default_rng(6).integers(0, sel.n_events, 400))
    got = sel.stats.lookup_rows([key, "no such arg"], rows)
    assert sel.stats.pending == 1 and "no such arg" not in got
    mask, values = got[key]
    ref = dict(zip(want[key][0], want[key][2]))
    assert [int(r) for r in rows[mask]] == [r for r in rows.tolist() if r in ref]
    if values.dtype.kind in "iuf":
        assert values.tolist() == [ref[r] for r in rows[mask].tolist()]
    else:
        assert [str(v) for v in values] == [str(ref[r]) for r in rows[mask].tolist()]
    c = sel.stats[key]  # one key decoded alone, mapped to its rows here
    assert (c.rows.tolist(), c.kind, c.values.tolist()) == want[key]
    assert sel.stats.pending == 1  # the others are still text


def test_a_key_decoded_in_one_trace_and_deferred_in_another_is_one_column():
    a, b = StatTable({"k": col([0, 2], [1, 2])}), StatTable({"x": col([0], [5])})
    b.defer(lambda: {"k": col([1], [3.5]), "y": col([0, 1], ["p", "q"])})
    out = StatTable()
    for table, m in ((a, RowMap.of(3)), (b, RowMap.of(2, base=3))):
        cols, parts = table.carried(m)
        for key, c in cols.items():
            out[key] = c if key not in out else StatColumn(np.r_[out[key].rows, c.rows], np.r_[out[key].values, c.values])
        out.adopt(parts)
    out.check(5)
    assert out.pending == 1 and out.loaded()["x"].rows.tolist() == [3]
    k = out["k"]  # materialised rows and deferred rows together, widened to float
    assert k.rows.tolist() == [0, 2, 4] and k.values.tolist() == [1.0, 2.0, 3.5]
    assert out["y"].rows.tolist() == [3, 4]
    assert b.pending == 1  # the source table is left as it was


def test_a_selection_drops_the_rows_it_does_not_keep_and_keys_left_empty():
    t = StatTable({"a": col([0, 1, 2, 3], [10, 11, 12, 13])})
    t.defer(lambda: {"b": col([1], ["only on row 1"]), "c": col([0, 3], [1.5, 2.5])})
    cols, parts = t.carried(RowMap.of(4, np.array([0, 2, 3]), base=10))
    out = StatTable(cols)
    out.adopt(parts)
    out.check(13)
    assert out["a"].rows.tolist() == [10, 11, 12] and out["a"].values.tolist() == [10, 12, 13]
    assert "b" not in out  # its one row was not kept: no empty column
    assert out["c"].rows.tolist() == [10, 12] and out["c"].values.tolist() == [1.5, 2.5]


def test_a_deferred_part_that_repeats_a_decoded_event_is_refused():
    t = StatTable({"k": col([0], [1])})
    t.adopt(StatTable({}).carried(RowMap.of(1))[1])  # nothing to adopt: no part
    assert t.pending == 0
    src = StatTable()
    src.defer(lambda: {"k": col([0, 1], [7, 8])})
    t.adopt(src.carried(RowMap.of(2))[1])  # a wrong map: its row 0 is t's row 0, which has "k"
    t.check(2)
    with pytest.raises(TraceSchemaError, match="already in the table"):
        t["k"]
    u = StatTable({"k": col([0], [1])})
    u.defer(lambda: {"k": col([1], [2])})  # a key in the table when deferred: never the part's
    u.check(2)
    assert u["k"].rows.tolist() == [0]
    with pytest.raises(TraceSchemaError, match="already in the table"):
        len(u)


def test_row_map_back_leaves_out_rows_it_does_not_cover():
    m = RowMap.of(5, np.array([1, 3, 4]), base=2)
    assert m.back(np.array([0, 2, 3, 4, 5, 9])).tolist() == [1, 3, 4]
    assert RowMap.of(3, base=4).back(np.array([3, 4, 6, 7])).tolist() == [0, 2]
