"""Kineto/Chrome JSON: a thread's tid written as a string and as an int is one track, and
flow endpoints are bound by a linear pass (checked against a brute-force search)."""

from __future__ import annotations

import json

import numpy as np

import polyprof
from polyprof.formats.kineto.codes import same_id
from polyprof.formats.kineto.flows import _bind, previous_greater


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
    got = previous_greater(track, end)
    for i in range(500):
        want = next((j for j in range(i - 1, -1, -1) if track[j] == track[i] and end[j] > end[i]
                     or track[j] != track[i]), -1)
        if want >= 0 and track[want] != track[i]:
            want = -1
        assert got[i] == want
