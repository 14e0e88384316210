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

    from polyprof.analyze import depgraph
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
    got = depgraph._int_stat(trace, "correlation_id")
    big = [i for i, v in enumerate(dense) if int(v) == 10**30]  # the column is kept as texts then
    assert big and (got[big] == -1).all()
    rest = np.array([int(v) != 10**30 for v in dense])
    assert (got[rest] == np.array([int(v) for v in dense[rest]], np.int64)).all() and (got[rest] >= 0).any()
    assert main(["summary", str(path)]) == 0
