"""The copy findings (``analyze/copy_findings.py``): copies from or to pageable host
memory, and many small copies, on real traces checked against the files themselves
(Nsight's SQLite read by sqlite3, Kineto's JSON read by hand, nvprof's SQLite) and on
small built traces at the thresholds.

Data (tests/data, licences beside each): Nsight Systems SQLite of a saxpy run (pipit),
Kineto traces of AlexNet (HTA), of ResNet-50 (TensorBoard's plugin) and of NCCL
all-reduces on an A100, nvprof's output of BLINK+ NCCL runs (4 GPUs)."""

from __future__ import annotations

import gzip
import json
import lzma
import sqlite3
from pathlib import Path

import pytest

import polyprof
import polyprof.analyze as A
from polyprof.analyze import copy_findings as cf
from polyprof.analyze.copies import SMALL_BYTES
from polyprof.trace import TraceBuilder

DATA = Path(__file__).parent / "data"
NSYS = DATA / "nsys" / "saxpy_2022.sqlite"
ALEXNET = DATA / "peers" / "hta_critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
RESNET = DATA / "peers" / "tb_plugin" / "resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.xz"
RESNET4 = DATA / "peers" / "tb_plugin" / "resnet50_num_workers_4.worker0.1623212756351.pt.trace.json.xz"
A100 = DATA / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
NVVP = DATA / "peers" / "blinkplus_nccl" / "output.nvvp.xz"
US = 1000


def _found(trace: polyprof.Trace, rule: str) -> list[A.Finding]:
    return [f for f in A.findings(trace) if f.id == rule]


def _span(trace: polyprof.Trace, plane: str) -> int:
    tb = A.temporal_breakdown(trace).to_pandas()
    return int(tb[(tb["plane"] == plane) & (tb["track_id"] == -1)]["span_ns"].iloc[0])


def test_pageable_copies_on_nsights_saxpy():
    """Every copy of the saxpy run is from or to pageable memory (CUPTI's srcKind /
    dstKind 0): 15 copies, 3.9 GB, 14% of the device's span."""
    trace = polyprof.load(NSYS)
    with sqlite3.connect(NSYS) as db:
        n, nbytes, ns = db.execute("SELECT count(*), sum(bytes), sum(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                                   "WHERE srcKind = 0 OR dstKind = 0").fetchone()
        kinds = dict(db.execute("SELECT copyKind, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY copyKind"))
    assert (n, nbytes, ns) == (15, 3932160000, 284699600)
    (f,) = _found(trace, "pageable_copies")
    span = _span(trace, "/device:GPU:0")
    e = f.evidence
    assert (f.plane, f.severity) == ("/device:GPU:0", "high")
    assert (e["copies"], e["moved_bytes"], e["time_ns"], e["span_ns"]) == (n, nbytes, ns, span)
    assert e["share_pct"] == pytest.approx(100 * ns / span, abs=0.01) and e["share_pct"] > cf.PAGEABLE_HIGH_SHARE
    assert e["pct_of_copy_time"] == 100.0 and "pinned_gbps" not in e and e["all_copies_ns"] == ns
    assert e["by_kind"] == {"HtoD": kinds[1], "DtoH": kinds[2]}  # copyKind 1 HtoD, 2 DtoH
    assert e["gbps"] == pytest.approx(nbytes / ns, abs=1e-3)
    assert [(x["kind"], x["count"]) for x in f.events] == [("HtoD", 10), ("DtoH", 5)]
    assert "14% of the span" in f.title and "15 copies" in f.title
    # no torch in it: plain CUDA advice
    assert "cudaMallocHost" in f.suggestion and "pin_memory" not in f.suggestion


def test_pageable_copies_of_an_idle_device_are_not_a_finding(monkeypatch):
    """AlexNet's 16 HtoD copies are all pageable, but take 0.13% of a 43 s span on a
    device idle 99.8% of it: below the threshold; at a lower one, the rule sees them all."""
    trace = polyprof.load(ALEXNET)
    assert not _found(trace, "pageable_copies")
    want = [e for e in json.load(gzip.open(ALEXNET))["traceEvents"]
            if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]]
    threshold = cf.PAGEABLE_SPAN_SHARE
    monkeypatch.setattr(cf, "PAGEABLE_SPAN_SHARE", 0.1)
    (f,) = _found(polyprof.load(ALEXNET), "pageable_copies")
    assert f.evidence["copies"] == len(want) == 16
    assert f.evidence["moved_bytes"] == sum(e["args"]["bytes"] for e in want)
    share = f.evidence["share_pct"]
    assert share == pytest.approx(100 * f.evidence["time_ns"] / f.evidence["span_ns"], abs=0.01)
    assert 0.1 < share < threshold and f.evidence["pct_of_copy_time"] > 99
    assert f.severity == "medium"


