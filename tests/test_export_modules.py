"""The Chrome and Kineto JSON exports of an XSpace keep each XLA op's module.

XLA names ops uniquely within a module only, so polyprof names an op of a compiled
module ``module/op`` (``analyze.common.qualified_names``), from the module stats it
finds loaded (``keys.MODULE_STATS``). Both exports write those stats in each event's
args (``hlo_module``, ``module``); the JSON reader defers args it does not type at load,
so an export read back named every op by its bare name: ``jit_augment``'s and
``jit_train_step``'s ``ynn_fusion`` became one row. The reader now types the module
args at load, as the XSpace reader does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.events import event_stats
from polyprof.trace import keys
from polyprof.trace.core import Trace

TWO_JITS = Path(__file__).parent / "data" / "traces" / "jax_cpu_two_jits" / "run_fast.xplane.pb.gz"
SUFFIX = {"chrome": ".json", "kineto": ".pt.trace.json"}


def _rows(trace: Trace) -> dict[tuple[str, str, str], tuple[int, int]]:
    """event_stats' rows: (category, name, module) -> (count, total ns)."""
    return {(r["category"], r["name"], r["module"]): (r["count"], r["total_ns"])
            for r in event_stats(trace).to_dicts()}


@pytest.fixture(scope="module")
def source() -> Trace:
    return polyprof.load(TWO_JITS)


@pytest.mark.parametrize("fmt", ["chrome", "kineto"])
def test_export_names_xla_ops_by_module(tmp_path: Path, source: Trace, fmt: str) -> None:
    src = _rows(source)
    ops = {k for k in src if k[0] == "xla_op"}
    # what the file holds: both modules have a ynn_fusion, two different ops
    assert {("xla_op", "jit_augment/ynn_fusion", "jit_augment"),
            ("xla_op", "jit_train_step/ynn_fusion", "jit_train_step")} <= ops
    out = tmp_path / f"x{SUFFIX[fmt]}"
    polyprof.export(source, out, format=fmt)
    doc = json.loads(out.read_text())
    fusions = [e for e in doc["traceEvents"] if e.get("name") == "ynn_fusion" and e.get("ph") == "X"]
    assert {e["args"][keys.HLO_MODULE] for e in fusions} == {"jit_augment", "jit_train_step"}
    back = polyprof.load(out)
    got = _rows(back)
    assert {k: v for k, v in got.items() if k[0] == "xla_op"} == {k: src[k] for k in ops}
    assert not any(k[1] == "ynn_fusion" for k in got)  # no op by its bare name
    # the module args are typed at load: the analyses read the loaded columns alone
    assert keys.HLO_MODULE in back.stats.loaded()


def test_json_without_module_args_types_none_at_load(tmp_path: Path) -> None:
    """A trace whose args name no module (a torch trace) decodes no deferred arg for them."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0,
         "args": {"External id": 3, "Input Dims": [[2, 2], [2, 2]]}}]}))
    t = polyprof.load(path)
    loaded = t.stats.loaded()
    assert not set(keys.MODULE_STATS) & set(loaded)
    assert "Input Dims" not in loaded and t.stats.pending  # still deferred
