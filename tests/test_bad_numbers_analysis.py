"""Numbers beyond int64 where the analyses read integers, from inputs the fuzzers made
(scripts/fuzz_cli.py): one row loses its value, the command does not stop."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import polyprof
from fuzz import seeds



def test_a_correlation_beyond_int64_in_the_summary(tmp_path: Path) -> None:
    """A kernel's "correlation" of 10**30 (found by scripts/fuzz_cli.py): the summary's
    critical path stopped with "internal error (OverflowError)". Now that row has no
    correlation and the others keep theirs."""
    import json

    from polyprof.analyze import depgraph_context
    from polyprof.cli import main

    doc = json.loads(dict(seeds.load_seeds()["kineto"])["cuda_event_sync_multistream.json"])
    evs = [e for e in doc["traceEvents"] if isinstance(e.get("args"), dict) and "correlation" in e["args"]]
    evs[0]["args"]["correlation"] = 10**30
    path = tmp_path / "big_correlation.json"
    path.write_text(json.dumps(doc))
    trace = polyprof.load(path)
    col = trace.stat("correlation_id")
    assert col is not None
    dense = col.dense(trace.n_events, -1)
    got = depgraph_context._int_stat(trace, "correlation_id")
    big = [i for i, v in enumerate(dense) if int(v) == 10**30]  # the column is kept as texts then
    assert big and (got[big] == -1).all()
    rest = np.array([int(v) != 10**30 for v in dense])
    assert (got[rest] == np.array([int(v) for v in dense[rest]], np.int64)).all() and (got[rest] >= 0).any()
    assert main(["summary", str(path)]) == 0


def test_op_costs_where_no_costed_row_has_shapes(tmp_path: Path) -> None:
    """The only event with "Input Dims" is not an op (its category an int: found by
    scripts/fuzz.py, seed 31, input 19100): once the stats were decoded, op_costs found
    the column but no row of it among the ops and took the max of an empty array."""
    import json

    from polyprof.report import tables

    doc = json.loads(dict(seeds.load_seeds()["kineto"])["cpu_only_rank34.json"])
    shaped = [e for e in doc["traceEvents"] if isinstance(e.get("args"), dict) and "Input Dims" in e["args"]]
    assert len(shaped) > 1
    for e in shaped[1:]:  # the other ops keep their category, without shapes
        del e["args"]["Input Dims"]
    shaped[0]["cat"] = 2147483648
    path = tmp_path / "shapes_off_ops.json"
    path.write_text(json.dumps(doc))
    trace = polyprof.load(path)
    for k in trace.stats:  # decoded, as the fuzz runner's differential check leaves them
        assert len(trace.stats[k].values) == len(trace.stats[k].rows)
    report = tables.build(trace)
    assert report is not None
