"""Kineto/Chrome JSON: a thread's tid written as a string and as an int is one track, and
flow endpoints are bound by a linear pass (checked against a brute-force search)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import polyprof
from polyprof.formats.kineto.codes import same_id
from polyprof.formats.kineto import flows
from polyprof.formats.kineto.flows import _bind, previous_greater, previous_greater_python


def test_same_id_spellings():
    assert same_id("25738") == 25738 and same_id(25738) == "25738" and same_id("-3") == -3
    for v in ("stream 7", "007", "+1", "", "1e3", " 1", "١٢", None, 1.0, True):
        assert same_id(v) is None


def _write(tmp_path, events, name="t.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_string_and_int_tid_are_one_track_and_flows_bind(tmp_path):
    # as torch 1.8-1.9 wrote them: X events with "tid": "25738", flow starts with 25738
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 25738, "args": {"name": "main"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": "25738", "ts": 100, "dur": 50},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": "25738", "ts": 110, "dur": 10,
         "args": {"correlation": 7}},
        {"ph": "s", "cat": "async", "name": "launch", "id": 7, "pid": 1, "tid": 25738, "ts": 110},
        {"ph": "X", "cat": "Kernel", "name": "gemm", "pid": 0, "tid": "stream 7", "ts": 130, "dur": 20,
         "args": {"correlation": 7, "stream": 7, "device": 0}},
        {"ph": "f", "cat": "async", "name": "launch", "id": 7, "pid": 0, "tid": "stream 7", "ts": 130, "bp": "e"},
    ]
    t = polyprof.load(_write(tmp_path, ev))
    assert [(tr.name, tr.tid) for tr in t.tracks if t.planes[tr.plane].name.startswith("/host")] == [
        ("main", 25738)]
    assert len(t.flows["src"]) == 1
    assert t.strings[t.events["name"][t.flows["src"][0]]] == "cudaLaunchKernel"
    assert t.strings[t.events["name"][t.flows["dst"][0]]] == "gemm"
    assert not t.metadata.get("warnings")


def _brute(track, start, dur, ann, qtrack, qts, enclosing):
    order = sorted(range(len(start)), key=lambda i: (track[i], start[i], -dur[i], not ann[i]))
    out = []
    for qt, t, enc in zip(qtrack, qts, enclosing):
        seg = [i for i in order if track[i] == qt]
        if enc:
            before = [i for i in seg if start[i] <= t]
            got = next((i for i in reversed(before) if start[i] + dur[i] >= t), -1)
        else:
            got = next((i for i in seg if start[i] >= t), -1)
        out.append(got)
    return np.array(out)


def _nested(rng, n_tracks, n):
    """Slices that nest on each track (a random call tree per track) and a few overlaps."""
    track, start, dur = [], [], []
    for tr in range(n_tracks):
        stack = [(0, 10_000)]
        for _ in range(n):
            lo, hi = stack[rng.integers(len(stack))]
            if hi - lo < 2:
                continue
            a = int(rng.integers(lo, hi - 1))
            b = int(rng.integers(a + 1, hi + 1))
            track.append(tr), start.append(a), dur.append(b - a)
            stack.append((a, b))
    return np.array(track), np.array(start, np.int64), np.array(dur, np.int64)


def test_bind_equals_brute_force_search():
    rng = np.random.default_rng(3)
    for _ in range(20):
        track, start, dur = _nested(rng, 3, 60)
        ann = rng.random(len(start)) < 0.2
        m = 80
        qtrack = rng.integers(-1, 4, m)
        qts = rng.integers(-5, 10_010, m)
        qts[: m // 4] = start[rng.integers(len(start), size=m // 4)]  # at slice starts and ends
        qts[m // 4: m // 2] = (start + dur)[rng.integers(len(start), size=m // 4)]
        enclosing = rng.random(m) < 0.7
        got = _bind(track, start, dur, ann, qtrack, qts, enclosing)
        want = _brute(track, start, dur, ann, qtrack, qts, enclosing)
        assert np.array_equal(got, want)


def test_previous_greater_is_the_nearest_earlier_longer_end():
    rng = np.random.default_rng(5)
    track = np.sort(rng.integers(0, 3, 500))
    end = rng.integers(0, 100, 500)
    for find in (previous_greater, previous_greater_python):  # _nesting.c's loop (where built) and NumPy's
        got = find(track, end)
        for i in range(500):
            want = next((j for j in range(i - 1, -1, -1) if track[j] == track[i] and end[j] > end[i]
                         or track[j] != track[i]), -1)
            if want >= 0 and track[want] != track[i]:
                want = -1
            assert got[i] == want


def test_previous_greater_c_equals_python_on_call_trees():
    # the compiled stack walk and the NumPy pointer jumping, on nested slices of many
    # tracks sorted as _bind sorts them, int32 and int64 tracks; and the real traces'
    # flows (the tokens tests load every Kineto trace both ways)
    if flows._nesting is None:
        pytest.skip("the _nesting extension is not built (setup.py build_ext)")
    rng = np.random.default_rng(7)
    for n_tracks, n in ((1, 3000), (6, 800), (40, 30)):
        track, start, dur = _nested(rng, n_tracks, n)
        order = np.lexsort((-dur, start, track))
        t_s, e_s = track[order], (start + dur)[order]
        want = previous_greater_python(t_s, e_s)
        for t in (t_s.astype(np.int32), t_s.astype(np.int64)):
            got = previous_greater(t, e_s)
            assert got.dtype == np.int32 and np.array_equal(got, want)
    assert len(previous_greater(np.zeros(0, np.int32), np.zeros(0, np.int64))) == 0


def test_bind_and_previous_greater_a_block_at_a_time(monkeypatch):
    # blocks of a few slices: a block sees candidates an earlier block moved, the answer is the same
    rng = np.random.default_rng(11)
    track, start, dur = _nested(rng, 4, 80)
    order = np.lexsort((-dur, start, track))
    whole_prev = previous_greater(track[order], (start + dur)[order])
    ann = rng.random(len(start)) < 0.2
    qtrack = rng.integers(-1, 5, 120)
    qts = rng.integers(-5, 10_010, 120)
    enclosing = rng.random(120) < 0.7
    whole = _bind(track, start, dur, ann, qtrack, qts, enclosing)
    monkeypatch.setattr(flows, "_BLOCK", 5)
    assert np.array_equal(previous_greater_python(track[order], (start + dur)[order]), whole_prev)
    assert np.array_equal(_bind(track, start, dur, ann, qtrack, qts, enclosing), whole)
    assert np.array_equal(whole, _brute(track, start, dur, ann, qtrack, qts, enclosing))


def test_bind_memory_beside_its_inputs_is_a_few_columns():
    # the load's peak (docs/benchmarks.md, "Linear growth"): binding 200,000 slices and
    # 100,000 endpoints allocates under 60 bytes a slice beyond its inputs (the slices'
    # sort key, order, track, end and chain; the endpoints' rows and keys), where
    # lexsort and the chain's whole-column temporaries took 98
    import tracemalloc

    rng = np.random.default_rng(2)
    n = 200_000
    track = np.sort(rng.integers(0, 8, n)).astype(np.int32)
    start = np.cumsum(rng.integers(1, 50, n)).astype(np.int64) * 1000 + 1_700_000_000_000_000_000
    dur = rng.integers(0, 200_000, n).astype(np.int64)
    ann = rng.random(n) < 0.1
    qtrack = rng.integers(0, 8, n // 2).astype(np.int32)
    qts = start[rng.integers(0, n, n // 2)] + 1
    enclosing = rng.random(n // 2) < 0.5
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        rows = _bind(track, start, dur, ann, qtrack, qts, enclosing)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert np.count_nonzero(rows >= 0) > n // 10  # the next slice, or an enclosing one
    assert peak / n < 60, f"{peak / n:.0f} bytes a slice"


def test_bind_equals_brute_force_when_the_row_does_not_fit_the_key():
    # times spread so wide that (track, time, row) does not fit 63 bits (a stable sort of
    # the key), or (track, time) alone does not (times by their place in a grid)
    rng = np.random.default_rng(13)
    track, start, dur = _nested(rng, 3, 1000)
    ann = rng.random(len(start)) < 0.2
    qtrack = rng.integers(-1, 4, 60)
    pick = rng.integers(len(start), size=60)
    enclosing = rng.random(60) < 0.7
    for scale in (2 ** 37, 2 ** 48):
        s, d = start * scale, dur * scale
        qts = np.where(rng.random(60) < 0.5, s[pick], s[pick] + d[pick] // 2)
        key = flows._TrackTime(track, s, qtrack, qts)
        fits = key.grid is None and (int(key(track, s).max()) + 1) * len(s) < 2 ** 63
        assert not fits
        got = _bind(track, s, d, ann, qtrack, qts, enclosing)
        assert np.array_equal(got, _brute(track, s, d, ann, qtrack, qts, enclosing))


def test_flow_step_then_new_start_at_one_time_keep_file_order(tmp_path):
    # x2trace's example.json (umaumax/x2trace): flow 200 steps into other_func1 at 1003 µs
    # and, at the same µs and just after in the file, starts again from there; Perfetto
    # and Chrome's trace viewer order ties by file position: two flows, not one
    ev = [
        {"ph": "X", "name": "func1", "pid": 1, "tid": 1, "ts": 1001, "dur": 2},
        {"ph": "X", "name": "func1-1", "pid": 1, "tid": 1, "ts": 1001, "dur": 1},
        {"ph": "s", "cat": "flow", "name": "a", "id": 200, "pid": 1, "tid": 1, "ts": 1001.5},
        {"ph": "X", "name": "term", "pid": 1, "tid": 1, "ts": 1010, "dur": 1.5},
        {"ph": "B", "name": "other_func1", "pid": 2, "tid": 2, "ts": 1002},
        {"ph": "E", "name": "other_func1", "pid": 2, "tid": 2, "ts": 1004},
        {"ph": "t", "cat": "flow", "name": "a", "id": 200, "pid": 2, "tid": 2, "ts": 1003},
        {"ph": "s", "cat": "flow", "name": "b", "id": 200, "pid": 2, "tid": 2, "ts": 1003},
        {"ph": "t", "cat": "flow", "name": "b", "id": 200, "pid": 1, "tid": 1, "ts": 1010.5},
    ]
    t = polyprof.load(_write(tmp_path, ev))
    name = t.events["name"]
    got = sorted((t.strings[name[s]], t.strings[name[d]]) for s, d in zip(t.flows["src"], t.flows["dst"]))
    assert got == [("func1-1", "other_func1"), ("other_func1", "term")]
