"""polyprof diff's device activity rows: the table's order where nothing changed (the
largest rows, not the first names), and what the verdict calls copies and memsets.

Real traces (tests/data/traces/kineto, HTA's test data: see LICENSE-HTA there) and
copies of them edited at run time with the stdlib (copies twice as long, every memset
run twice): the changes are known, no GPU is needed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.diff import diff
from polyprof.analyze.frames import column

KINETO = Path(__file__).parent / "data" / "traces" / "kineto"


def _edited(name: str, out: Path) -> Path:
    """``name``'s trace with every copy twice as long and every memset run twice."""
    with gzip.open(KINETO / name, "rt") as f:
        doc = json.load(f)
    events = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy":
            e = {**e, "dur": round(e["dur"] * 2, 3)}  # Kineto writes ns: 3 decimals
        events.append(e)
        if e.get("ph") == "X" and e.get("cat") == "gpu_memset":
            events.append(dict(e))
    with gzip.open(out, "wt") as f:
        json.dump({**doc, "traceEvents": events}, f)
    return out


def test_unchanged_rows_largest_first() -> None:
    """A trace against itself: no row changed, so the rows come largest first (the top of
    the terminal's table is the time), ties by name; the NCCL kernel, 31% of the device
    time, is first, not after every kernel whose name sorts before it."""
    t = polyprof.load(KINETO / "a100_nccl_rank0.json.gz")
    d = diff(t, t)
    k = d.tables["kernels"]
    assert (column(k, "delta_total_ns") == 0).all() and not any(s is True for s in column(k, "significant").tolist())
    total = column(k, "total_ns_a").astype(np.float64)
    names = [str(n) for n in column(k, "name").tolist()]
    assert len(k) > 15 and names != sorted(names)
    assert list(zip((-total).tolist(), names)) == sorted(zip((-total).tolist(), names))
    assert names[0] == "nccl AllReduce kernel" and total[0] > 0.3 * total.sum()
    for table in ("ops", "sections"):
        tot = column(d.tables[table], "total_ns_a").astype(np.float64)
        assert (np.diff(tot) <= 0).all(), table


def test_verdict_calls_copies_and_memsets_so(tmp_path: Path) -> None:
    """Copies slower and memsets run twice (V100 trace, 4 steps a side): the verdict's
    changed rows and its "runs other work" line name them as copies and memsets."""
    a = KINETO / "v100_ns_resolution_rank0.json.gz"
    d = diff(polyprof.load(a), polyprof.load(_edited(a.name, tmp_path / "b.json.gz")))
    text = "\n".join(d.verdict)
    slower = next(line for line in d.verdict if line.startswith("Slower in B"))
    assert "copy Memcpy DtoD" in slower and "memset Memset" in slower, slower
    other = next(line for line in d.verdict if line.startswith("B runs other work"))
    assert "memset Memset 29 -> 58 calls per step" in other, other
    assert "kernel Mem" not in text, text
    assert {c["kind"] for c in d.changes} == {"memcpy", "memset"}


def test_untested_largest_differences_name_copies(tmp_path: Path) -> None:
    """A trace without steps cannot be tested: its largest differences name a copy a copy."""
    a = KINETO / "a100_alexnet_small.json.gz"
    d = diff(polyprof.load(a), polyprof.load(_edited(a.name, tmp_path / "b.json.gz")))
    line = next(line for line in d.verdict if line.startswith("Largest differences per trace (not tested)"))
    assert "copy Memcpy HtoD" in line and "kernel Mem" not in line, line
