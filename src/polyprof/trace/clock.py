"""The clock service: map a foreign clock onto a reference clock, with an accuracy bound.

Every clock polyprof meets goes through here: a device's clock (OpenCL, a native
plugin), Kineto's and JAX's wall-clock-based timestamps in a live session, and another
rank's host clock when ranks are merged. The pieces:

- **constraints and fits.** Model (docs/clock-sync.md)::

      host = other + offset + drift * (other - ref)

  A constraint says the other clock's reading ``o_lo`` happened at or after host time
  ``h_lo`` (a *lower* point ``(o_lo - ref, h_lo - o_lo)`` the line passes above), or
  that ``o_hi`` happened at or before ``h_hi`` (an *upper* point). A paired sample
  ``(host_before, other, host_after)`` gives one of each at the same ``other``
  (:func:`fit`); a marker of the other clock inside a host bracket gives a lower point at
  its start and an upper point at its end; one collective seen on two ranks gives a
  lower point (it cannot end on one rank before it began on the other) and an upper
  point (:func:`fit_bounds`). Only the upper convex hull of the lower points and the
  lower convex hull of the upper points constrain the line (Poirier, Roy & Dagenais 2010;
  Jabbarifar 2013). The feasible lines form a convex polygon in (drift, offset); the
  estimate is the line between its minimum- and maximum-drift vertices (or a preferred
  line inside it), and the accuracy bound is the largest distance from the estimate to any
  feasible line over the constrained interval, growing linearly outside it.
- **wall anchors**: :func:`from_anchors` maps one process's monotonic clock onto
  another's through the (monotonic, wall) pairs each recorded.
- **retiming**: :func:`retime` applies a fit to the events and counters of a trace (or
  of one of its sources) and records it on the source.

Work is vectorised NumPy: O(n log n) for the sort, hulls by a vectorised quickhull,
then O(h^2) on the few hull vertices.
"""

from __future__ import annotations

import logging
import math
from array import array
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping

import numpy as np

from .sorting import unique

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from .core import Trace

log = logging.getLogger("polyprof")

#: Default limit on |drift|: two clocks further apart than this are not the same kind of
#: clock (NTP slews CLOCK_MONOTONIC by at most 500 ppm). It bounds the slope when the
#: samples do not (one sample, or samples taken all at once).
DEFAULT_MAX_DRIFT_PPM = 1000.0


def fit_same_rate(host_before: ArrayLike, other: ArrayLike, host_after: ArrayLike, method: str) -> ClockFit:
    """Paired samples of a clock that runs at the host clock's rate: the wall clock
    (CLOCK_REALTIME) against CLOCK_MONOTONIC, which NTP slews alike, so only an offset
    separates them (Kineto's and XProf's timestamps in a live session). The bound is then
    the intersection of the brackets; if they admit no common offset (the wall clock was
    stepped during the recording) the fit allows drift as for any other clock."""
    f = _offset_only(host_before, other, host_after, method)
    if f is None:  # the general fit: samples to drop, or none left
        f = fit(host_before, other, host_after, max_drift_ppm=0.0, method=method)
    return f if f.consistent else fit(host_before, other, host_after, method=method)


def _offset_only(host_before: ArrayLike, other: ArrayLike, host_after: ArrayLike, method: str) -> ClockFit | None:
    """:func:`fit` with no drift, in closed form: the offset lies between the highest
    lower point and the lowest upper point (the hulls and the polygon of :func:`fit_bounds`
    reduce to them), the same ClockFit, float for float. A tenth of the cost: the torch
    plugin fits twice per recording at the session's stop. None where the general
    fit must run (no samples, a sample with host_before > host_after)."""
    hb = np.asarray(host_before, np.int64).ravel()
    ot = np.asarray(other, np.int64).ravel()
    ha = np.asarray(host_after, np.int64).ravel()
    if not len(ot) or not (len(hb) == len(ot) == len(ha)) or not (hb <= ha).all():
        return None
    ref, last = int(ot.min()), int(ot.max())
    lo, hi = hb - ot, ha - ot
    base = int(lo[0])
    F, G = float(lo.max() - base), float(hi.min() - base)
    if not F - G <= 1e-6 * (1.0 + abs(F) + abs(G)):  # no common offset: fit_bounds' fallback
        return ClockFit(0, 0.0, math.inf, len(ot), consistent=False, method=method)
    G = max(G, F)  # rounding at the degenerate ends, as fit_bounds
    c = ((F + G) / 2 + (F + G) / 2) / 2
    bound = float(max(abs(F - c), abs(G - c)))
    bound = math.ceil(bound + 1e-9 * abs(c)) + 1.0
    d = -0.0  # fit_bounds' drift: its one candidate, np.unique([-0.0, 0.0, 0.0])
    return ClockFit(offset_ns=base + int(round(c)), drift_ppm=d, bound_ns=bound, n=len(ot), ref_ns=ref,
                    first_ns=ref, last_ns=last, growth_ppm=0.0, drift_min_ppm=d, drift_max_ppm=d, method=method)


