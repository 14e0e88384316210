"""An empty object in ``traceEvents``: JAX's and TensorFlow's Chrome traces end with
``{}`` (jax.profiler.trace(create_perfetto_trace=True) writes ``*.trace.json.gz`` so).
It is no event and no data lost, so it is skipped without the "events not imported"
warning, as Perfetto's importer skips it; an object with keys but no phase still warns."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polyprof

EVENT = {"ph": "X", "name": "ynn_fusion", "pid": 701, "tid": 7, "ts": 746.11, "dur": 18.5,
         "args": {"hlo_module": "jit_f", "hlo_op": "ynn_fusion"}}


def _write(path: Path, events: list[dict]) -> Path:
    with gzip.open(path, "wt") as f:
        json.dump({"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": events}, f)
    return path


def test_trailing_empty_object_is_no_warning(tmp_path: Path) -> None:
    t = polyprof.load(_write(tmp_path / "vm.trace.json.gz", [EVENT, EVENT | {"ts": 800}, {}]))
    assert t.n_events == 2
    assert not any("not imported" in w for w in t.metadata.get("warnings", []))


def test_object_without_phase_still_warns(tmp_path: Path) -> None:
    t = polyprof.load(_write(tmp_path / "odd.trace.json.gz", [EVENT, {}, {"name": "odd"}]))
    assert t.n_events == 1
    assert t.metadata["warnings"] == ["kineto: events not imported: 1 x ph=None"]
