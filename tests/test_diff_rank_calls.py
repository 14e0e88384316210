"""A job whose rank 1 alone calls an op more often: every step of each rank calls it the
same number of times, so the program changed. Before, ``steady_calls`` asked every step
of the side alike, across ranks: rank 0's count and rank 1's differ, so no row of such a
job was steady, and a 2-rank DDP run with 10 more matmuls a step on rank 1 read its
``aten::mm`` (90 -> 180 calls) "within the noise", no "B runs other work" line."""

from __future__ import annotations

import numpy as np

from polyprof.analyze.diff import diff
from polyprof.trace import TraceBuilder


def _rank(rng: np.random.Generator, calls: int, steps: int = 12):
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=100)
    th = b.track(host, "main", "thread", tid=1)
    gpu = b.plane("/device:GPU:0", "device", vendor="nvidia", index=0)
    s7 = b.track(gpu, "stream 7", "stream", tid=7)
    for k in range(steps):
        o = k * 10_000_000
        b.event(th, f"ProfilerStep#{k}", o, 9_000_000, "user_annotation")
        t = o + 1000
        for i in range(calls):
            d = int(rng.lognormal(0.0, 0.02) * 300_000)
            b.event(s7, "gemm" if i else "norm", t, d, "kernel", stream=7, device=0)
            t += d + 500
    return b.build()


def test_a_count_changed_on_one_rank_is_the_programs_change():
    rng = np.random.default_rng(3)
    a = [_rank(rng, 4), _rank(rng, 4)]
    b = [_rank(rng, 4), _rank(rng, 8)]  # rank 1: 4 more gemm calls in every step
    d = diff(a, b)
    steady = dict(zip(d.tables["kernels"]["name"].tolist(), d.tables["kernels"]["steady_calls"].tolist()))
    assert steady == {"gemm": True, "norm": True}, steady
    text = " ".join(d.verdict)
    assert "B runs other work: kernel gemm" in text and "calls per step" in text, text
    same = diff(a, [_rank(rng, 4), _rank(rng, 4)])
    assert "B runs other work" not in " ".join(same.verdict)