@dataclass(frozen=True)
class ClockFit:
    """An estimated mapping other -> host and how far it can be wrong.

    ``host = other + offset_ns + drift_ppm * 1e-6 * (other - ref_ns)``. Within
    ``[first_ns, last_ns]`` (other-clock times of the constraints) the error is at most
    ``bound_ns``; outside it grows by ``growth_ppm`` of the distance. ``offset_ns`` is an
    integer: wall-clock offsets (~1.7e18 ns) do not fit a float exactly.
    """

    offset_ns: int
    drift_ppm: float
    bound_ns: float
    n: int
    ref_ns: int = 0
    first_ns: int = 0
    last_ns: int = 0
    growth_ppm: float = 0.0
    drift_min_ppm: float = 0.0
    drift_max_ppm: float = 0.0
    consistent: bool = True
    message: str = ""
    method: str = ""

    def to_host(self, other_ns: ArrayLike) -> np.ndarray:
        """Other-clock times (int ns, any shape) on the host clock (int64 ns)."""
        o = np.asarray(other_ns, dtype=np.int64)
        if self.drift_ppm == 0.0:
            return o + np.int64(self.offset_ns)
        corr = np.rint((self.drift_ppm * 1e-6) * (o - self.ref_ns).astype(np.float64)).astype(np.int64)
        return o + np.int64(self.offset_ns) + corr

    def bound_at(self, other_ns: ArrayLike) -> np.ndarray:
        """Error bound (ns) of :meth:`to_host` at the given other-clock times."""
        o = np.asarray(other_ns, dtype=np.int64)
        outside = np.maximum(self.first_ns - o, 0) + np.maximum(o - self.last_ns, 0)
        return self.bound_ns + self.growth_ppm * 1e-6 * outside.astype(np.float64)

    def then(self, other: "ClockFit") -> "ClockFit":
        """This fit followed by ``other`` (a -> b, then b -> c), for constant offsets
        (drifts add; the bounds add)."""
        return replace(self, offset_ns=self.offset_ns + other.offset_ns,
                       drift_ppm=self.drift_ppm + other.drift_ppm, bound_ns=self.bound_ns + other.bound_ns,
                       growth_ppm=self.growth_ppm + other.growth_ppm,
                       method=" + ".join(m for m in (self.method, other.method) if m))

    def to_dict(self) -> dict[str, object]:
        return {"method": self.method, "offset_ns": int(self.offset_ns), "drift_ppm": self.drift_ppm,
                "bound_ns": self.bound_ns, "n": self.n, "ref_ns": self.ref_ns, "first_ns": self.first_ns,
                "last_ns": self.last_ns, "growth_ppm": self.growth_ppm, "drift_min_ppm": self.drift_min_ppm,
                "drift_max_ppm": self.drift_max_ppm, "consistent": self.consistent,
                "message": self.message, "model": "host = other + offset_ns + drift_ppm*1e-6*(other - ref_ns)"}


def constant(offset_ns: int, bound_ns: float, method: str, n: int = 0, message: str = "") -> ClockFit:
    """A fixed offset with a stated bound (no drift): a wall anchor, a known shift."""
    return ClockFit(offset_ns=int(offset_ns), drift_ppm=0.0, bound_ns=float(bound_ns), n=n,
                    consistent=math.isfinite(bound_ns), message=message, method=method)


