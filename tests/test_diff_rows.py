"""The diff's row order and its verdict's words for what its tables hold."""

from __future__ import annotations

import gzip
import json

import numpy as np

import polyprof
from polyprof.analyze.diff import diff


def test_rows_not_called_changed_come_largest_first_with_a_jittered_copy(traces_dir, tmp_path):
    # B: A's trace with every device activity's duration jittered by +-2% (a re-run of
    # the same program): before, |delta total| came first and put 2.7% rows before the
    # NCCL kernel of 30.6%
    src = traces_dir / "kineto" / "a100_nccl_rank0.json.gz"
    doc = json.load(gzip.open(src, "rt"))
    rng = np.random.default_rng(1)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["dur"] = round(e["dur"] * rng.uniform(0.98, 1.02), 3)
    (tmp_path / "b.json").write_text(json.dumps(doc))
    d = diff(polyprof.load(src), polyprof.load(tmp_path / "b.json"))
    for df in d.tables.values():
        sig = np.array([s is True for s in df["significant"].tolist()], bool)
        k = int(sig.sum())
        assert not sig[k:].any()  # significant rows first
        size = np.maximum(df["total_ns_a"], df["total_ns_b"])[k:].astype(float)
        assert (np.diff(size) <= 0).all()
    kernels = d.tables["kernels"]
    top = str(kernels["name"][int(sum(s is True for s in kernels["significant"].tolist()))])
    assert "nccl" in top.lower()


def test_the_verdict_counts_what_the_tables_hold(traces_dir):
    mlp = traces_dir / "mlp_cpu"
    d = diff(polyprof.load(mlp / "base_a.pt.trace.json.gz"), polyprof.load(mlp / "base_b_stalls.pt.trace.json.gz"))
    assert len(d.tables["kernels"]) == 0
    line = next(x for x in d.verdict if x.startswith("Unchanged:"))
    assert line.startswith("Unchanged: 45 of 45 ops and sections;"), line