def test_pageable_copies_in_a_torch_trace_suggest_pinned_memory():
    """TensorBoard's ResNet-50 samples: 12 pageable HtoD copies each, 2.2% of the span with
    four DataLoader workers (a finding, in torch's words: pin_memory, non_blocking), 1.1%
    with none (under the 2% threshold)."""
    assert not _found(polyprof.load(RESNET), "pageable_copies")
    trace = polyprof.load(RESNET4)
    (f,) = _found(trace, "pageable_copies")
    events = [e for e in json.loads(lzma.open(RESNET4).read())["traceEvents"]
              if e.get("cat") == "Memcpy" and "Pageable" in e["name"]]
    e = f.evidence
    assert e["copies"] == len(events) == 12 and f.severity == "medium"
    assert e["time_ns"] == sum(x["dur"] for x in events) * US == 18_959_000
    assert e["moved_bytes"] == sum(x["args"]["bytes"] for x in events)
    assert e["share_pct"] == pytest.approx(100 * e["time_ns"] / _span(trace, "/device:GPU:0"), abs=0.01)
    assert "pin_memory=True" in f.suggestion and "non_blocking=True" in f.suggestion


def _loop(copies: list[tuple[str, int, int, int]], steps: int = 5) -> polyprof.Trace:
    """A torch-shaped loop: per 10 ms step, the ``copies`` (name, bytes, µs, how many)
    one after another on stream 7, each from an ``aten::copy_``, then a 5 ms kernel."""
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
    s7 = b.track(b.plane("/device:GPU:0", "device", vendor="nvidia", index=0), "stream 7", "stream", tid=7)
    corr = 1
    for k in range(steps):
        o = k * 10_000 * US
        b.event(th, f"ProfilerStep#{k}", o, 10_000 * US, "user_annotation")
        t = o + 100 * US
        for name, nbytes, us, n in copies:
            for _ in range(n):
                b.event(th, "aten::copy_", t, 8 * US, "cpu_op")
                b.event(th, "cudaMemcpyAsync", t + US, 6 * US, "cuda_runtime", correlation_id=corr)
                b.event(s7, name, t + 5 * US, us * US, "gpu_memcpy", correlation_id=corr, stream=7, bytes=nbytes)
                corr += 1
                t += (us + 10) * US
        b.event(th, "cudaLaunchKernel", o + 4000 * US, 10 * US, "cuda_runtime", correlation_id=corr)
        b.event(s7, "gemm", o + 4020 * US, 5000 * US, "kernel", correlation_id=corr, stream=7)
        corr += 1
    return b.build()


PINNED, PAGEABLE = "Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pageable -> Device)"


def _small_copies(copies: int = 100, nbytes: int = 4096, copy_us: int = 4) -> polyprof.Trace:
    return _loop([(PINNED, nbytes, copy_us, copies)])


def test_pageable_against_pinned_copies_of_the_same_kind():
    """16 MiB per step from pageable memory in 1.6 ms (10 GB/s), 16 MiB pinned in 0.8 ms
    (21 GB/s): 16% of the span, 67% of the copy time."""
    mib16 = 16 << 20
    (f,) = _found(_loop([(PAGEABLE, mib16, 1600, 1), (PINNED, mib16, 800, 1)]), "pageable_copies")
    e = f.evidence
    assert (e["copies"], e["time_ns"], e["moved_bytes"], e["all_copies_ns"]) == (5, 5 * 1600 * US, 5 * mib16,
                                                                                 5 * 2400 * US)
    assert e["gbps"] == pytest.approx(mib16 / 1.6e6, abs=1e-3) and e["pinned_gbps"] == pytest.approx(mib16 / 8e5,
                                                                                                       abs=1e-3)
    assert e["pct_of_copy_time"] == pytest.approx(100 * 1600 / 2400, abs=0.01) and f.severity == "high"
    assert "pin_memory=True" in f.suggestion  # aten:: ops: a torch program
    # 3% of the span, but a tenth of the copy time: the pinned copies are the point, not these
    assert not _found(_loop([(PAGEABLE, mib16, 300, 1), (PINNED, 10 * mib16, 3000, 1)]), "pageable_copies")