@dataclass
class ClockSync:
    """Collects paired samples and fits :class:`ClockFit`.

    ``add`` is cheap (three appends); call it from anywhere, as often as you can
    afford: more samples, and samples spread further apart, give a tighter bound.
    """

    max_drift_ppm: float = DEFAULT_MAX_DRIFT_PPM
    method: str = "paired samples, convex hull"
    _before: array = field(default_factory=lambda: array("q"))
    _other: array = field(default_factory=lambda: array("q"))
    _after: array = field(default_factory=lambda: array("q"))

    def add(self, host_before: int, other: int, host_after: int) -> None:
        self._before.append(int(host_before))
        self._other.append(int(other))
        self._after.append(int(host_after))

    def add_many(self, host_before: ArrayLike, other: ArrayLike, host_after: ArrayLike) -> None:
        self._before.extend(np.asarray(host_before, np.int64).tolist())
        self._other.extend(np.asarray(other, np.int64).tolist())
        self._after.extend(np.asarray(host_after, np.int64).tolist())

    def __len__(self) -> int:
        return len(self._other)

    def samples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = min(len(self._before), len(self._other), len(self._after))
        return (np.frombuffer(self._before, np.int64)[:n].copy(),
                np.frombuffer(self._other, np.int64)[:n].copy(),
                np.frombuffer(self._after, np.int64)[:n].copy())

    def fit(self) -> ClockFit:
        return fit(*self.samples(), max_drift_ppm=self.max_drift_ppm, method=self.method)


# ----------------------------------------------------------------------------- wall anchors


def from_anchors(anchor: Mapping[str, float], onto: Mapping[str, float], extra_bound_ns: float = 0.0,
                 method: str = "wall anchors") -> ClockFit:
    """Map the monotonic clock of a process whose wall anchor is ``anchor`` onto that of
    ``onto`` (anchors as :func:`polyprof.collect.clock.wall_anchor` takes them:
    ``mono_ns``, ``wall_ns``, ``uncertainty_ns``). The bound is the two anchors'
    uncertainties plus ``extra_bound_ns`` (what the wall clocks may disagree by, e.g. NTP
    on two hosts); the same host's wall clock needs none."""
    off = (int(anchor["wall_ns"]) - int(anchor["mono_ns"])) - (int(onto["wall_ns"]) - int(onto["mono_ns"]))
    bound = float(anchor.get("uncertainty_ns", 0)) + float(onto.get("uncertainty_ns", 0)) + extra_bound_ns
    return constant(off, bound, method)


# ----------------------------------------------------------------------------- retiming


def retime(trace: "Trace", fit_: ClockFit, source: int | None = None, record: bool = True) -> "Trace":
    """``trace`` with the times of ``source``'s planes (all planes when None) mapped by
    ``fit_`` (events and counters), in place; the fit is recorded on the source(s)
    (``Source.clock['alignment']``) unless ``record`` is False."""
    ev, c = trace.events, trace.counters
    if source is None:
        rows: slice | np.ndarray = slice(None)
        crows: slice | np.ndarray = slice(None)
        touched = list(trace.sources)
    else:
        rows = np.flatnonzero(trace.event_sources() == source)
        crows = np.flatnonzero(trace.plane_source[c["plane"]] == source) if len(c["plane"]) else slice(0, 0)
        touched = [trace.sources[source]]
    if trace.n_events:
        start = ev["start_ns"][rows]
        if fit_.drift_ppm:  # durations stretch with the drift
            ev["dur_ns"][rows] = np.maximum(fit_.to_host(start + ev["dur_ns"][rows]) - fit_.to_host(start), 0)
        ev["start_ns"][rows] = fit_.to_host(start)
    if len(c["ts_ns"]):
        c["ts_ns"][crows] = fit_.to_host(c["ts_ns"][crows])
    if record:
        for s in touched:
            s.clock["alignment"] = fit_.to_dict()
    return trace


# ----------------------------------------------------------------------------- the fit


