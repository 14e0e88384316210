"""Clock sync on synthetic clocks whose true offset and drift we know.

The other clock reads ``o`` at true host time ``h(o) = o + offset + drift*(o - o0)``;
each sample brackets h(o) by random, asymmetric delays. Whatever the estimate, the
true host time must lie within the reported bound of it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyprof.trace.clock import ClockSync, fit


def make_samples(rng: np.random.Generator, n: int, offset: float, drift: float, span_ns: float,
                 delay_before: float, delay_after: float, o0: int = 5_000_000_000_000):
    """(host_before, other, host_after) and the true mapping as a function."""
    other = np.sort(o0 + rng.uniform(0, span_ns, n)).astype(np.int64)

    def true_host(o: np.ndarray) -> np.ndarray:  # float64, exact enough (|o-o0| < 2^53)
        o = np.asarray(o, np.int64)
        return (o - o0).astype(np.float64) * (1 + drift) + o0 + offset

    h = true_host(other)
    # asymmetric jitter: exponential delays of different scales, plus occasional big ones
    before = rng.exponential(delay_before, n) * np.where(rng.random(n) < 0.05, 50, 1)
    after = rng.exponential(delay_after, n) * np.where(rng.random(n) < 0.05, 50, 1)
    hb = np.floor(h - before).astype(np.int64) - o0
    ha = np.ceil(h + after).astype(np.int64) - o0
    return hb + o0, other, ha + o0, true_host


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       n=st.integers(1, 400),
       offset=st.floats(-1e12, 1e12),
       drift_ppm=st.floats(1.0, 100.0),
       sign=st.sampled_from([-1.0, 1.0]),
       span_s=st.floats(1e-3, 100.0),
       delay_before=st.floats(10.0, 1e5),
       delay_after=st.floats(10.0, 1e5))
def test_error_within_bound(seed: int, n: int, offset: float, drift_ppm: float, sign: float,
                            span_s: float, delay_before: float, delay_after: float) -> None:
    rng = np.random.default_rng(seed)
    drift = sign * drift_ppm * 1e-6
    hb, other, ha, true_host = make_samples(rng, n, offset, drift, span_s * 1e9, delay_before, delay_after)
    f = fit(hb, other, ha)
    assert f.consistent, f.message
    assert f.n == n
    # probes inside the sampled interval and up to one span outside it (extrapolation)
    lo, hi = int(other.min()), int(other.max())
    width = max(hi - lo, 1)
    probes = np.concatenate([other, np.linspace(lo, hi, 64).astype(np.int64),
                             np.linspace(lo - width, hi + width, 64).astype(np.int64)])
    err = np.abs(f.to_host(probes).astype(np.float64) - true_host(probes))
    bound = f.bound_at(probes)
    assert (err <= bound).all(), (float((err - bound).max()), f)
    # inside the interval the bound is the constant bound_ns
    inside = (probes >= lo) & (probes <= hi)
    assert np.allclose(bound[inside], f.bound_ns)
    # the drift interval contains the true drift
    assert f.drift_min_ppm - 1e-6 <= drift * 1e6 <= f.drift_max_ppm + 1e-6


def test_bound_shrinks_as_samples_are_added() -> None:
    rng = np.random.default_rng(3)
    hb, other, ha, true_host = make_samples(rng, 4096, 1.5e9, 37e-6, 10e9, 2000.0, 3000.0)
    # keep the sampled interval fixed: the first and last sample always included
    perm = np.concatenate([[0, len(other) - 1], rng.permutation(np.arange(1, len(other) - 1))])
    bounds = []
    for n in (4, 16, 64, 256, 1024, 4096):
        idx = perm[:n]
        f = fit(hb[idx], other[idx], ha[idx])
        assert f.consistent
        bounds.append(f.bound_ns)
        err = np.abs(f.to_host(other).astype(np.float64) - true_host(other))
        assert (err <= f.bound_ns).all()
    assert all(b2 <= b1 for b1, b2 in zip(bounds, bounds[1:])), bounds
    assert bounds[-1] < bounds[0] / 20, bounds


def test_drift_estimate_converges() -> None:
    rng = np.random.default_rng(11)
    hb, other, ha, _ = make_samples(rng, 20000, -3e11, -42e-6, 30e9, 500.0, 800.0)
    f = fit(hb, other, ha)
    assert abs(f.drift_ppm - (-42.0)) < 0.05
    assert f.drift_min_ppm <= -42.0 <= f.drift_max_ppm


def test_one_sample_is_offset_only_with_half_width_bound() -> None:
    s = ClockSync()
    s.add(1_000_000, 400_000, 1_000_200)
    f = s.fit()
    assert f.n == 1 and f.consistent
    assert f.drift_ppm == 0.0
    assert int(f.to_host([400_000])[0]) == 1_000_100
    assert 100 <= f.bound_ns <= 102  # half the bracket, rounded up
    # away from the sample the bound grows by the assumed maximum drift
    assert f.bound_at([400_000 + 10**9])[0] == pytest.approx(f.bound_ns + 1e-3 * 10**9)


def test_inconsistent_samples_are_reported_not_raised() -> None:
    # the other clock stepped back by 1 ms between two groups of tight samples
    hb = np.array([0, 1000, 2000, 10_000_000, 10_001_000], np.int64)
    other = np.array([50, 1050, 2050, 11_000_050, 9_001_050], np.int64)
    f = fit(hb, other, hb + 100)
    assert not f.consistent
    assert "no common line" in f.message
    assert math.isfinite(f.bound_ns)


def test_bad_and_missing_samples() -> None:
    assert not fit([], [], []).consistent
    # host_before > host_after is dropped, the rest fitted
    f = fit([10, 500, 1000], [0, 600, 1100], [5, 520, 1010])
    assert f.n == 2 and f.consistent
    with pytest.raises(ValueError):
        fit([1, 2], [1], [3, 4])


def test_samples_all_at_once_do_not_invent_a_drift() -> None:
    """Many samples at (nearly) one instant constrain the offset, not the drift."""
    hb = np.full(50, 10_000, np.int64)
    f = fit(hb, np.full(50, 3_000, np.int64), hb + 40)
    assert f.consistent and f.drift_ppm == 0.0
    assert f.bound_ns <= 21 + 1
    assert f.growth_ppm == pytest.approx(1000.0)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       n=st.integers(1, 40),
       offset=st.integers(-2**61, 2**61),
       span_ns=st.integers(0, 10**11),
       delay=st.floats(1.0, 1e5),
       skew=st.sampled_from([0.0, 0.0, 1e-6, 1e-3]),
       late=st.integers(-3000, 0))
def test_offset_only_fit_equals_the_general_fit_with_no_drift(seed: int, n: int, offset: int, span_ns: int,
                                                              delay: float, skew: float, late: int) -> None:
    """fit_same_rate's closed form (trace/clock._offset_only, what the torch plugin fits
    at every stop) against the hull fit it replaces: the same ClockFit, float for float
    (the sign of a zero drift included), or inconsistent for both. Wall-clock sized
    offsets; brackets shifted by ``late`` (and a drifting clock, ``skew``) make some
    samples admit no common offset."""
    from polyprof.trace.clock import _offset_only

    rng = np.random.default_rng(seed)
    other = np.sort(1_700_000_000_000_000_000 + rng.integers(0, span_ns + 1, n))
    host = other - offset + np.rint((other - other[0]) * skew).astype(np.int64)
    hb = host - np.floor(rng.exponential(delay, n)).astype(np.int64)
    ha = host + np.ceil(rng.exponential(delay, n)).astype(np.int64) + late
    hb = np.minimum(hb, ha)  # brackets the general fit would not drop
    fast, general = _offset_only(hb, other, ha, "m"), fit(hb, other, ha, max_drift_ppm=0.0, method="m")
    assert fast is not None and fast.consistent == general.consistent
    if general.consistent:
        assert repr(fast) == repr(general)
        assert fast.to_host(other).tolist() == general.to_host(other).tolist()


def test_offset_only_fit_leaves_dropped_and_missing_samples_to_the_general_fit() -> None:
    from polyprof.trace.clock import _offset_only, fit_same_rate

    assert _offset_only([], [], [], "m") is None
    assert _offset_only([5, 9], [100, 200], [7, 8], "m") is None  # the second bracket: before > after
    f = fit_same_rate([5, 9], [100, 200], [7, 8], "m")
    assert f.consistent and f.n == 1 and repr(f) == repr(fit([5], [100], [7], max_drift_ppm=0.0, method="m"))
