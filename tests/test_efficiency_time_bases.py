"""What the efficiency findings measure their shares and losses against.

- ``fusable_chain``: a chain's device time as a share of the devices' busy time. Before,
  the share was of the device time of the costed host ops alone (graph replays and ops
  without shapes left out): on TraceLens's vLLM full-graph decode a 47.6 µs chain was
  "14.6% of op device time" (medium) of a device busy 10.7 ms (0.44%); on its SGLang
  decode a 14 µs chain was 49.1% and "high".
- A CUPTI range-profiler trace (HTA's ``cupti_profiler`` test trace, here
  ``a100_cupti_counters``): its ranges last the profiler's replay window (each of the 77
  lasts 121.431 ms), not the kernels' run time. Before, the low-MFU finding ranked them
  as time lost ("vectorized_elementwise_kernel ... time=1.7 s ... lost=1.7 s") and the
  MFU line did not say its time was the profiler's.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze import efficiency_findings as E
from polyprof.analyze import efficiency as EF
from polyprof.analyze.efficiency import op_efficiency

DATA = Path(__file__).parent / "data"
VLLM = DATA / "peers" / "tracelens" / "vllm_decode_full_graph_execution.json.gz"
BERT = DATA / "peers" / "tracelens_perf" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
CUPTI = DATA / "traces" / "kineto" / "a100_cupti_counters.json.gz"


def _busy_us(path: Path) -> float:
    """The devices' busy time read from the file itself: per device (pid), the union of its
    kernels, copies and fills, summed."""
    spans = defaultdict(list)
    for e in json.load(gzip.open(path))["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            spans[e["pid"]].append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    total = 0.0
    for iv in spans.values():
        iv.sort()
        a, b = iv[0]
        for s, e in iv[1:]:
            if s > b:
                total, a, b = total + b - a, s, e
            else:
                b = max(b, e)
        total += b - a
    return total


def _chain(path: Path, threshold: float, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(E, "CHAIN_SHARE", threshold)
    found = E._fusable_chains(polyprof.load(path))
    return found[0] if found else None


def test_a_chains_share_is_of_the_devices_busy_time(monkeypatch: pytest.MonkeyPatch) -> None:
    busy = _busy_us(VLLM)
    assert busy == pytest.approx(10_717.7, abs=0.1)
    assert not any(f.id == "fusable_chain" for f in polyprof.analyze.findings(polyprof.load(VLLM)))  # 0.44% < 5%
    got = _chain(VLLM, 0.0, monkeypatch)
    assert got is not None and got.evidence["device_ns"] == pytest.approx(47_630)
    assert got.evidence["busy_ns"] == pytest.approx(busy * 1e3, rel=1e-5)  # (polyprof rounds to ns as HTA does)
    assert got.evidence["share_pct"] == pytest.approx(100 * 47.63 / busy, rel=1e-4)  # 0.444%
    assert "of the device's busy time" in got.title
    assert got.events[0]["share_pct"] == pytest.approx(0.44)


def test_a_chains_severity_follows_its_share_of_busy_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.444% of busy time: medium at a threshold of 0.2% (high from 0.8%), high at 0.1%.
    Before, at 0.2% it was high (14.6% >= 4 x 0.2%)."""
    assert _chain(VLLM, 0.2, monkeypatch).severity == "medium"
    assert _chain(VLLM, 0.1, monkeypatch).severity == "high"
    assert _chain(VLLM, 0.5, monkeypatch) is None


def test_a_chain_worth_fusing_still_fires() -> None:
    """TraceLens's H100 BERT: the embeddings' chain is 16.5 µs of a device busy 309 µs."""
    chain = next(f for f in polyprof.analyze.findings(polyprof.load(BERT)) if f.id == "fusable_chain")
    assert chain.evidence["share_pct"] == pytest.approx(100 * chain.evidence["device_ns"] / (_busy_us(BERT) * 1e3),
                                                        rel=1e-4)
    assert 5.0 <= chain.evidence["share_pct"] < 20.0 and chain.severity == "medium"


def test_range_profiler_time_is_not_lost_kernel_time() -> None:
    trace = polyprof.load(CUPTI)
    ranges = [e for e in json.load(gzip.open(CUPTI))["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    assert len(ranges) == 77 and {e["dur"] for e in ranges} == {121431}  # the replay window, each
    assert EF.range_profiled(trace)
    assert not any(f.id == "low_mfu" for f in polyprof.analyze.findings(trace))
    assert E._counters_only(op_efficiency(trace))  # what a store's rank, read from its tables, goes by
    bert = polyprof.load(BERT)
    assert not EF.range_profiled(bert) and not E._counters_only(op_efficiency(bert))
    assert any(f.id == "low_mfu" for f in polyprof.analyze.findings(bert))  # kernel-timed: still said


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


def test_the_mfu_line_says_its_time_is_the_range_profilers() -> None:
    r = _cli("summary", str(CUPTI))
    assert r.returncode == 0, r.stderr[-2000:]
    text = " ".join(r.stdout.split())
    line = text[text.index("MFU "):]
    assert line.startswith("MFU 0.0347% (fp32): 80.2 GFLOP in 11.8 s")  # the counters' FLOPs, as before
    assert "timed under CUPTI's range profiler" in line and "not the program's" in line
    assert "Model FLOPs utilisation" not in r.stdout
    kernels = _cli("summary", str(BERT))
    assert kernels.returncode == 0 and "range profiler" not in kernels.stdout