def test_many_small_copies_fire_with_their_numbers():
    trace = _small_copies()
    (f,) = _found(trace, "small_copies")
    span = _span(trace, "/device:GPU:0")
    e = f.evidence
    assert (e["copies"], e["moved_bytes"], e["time_ns"], e["mean_bytes"]) == (500, 500 * 4096, 500 * 4 * US, 4096)
    assert e["gbps"] == pytest.approx(4096 / 4000) and "large_gbps" not in e and e["all_copies"] == 500
    assert e["share_pct"] == pytest.approx(100 * 500 * 4 * US / span, abs=0.01)
    assert e["by_kind"] == {"HtoD": 500} and f.severity == "medium"
    assert f.events == [{"name": "Memcpy HtoD (Pinned -> Device)", "kind": "HtoD", "count": 500,
                         "total_ns": 2_000_000, "total_bytes": 2_048_000, "mean_bytes": 4096, "gbps": 1.024}]
    assert "500 copies under 1 MiB" in f.title and "torch.cat" in f.suggestion
    assert not _found(trace, "pageable_copies")  # pinned


@pytest.mark.parametrize("why, kwargs", [
    ("not small", {"nbytes": SMALL_BYTES, "copy_us": 40}),
    ("fast enough", {"nbytes": 512 << 10, "copy_us": 40}),  # 13 GB/s
    ("too few", {"copies": 10, "copy_us": 40}),  # 50 copies, 2% of the span
    ("too short", {"copy_us": 1}),  # 0.5% of the span
])
def test_small_copies_stay_quiet_past_their_thresholds(why, kwargs):
    assert not _found(_small_copies(**kwargs), "small_copies"), why


def test_small_copies_on_real_traces_are_below_the_share(monkeypatch, tmp_path):
    """A100 NCCL (Kineto): 873 DtoD copies under 1 MiB, 0.2% of the span at 13 GB/s;
    nvprof's BLINK+ run: 38 tiny HtoD copies per GPU in an 11 s span. Neither is a
    finding; with the thresholds lowered the rule sees what the files hold."""
    nvvp = tmp_path / "output.nvvp"
    nvvp.write_bytes(lzma.open(NVVP).read())
    for path in (A100, nvvp):
        assert not _found(polyprof.load(path), "small_copies"), path
    want = [e for e in json.load(gzip.open(A100))["traceEvents"]
            if e.get("cat") == "gpu_memcpy" and "DtoD" in e["name"] and 0 <= e["args"]["bytes"] < SMALL_BYTES]
    threshold = cf.SMALL_MAX_GBPS
    monkeypatch.setattr(cf, "SMALL_SPAN_SHARE", 0.1)
    monkeypatch.setattr(cf, "SMALL_MAX_GBPS", 100.0)
    (f,) = _found(polyprof.load(A100), "small_copies")
    e = f.evidence
    assert e["copies"] == len(want) == 873
    assert e["moved_bytes"] == sum(x["args"]["bytes"] for x in want)
    assert e["gbps"] == pytest.approx(e["moved_bytes"] / e["time_ns"], abs=1e-3)
    assert e["share_pct"] < 0.5 and e["gbps"] > threshold  # a few larger ones carry the bytes
    monkeypatch.setattr(cf, "SMALL_SPAN_SHARE", 0.0)
    monkeypatch.setattr(cf, "SMALL_MIN_COUNT", 10)
    (f,) = _found(polyprof.load(nvvp), "small_copies")
    with sqlite3.connect(nvvp) as db:  # copyKind 1: HtoD
        n, nbytes = db.execute("SELECT count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE deviceId = 0 "
                               "AND copyKind = 1").fetchone()
    assert (f.plane, f.evidence["copies"], f.evidence["moved_bytes"]) == ("/device:GPU:0", n, nbytes)
    assert (n, nbytes) == (38, 6992)
    assert f.evidence["also_on"] == ["/device:GPU:1", "/device:GPU:2", "/device:GPU:3"]
