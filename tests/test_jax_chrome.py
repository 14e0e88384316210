"""JAX's own Chrome export of a CPU profile reads as its XSpace does
(formats/kineto/jax_chrome.py): the same steps, framework ops, XLA ops and critical
path from ``*.trace.json.gz`` as from the ``.xplane.pb`` beside it (tests/data/jax_cpu,
one profile of a jitted program sharded over four host devices). Before, the JSON's
slices had no category: no XLA op, no runtime call, a step annotation counted as an op,
and a warning for JAX's trailing ``{}``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import polyprof
from polyprof.cli import main

DATA = Path(__file__).parent / "data" / "jax_cpu"
JSON, XSPACE = DATA / "jax_cpu_4dev.trace.json.gz", DATA / "jax_cpu_4dev.xplane.pb"
JOB = Path(__file__).parent / "data" / "traces" / "jax_cpu_job"


_SEEN: dict[Path, dict] = {}


def _tables(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    if path not in _SEEN:
        capsys.readouterr()
        assert main(["summary", "--json", str(path)]) == 0
        _SEEN[path] = json.loads(capsys.readouterr().out)["tables"]
    return _SEEN[path]


#: a second profile's two files (tests/data/jax_cpu/README.md: an MLP's training steps)
TRAIN_JSON, TRAIN_XSPACE = DATA / "jax_train.trace.json.gz", DATA / "jax_train.xplane.pb.gz"
#: (JSON, XSpace, table): the critical path is compared on the first profile only; on the
#: second the XSpace's graph has the HLO's data dependencies, which the JSON does not
#: carry, and its path is 1.5% longer (20.66 against 20.36 ms in step 1)
#: event_stats: the ``end: <op>`` marks named by their op's module in both (the JSON has
#: no context stats: the mark found its op on another thread of its process, as XLA's CPU
#: runtime writes it on the worker thread that finished the op; split 1 + 4 rows before)
PAIRS = [(JSON, XSPACE, t) for t in ("op_stats", "step_stats", "critical_path", "section_stats", "event_stats")]
PAIRS += [(TRAIN_JSON, TRAIN_XSPACE, t) for t in ("op_stats", "step_stats", "event_stats")]
PAIRS += [(JOB / "jax_own" / "rank0.trace.json.gz", JOB / "rank0.xplane.pb.gz", "event_stats")]


@pytest.mark.parametrize(("json_file", "xspace", "table"), PAIRS, ids=lambda v: getattr(v, "name", v))
def test_json_reads_as_its_xspace(capsys: pytest.CaptureFixture[str], json_file: Path, xspace: Path,
                                  table: str) -> None:
    js, xs = _tables(json_file, capsys), _tables(xspace, capsys)
    drop = {"plane", "track"}  # (the XSpace has a plane per device; JAX's JSON one process)
    rows = [{k: v for k, v in r.items() if k not in drop} for r in js[table]["records"]]
    want = [{k: v for k, v in r.items() if k not in drop} for r in xs[table]["records"]]
    assert rows == want
    assert js[table]["rows"] > 0 or table == "section_stats"


def test_xla_ops_and_runtime_calls_have_their_categories() -> None:
    t = polyprof.load(JSON)
    df = t.to_pandas()
    cats = df.groupby(df.category.astype(str)).size().to_dict()
    assert cats["xla_op"] == 40  # the jitted module's ops on the CPU backend (its "device" work)
    assert cats["step"] == 5 and cats["python_function"] > 0 and cats["xla_runtime"] > 0
    assert set(df[df.category.astype(str) == "xla_op"].name.astype(str)) == {"ynn_fusion", "all-reduce"}
    assert not t.metadata.get("warnings")  # (the trailing {} is no event)
