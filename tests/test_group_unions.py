"""analyze/group_unions.py: every group's clipped union at once equals derive.intervals'
clip_union taken group by group (the shifted pass and the one-by-one fallback), and the
device breakdowns built on it equal the same figures computed group by group."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import group_unions
from polyprof.analyze.breakdown import comm_comp_overlap, temporal_breakdown
from polyprof.analyze.common import COMMUNICATION, COMPUTE, device_view
from polyprof.analyze.kernel_states import kernel_state_breakdown
from polyprof.derive.intervals import clip_union, covered, intersect_len, union, union_len

DATA = Path(__file__).parent / "data"


def _per_group(group, s, e, n, t0, t1):
    return [clip_union(s[group == g], e[group == g], t0, t1) for g in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_union_len_and_covered_against_a_timeline_of_unit_cells(seed):
    """The one interval merge the analyses share (collectives, thread links, HTA's busy
    time): each checked against a boolean timeline, empty and reversed intervals too."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(0, 40))
    s = rng.integers(0, 500, m)
    e = s + rng.integers(-5, 80, m)
    cells = np.zeros(600, bool)
    for a, b in zip(s.tolist(), e.tolist()):
        cells[a:max(a, b)] = True
    assert union_len(s, e) == int(cells.sum())
    ok = e > s
    us, ue = union(s[ok], e[ok])
    a = rng.integers(0, 550, 10)
    b = a + rng.integers(0, 50, 10)
    assert covered(us, ue, a, b).tolist() == [int(cells[x:y].sum()) for x, y in zip(a.tolist(), b.tolist())]


@pytest.mark.parametrize("seed", range(30))
def test_clipped_unions_equal_clip_union_per_group(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    m = int(rng.integers(0, 60))
    group = rng.integers(0, n, m)
    s = rng.integers(-50, 1000, m)
    e = s + rng.integers(0, 120, m)  # zero-length intervals too
    t0, t1 = int(rng.integers(-20, 300)), int(rng.integers(300, 1100))
    want = _per_group(group, s, e, n, t0, t1)
    for limit in (1 << 62, 1):  # the shifted pass, then the fallback group by group
        monkeypatch.setattr(group_unions, "LIMIT", limit)
        g, us, ue = group_unions.clipped_unions(group, s, e, n, t0, t1)
        assert (np.diff(g) >= 0).all()
        for k in range(n):
            np.testing.assert_array_equal(us[g == k], want[k][0])
            np.testing.assert_array_equal(ue[g == k], want[k][1])
        lengths = group_unions.covered_lengths(group, s, e, n, t0, t1)
        assert lengths.tolist() == [int((b - a).sum()) for a, b in want]


def test_sums_are_exact_past_float_precision():
    big = np.array([2**60 + 1, 3, 2**60 + 5, 7], np.int64)
    assert group_unions.sums(np.array([0, 0, 2, 2]), big, 4).tolist() == [2**60 + 4, 0, 2**60 + 12, 0]


def _traces():
    return [polyprof.load(DATA / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb"),
            polyprof.load(DATA / "traces" / "kineto" / "a100_nccl_rank0.json.gz"),
            polyprof.load(DATA / "traces" / "kineto" / "cpu_only_rank34.json.gz")]


def test_device_breakdowns_equal_group_by_group():
    """temporal_breakdown and comm_comp_overlap against clip_union per device and stream,
    on a GPU XSpace (8 devices), a Kineto trace with communication, and one without devices."""
    for t in _traces():
        v = device_view(t)
        t0, t1 = v.span
        tb = temporal_breakdown(t)
        for i, track in enumerate(tb["track_id"].tolist()):
            plane = [p.id for p in t.planes if p.name == tb["plane"][i]][0]
            sel = (v.plane == plane) & ((v.track == track) if track >= 0 else True)
            bs, be = clip_union(v.start[sel], v.end[sel], t0, t1)
            comp = sel & (v.cls == COMPUTE)
            cs, ce = clip_union(v.start[comp], v.end[comp], t0, t1)
            assert tb["busy_ns"][i] == int((be - bs).sum())
            assert tb["compute_ns"][i] == int((ce - cs).sum())
            assert tb["activities"][i] == int(((v.end[sel] > t0) & (v.start[sel] < t1)).sum())
        cc = comm_comp_overlap(t)
        assert len(cc) == len(np.unique(v.plane))
        for i, name in enumerate(cc["plane"].tolist()):
            on = v.plane == [p.id for p in t.planes if p.name == name][0]
            a = clip_union(v.start[on & (v.cls == COMMUNICATION)], v.end[on & (v.cls == COMMUNICATION)], t0, t1)
            b = clip_union(v.start[on & (v.cls == COMPUTE)], v.end[on & (v.cls == COMPUTE)], t0, t1)
            assert cc["communication_ns"][i] == int((a[1] - a[0]).sum())
            assert cc["overlap_ns"][i] == intersect_len(*a, *b)


def test_kernel_states_add_up_per_device():
    """Per device the states' times add up to the span, the busy states to the union of
    its activity, and each class's time to that class's union (a sweep by hand)."""
    for t in _traces():
        v = device_view(t)
        t0, t1 = v.span
        ks = kernel_state_breakdown(t)
        for name in sorted(set(ks["plane"].tolist())):
            on = v.plane == [p.id for p in t.planes if p.name == name][0]
            mine = ks["plane"] == name
            states, times = ks["state"][mine].tolist(), ks["time_ns"][mine].tolist()
            assert sum(times) == t1 - t0
            busy = clip_union(v.start[on], v.end[on], t0, t1)
            assert sum(x for s, x in zip(states, times) if s != "idle") == int((busy[1] - busy[0]).sum())
            comp = clip_union(v.start[on & (v.cls == COMPUTE)], v.end[on & (v.cls == COMPUTE)], t0, t1)
            assert sum(x for s, x in zip(states, times) if "compute" in s) == int((comp[1] - comp[0]).sum())


def test_idle_rows_equal_stream_by_stream():
    """idle_time_breakdown's rows, every group at once, against the loop stream by stream
    (also what it falls back to), at two kernel-wait limits."""
    from polyprof.analyze import breakdown

    for t in _traces():
        v = device_view(t)
        ls = breakdown.launch_calls(t, v)
        for limit in (breakdown.KERNEL_WAIT_MAX_NS, 5_000):
            want = breakdown._idle_rows_one_by_one(t, v, ls, limit, *v.span)
            assert breakdown._idle_rows(t, v, ls, limit, *v.span) == want
            assert all(r[3] >= 0 for r in want)
