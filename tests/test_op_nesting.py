"""op_stats from one nesting of the ops and runtime calls (``ops._one_nesting``): the
same table as the ops' own nesting (``merged_into``) and ``child_time`` of the kept ops
and runtime calls give, on real traces (merged ``aten::`` chains among them) and on
random nestings with chains of one name, zero-length spans, identical spans, spans
outlasting their parent and runtime calls holding ops (both left to the two nestings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import ops as O
from polyprof.derive.intervals import child_time
from polyprof.trace.builder import TraceBuilder

DATA = Path(__file__).parent / "data" / "traces"


def _both(trace: polyprof.Trace, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object, list[bool]]:
    used: list[bool] = []
    real = O._one_nesting

    def spy(*a: np.ndarray) -> object:
        out = real(*a)
        used.append(out is not None)
        return out

    monkeypatch.setattr(O, "_one_nesting", spy)
    one = O.op_stats(trace)
    monkeypatch.setattr(O, "_one_nesting", lambda *a: None)
    two = O.op_stats(trace)
    monkeypatch.setattr(O, "_one_nesting", real)
    return one, two, used


def _same(a: object, b: object) -> None:
    assert list(a.columns) == list(b.columns)  # type: ignore[attr-defined]
    for c in a.columns:  # type: ignore[attr-defined]
        x, y = np.asarray(a[c]), np.asarray(b[c])  # type: ignore[index]
        assert x.dtype == y.dtype, c
        np.testing.assert_array_equal(x, y, err_msg=c)


@pytest.mark.parametrize("path", [DATA / "kineto" / "v100_ns_resolution_rank0.json.gz",
                                  DATA / "kineto" / "a100_nccl_rank0.json.gz",
                                  DATA / "xspace" / "tpu_inference_2.xplane.pb"], ids=lambda p: p.name.split(".")[0])
def test_real_traces_one_nesting_equals_two(path, monkeypatch):
    one, two, used = _both(polyprof.load(path), monkeypatch)
    assert used == [True]
    assert len(one) > 50
    _same(one, two)


def _spans(rng: np.random.Generator, t0: int, t1: int, depth: int, out: list[tuple[int, int, str, str]]) -> None:
    t = t0
    while t < t1 and depth < 5:
        if t == t0 and rng.random() < 0.2:  # an only child as long as its parent
            s, e = t0, t1
        else:
            s = t + int(rng.choice([0, 0, 2, 7]))
            e = min(t1, s + int(rng.choice([0, 1, 5, 20, 60])))
        if s > e or s >= t1:
            break
        k = int(rng.integers(4))
        name, cat = [("aten::div", "cpu_op"), ("aten::add", "cpu_op"), ("aten::div", "cpu_op"),
                     ("cudaLaunchKernel", "cuda_runtime")][k]
        out.append((s, e - s, name, cat))
        if k != 3 and e > s and rng.random() < 0.7:
            _spans(rng, s, e, depth + 1, out)
        if (s, e) == (t0, t1):
            break
        t = max(e, t + 1)


def _trace(seed: int, outlast: bool, op_in_call: bool) -> polyprof.Trace:
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    plane = b.plane("/host:CPU", "host")
    for tid in range(1 + seed % 3):
        track = b.track(plane, f"thread {tid}", "thread", tid=tid + 1)
        spans: list[tuple[int, int, str, str]] = []
        t = 0
        for _ in range(int(rng.integers(1, 5))):
            e = t + int(rng.integers(1, 100))
            spans.append((t, e - t, "aten::div", "cpu_op"))
            _spans(rng, t, e, 1, spans)
            t = e + int(rng.choice([0, 3]))
        if outlast and tid == 0:
            spans.append((spans[0][0] + 1, spans[0][1] + 5, "aten::add", "cpu_op"))
        if op_in_call and tid == 0:
            spans.append((t + 10, 50, "cudaMemcpy", "cuda_runtime"))
            spans.append((t + 20, 10, "aten::add", "cpu_op"))
        for s, d, name, cat in spans:
            b.event(track, name, s, d, cat)
    return b.build()


@pytest.mark.parametrize("seed", range(40))
def test_random_nestings_one_equals_two(seed, monkeypatch):
    outlast, op_in_call = seed % 5 == 2, seed % 7 == 3
    one, two, used = _both(_trace(seed, outlast, op_in_call), monkeypatch)
    _same(one, two)
    assert used == [not (outlast or op_in_call)]


def test_chains_merge_and_children_move_up():
    """aten::div > aten::div > (aten::add, cudaLaunchKernel): the inner div is merged; the
    outer one's children are then the add and the call (child_time of what is kept)."""
    b = TraceBuilder()
    track = b.track(b.plane("/host:CPU", "host"), "main", "thread", tid=1)
    for name, cat, s, d in [("aten::div", "cpu_op", 0, 100), ("aten::div", "cpu_op", 10, 80),
                            ("aten::add", "cpu_op", 20, 30), ("cudaLaunchKernel", "cuda_runtime", 60, 5)]:
        b.event(track, name, s, d, cat)
    t = b.build()
    ops, rt = np.array([0, 1, 2]), np.array([3])
    into, children = O._one_nesting(t, ops, rt)
    np.testing.assert_array_equal(into, [0, 0, 2])
    np.testing.assert_array_equal(children[[0, 2]], [35, 0])
    keep = np.array([0, 2, 3])
    st, du = np.array([0, 10, 20, 60]), np.array([100, 80, 30, 5])
    np.testing.assert_array_equal(child_time(np.zeros(3, np.int64), st[keep], (st + du)[keep])[:2], [35, 0])
    stats = O.op_stats(t)
    by_name = dict(zip(stats["name"], stats["self_ns"]))
    assert by_name == {"aten::div": 65, "aten::add": 30}