def _upper_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the upper convex hull of points sorted by x with unique x (quickhull,
    one vectorised pass per hull vertex found)."""
    n = len(x)
    if n <= 2:
        return np.arange(n)
    keep = [0, n - 1]
    stack = [(0, n - 1, np.arange(1, n - 1))]
    while stack:
        i, j, idx = stack.pop()
        if not len(idx):
            continue
        dx, dy = x[j] - x[i], y[j] - y[i]
        cross = dx * (y[idx] - y[i]) - dy * (x[idx] - x[i])
        above = cross > 0
        if not above.any():
            continue
        idx, cross = idx[above], cross[above]
        k = int(idx[np.argmax(cross)])
        keep.append(k)
        stack.append((i, k, idx[idx < k]))
        stack.append((k, j, idx[idx > k]))
    return np.sort(np.asarray(keep))


def _envelope(xs: np.ndarray, ys: np.ndarray, d: np.ndarray, take_min: bool) -> np.ndarray:
    """F(d) = max_i(ys_i - d xs_i) (take_min: the min), for every d; chunked so the
    (len(d) x hull) matrix stays small."""
    out = np.empty(len(d))
    step = max(1, 1_000_000 // max(len(xs), 1))
    for s in range(0, len(d), step):
        m = ys[None, :] - d[s:s + step, None] * xs[None, :]
        out[s:s + step] = m.min(axis=1) if take_min else m.max(axis=1)
    return out


def _edge_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.diff(y) / np.diff(x) if len(x) > 1 else np.zeros(0)


def _extreme(x: np.ndarray, y: np.ndarray, upper: bool) -> tuple[np.ndarray, np.ndarray]:
    """One constraint per distinct x (the highest lower point, or the lowest upper
    point), then the hull that can constrain the line."""
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    ux, start = np.unique(xs, return_index=True)
    ext = np.minimum.reduceat(ys, start) if upper else np.maximum.reduceat(ys, start)
    idx = _upper_hull(ux, -ext if upper else ext)
    return ux[idx], ext[idx]


def fit(host_before: ArrayLike, other: ArrayLike, host_after: ArrayLike, max_drift_ppm: float = DEFAULT_MAX_DRIFT_PPM,
        method: str = "paired samples, convex hull") -> ClockFit:
    """Fit the line through paired samples ``(host_before, other, host_after)``: the
    other clock read ``other`` at a host time in ``[host_before, host_after]``."""
    hb = np.asarray(host_before, np.int64).ravel()
    ot = np.asarray(other, np.int64).ravel()
    ha = np.asarray(host_after, np.int64).ravel()
    if not (len(hb) == len(ot) == len(ha)):
        raise ValueError("host_before, other and host_after must have the same length")
    ok = hb <= ha
    if not ok.all():
        log.warning("clocksync: %d samples with host_before > host_after dropped", int((~ok).sum()))
        hb, ot, ha = hb[ok], ot[ok], ha[ok]
    return fit_bounds(ot, hb, ot, ha, max_drift_ppm=max_drift_ppm, method=method)


def fit_bounds(other_lo: ArrayLike, host_lo: ArrayLike, other_hi: ArrayLike, host_hi: ArrayLike,
               max_drift_ppm: float = DEFAULT_MAX_DRIFT_PPM, method: str = "convex hull",
               prefer_offset_ns: int | None = None, warn: bool = True) -> ClockFit:
    """Fit the line from one-sided constraints: the other clock's ``other_lo[i]`` maps to
    a host time ``>= host_lo[i]``, and ``other_hi[j]`` to one ``<= host_hi[j]``.

    The estimate is the middle of the feasible polygon; with ``prefer_offset_ns`` (a
    constant offset another argument favours, e.g. "collectives end together"), that
    drift-free line when it is feasible, else the feasible drift-free line nearest to
    it, else the middle. The bound holds for whichever line is chosen."""
    olo = np.asarray(other_lo, np.int64).ravel()
    hlo = np.asarray(host_lo, np.int64).ravel()
    ohi = np.asarray(other_hi, np.int64).ravel()
    hhi = np.asarray(host_hi, np.int64).ravel()
    n = max(len(olo), len(ohi))
    if not len(olo) or not len(ohi):
        return ClockFit(0, 0.0, math.inf, n, consistent=False, method=method,
                        message="no samples" if not n else "constraints on one side only")
    D = max_drift_ppm * 1e-6
    both = np.concatenate([olo, ohi])
    ref = int(both.min())
    base = int((hlo - olo)[0])
    first, last = ref, int(both.max())
    lx, ly = _extreme((olo - ref).astype(np.float64), ((hlo - olo) - base).astype(np.float64), upper=False)
    gx, gy = _extreme((ohi - ref).astype(np.float64), ((hhi - ohi) - base).astype(np.float64), upper=True)

    # H(d) = F(d) - G(d) is convex and piecewise linear with breakpoints at hull edge slopes
    bps = np.concatenate([_edge_slopes(lx, ly), _edge_slopes(gx, gy)])
    cand = unique(np.concatenate([[-D, 0.0, D], bps[(bps > -D) & (bps < D)]]))
    F = _envelope(lx, ly, cand, take_min=False)
    G = _envelope(gx, gy, cand, take_min=True)
    H = F - G
    tol = 1e-6 * (1.0 + np.abs(F) + np.abs(G))
    feas = H <= tol
    if not feas.any():
        return _fallback(lx, ly, gx, gy, ref, base, first, last, n, method, warn,
                         f"{n} constraints admit no common line (largest conflict {float(H.min()):.0f} ns): "
                         "a clock stepped or a sample is wrong")
    k0 = int(np.argmax(feas))
    k1 = len(feas) - 1 - int(np.argmax(feas[::-1]))
    d_min = cand[k0] if k0 == 0 else cand[k0 - 1] + (cand[k0] - cand[k0 - 1]) * H[k0 - 1] / (H[k0 - 1] - H[k0])
    d_max = cand[k1] if k1 == len(cand) - 1 else cand[k1] + (cand[k1 + 1] - cand[k1]) * H[k1] / (H[k1] - H[k1 + 1])
    d_min, d_max = float(min(d_min, d_max)), float(max(d_min, d_max))

    # vertices of the feasible polygon: both envelopes at d_min, d_max and inner breakpoints
    vd = np.concatenate([[d_min, d_max], cand[(cand > d_min) & (cand < d_max)]])
    vF = _envelope(lx, ly, vd, take_min=False)
    vG = _envelope(gx, gy, vd, take_min=True)
    vG = np.maximum(vG, vF)  # rounding at the degenerate ends
    d = (d_min + d_max) / 2
    c = ((vF[0] + vG[0]) / 2 + (vF[1] + vG[1]) / 2) / 2  # between the least- and most-drift lines
    if prefer_offset_ns is not None and d_min <= 0.0 <= d_max:
        f0 = float(_envelope(lx, ly, np.zeros(1), take_min=False)[0])
        g0 = float(max(_envelope(gx, gy, np.zeros(1), take_min=True)[0], f0))
        d, c = 0.0, min(max(float(prefer_offset_ns - base), f0), g0)
    dd = np.concatenate([vd, vd]) - d
    dc = np.concatenate([vF, vG]) - c
    span = float(last - first)
    bound = float(max(np.abs(dc).max(), np.abs(dd * span + dc).max()))
    bound = math.ceil(bound + 1e-9 * abs(c)) + 1.0  # float rounding, to_host's rint
    growth = float(np.abs(dd).max()) * 1e6
    return ClockFit(offset_ns=base + int(round(c)), drift_ppm=d * 1e6, bound_ns=bound, n=n, ref_ns=ref,
                    first_ns=first, last_ns=last, growth_ppm=growth, drift_min_ppm=d_min * 1e6,
                    drift_max_ppm=d_max * 1e6, method=method)


def _fallback(lx: np.ndarray, ly: np.ndarray, gx: np.ndarray, gy: np.ndarray, ref: int, base: int,
              first: int, last: int, n: int, method: str, warn: bool, message: str) -> ClockFit:
    """Inconsistent constraints: least squares through the lower and upper points; the
    'bound' is how far that line strays from them, not a guarantee (consistent=False)."""
    (log.warning if warn else log.debug)("clocksync: %s; falling back to least squares", message)
    x = np.concatenate([lx, gx])
    y = np.concatenate([ly, gy])
    if len(unique(x)) > 1:
        d, c = np.polyfit(x, y, 1)
    else:
        d, c = 0.0, float(y.mean())
    stray = np.concatenate([np.maximum(ly - (d * lx + c), 0), np.maximum((d * gx + c) - gy, 0)])
    bound = float(stray.max()) if len(stray) else 0.0
    return ClockFit(offset_ns=base + int(round(c)), drift_ppm=float(d) * 1e6, bound_ns=math.ceil(bound) + 1.0,
                    n=n, ref_ns=ref, first_ns=first, last_ns=last, growth_ppm=abs(float(d)) * 1e6,
                    drift_min_ppm=float(d) * 1e6, drift_max_ppm=float(d) * 1e6, consistent=False,
                    message=message, method=method)


__all__ = ["ClockSync", "ClockFit", "fit", "fit_bounds", "constant", "from_anchors", "retime",
           "DEFAULT_MAX_DRIFT_PPM"]
