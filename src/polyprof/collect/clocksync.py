"""Map a foreign clock (a device's, another host's) onto the session clock.

Model (docs/clock-sync.md)::

    host = other + offset + drift * (other - ref)

A paired sample ``(host_before, other, host_after)`` says the other clock read
``other`` at some host time in ``[host_before, host_after]``; in the plane
``x = other - ref``, ``y = host - other`` it is a lower point ``(x, host_before - other)``
the line must pass above and an upper point ``(x, host_after - other)`` it must pass
below. Only the upper convex hull of the lower points and the lower convex hull of the
upper points constrain the line (Poirier, Roy & Dagenais 2010; Jabbarifar 2013). The
feasible lines form a convex polygon in (drift, offset); its minimum- and
maximum-drift vertices are the two bounding lines, the estimate is the line between
them, and the accuracy bound is the largest distance from the estimate to any feasible
line over the sampled interval, growing linearly outside it.

Work is vectorised NumPy: O(n log n) for the sort, hulls by a vectorised quickhull,
then O(h^2) on the few hull vertices.
"""

from __future__ import annotations

import logging
import math
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger("polyprof")

#: Default limit on |drift|: two clocks further apart than this are not the same kind of
#: clock (NTP slews CLOCK_MONOTONIC by at most 500 ppm). It bounds the slope when the
#: samples do not (one sample, or samples taken all at once).
DEFAULT_MAX_DRIFT_PPM = 1000.0


@dataclass(frozen=True)
class ClockFit:
    """An estimated mapping other -> host and how far it can be wrong.

    ``host = other + offset_ns + drift_ppm * 1e-6 * (other - ref_ns)``. Within
    ``[first_ns, last_ns]`` (other-clock times of the samples) the error is at most
    ``bound_ns``; outside it grows by ``growth_ppm`` of the distance.
    """

    offset_ns: float
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

    def to_host(self, other_ns: Any) -> np.ndarray:
        """Other-clock times (int ns, any shape) on the host clock (int64 ns)."""
        o = np.asarray(other_ns, dtype=np.int64)
        corr = self.offset_ns + (self.drift_ppm * 1e-6) * (o - self.ref_ns).astype(np.float64)
        return o + np.rint(corr).astype(np.int64)

    def bound_at(self, other_ns: Any) -> np.ndarray:
        """Error bound (ns) of :meth:`to_host` at the given other-clock times."""
        o = np.asarray(other_ns, dtype=np.int64)
        outside = np.maximum(self.first_ns - o, 0) + np.maximum(o - self.last_ns, 0)
        return self.bound_ns + self.growth_ppm * 1e-6 * outside.astype(np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"offset_ns": self.offset_ns, "drift_ppm": self.drift_ppm, "bound_ns": self.bound_ns,
                "n": self.n, "ref_ns": self.ref_ns, "first_ns": self.first_ns, "last_ns": self.last_ns,
                "growth_ppm": self.growth_ppm, "drift_min_ppm": self.drift_min_ppm,
                "drift_max_ppm": self.drift_max_ppm, "consistent": self.consistent,
                "message": self.message, "model": "host = other + offset_ns + drift_ppm*1e-6*(other - ref_ns)"}


@dataclass
class ClockSync:
    """Collects paired samples and fits :class:`ClockFit`.

    ``add`` is cheap (three appends); call it from anywhere, as often as you can
    afford: more samples, and samples spread further apart, give a tighter bound.
    """

    max_drift_ppm: float = DEFAULT_MAX_DRIFT_PPM
    _before: array = field(default_factory=lambda: array("q"))
    _other: array = field(default_factory=lambda: array("q"))
    _after: array = field(default_factory=lambda: array("q"))

    def add(self, host_before: int, other: int, host_after: int) -> None:
        self._before.append(int(host_before))
        self._other.append(int(other))
        self._after.append(int(host_after))

    def add_many(self, host_before: Any, other: Any, host_after: Any) -> None:
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
        return fit(*self.samples(), max_drift_ppm=self.max_drift_ppm)


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


def fit(host_before: Any, other: Any, host_after: Any,
        max_drift_ppm: float = DEFAULT_MAX_DRIFT_PPM) -> ClockFit:
    """Fit the line through paired samples; see the module docstring."""
    hb = np.asarray(host_before, np.int64).ravel()
    ot = np.asarray(other, np.int64).ravel()
    ha = np.asarray(host_after, np.int64).ravel()
    if not (len(hb) == len(ot) == len(ha)):
        raise ValueError("host_before, other and host_after must have the same length")
    ok = hb <= ha
    if not ok.all():
        log.warning("clocksync: %d samples with host_before > host_after dropped", int((~ok).sum()))
        hb, ot, ha = hb[ok], ot[ok], ha[ok]
    n = len(ot)
    if n == 0:
        return ClockFit(0.0, 0.0, math.inf, 0, consistent=False, message="no samples")
    D = max_drift_ppm * 1e-6
    ref = int(ot.min())
    base = int((hb - ot)[0])
    x = (ot - ref).astype(np.float64)
    lo = ((hb - ot) - base).astype(np.float64)
    hi = ((ha - ot) - base).astype(np.float64)
    first, last = ref, int(ot.max())

    # one constraint per distinct x: the highest lower point, the lowest upper point
    order = np.argsort(x, kind="stable")
    xs, los, his = x[order], lo[order], hi[order]
    ux, start = np.unique(xs, return_index=True)
    lmax = np.maximum.reduceat(los, start)
    umin = np.minimum.reduceat(his, start)
    # the line lies above the lower points: their upper hull; below the upper: lower hull
    li = _upper_hull(ux, lmax)
    ui = _upper_hull(ux, -umin)
    lx, ly = ux[li], lmax[li]
    gx, gy = ux[ui], umin[ui]

    # H(d) = F(d) - G(d) is convex and piecewise linear with breakpoints at hull edge slopes
    bps = np.concatenate([_edge_slopes(lx, ly), _edge_slopes(gx, gy)])
    cand = np.unique(np.concatenate([[-D, D], bps[(bps > -D) & (bps < D)]]))
    F = _envelope(lx, ly, cand, take_min=False)
    G = _envelope(gx, gy, cand, take_min=True)
    H = F - G
    tol = 1e-6 * (1.0 + np.abs(F) + np.abs(G))
    feas = H <= tol
    if not feas.any():
        return _fallback(x, lo, hi, ref, base, first, last, n,
                         f"{n} samples admit no common line (largest conflict {float(H.min()):.0f} ns): "
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
    c_lo = (vF[0] + vG[0]) / 2  # line of least drift
    c_hi = (vF[1] + vG[1]) / 2  # line of most drift
    d = (d_min + d_max) / 2
    c = (c_lo + c_hi) / 2
    dd = np.concatenate([vd, vd]) - d
    dc = np.concatenate([vF, vG]) - c
    span = float(last - first)
    bound = float(max(np.abs(dc).max(), np.abs(dd * span + dc).max()))
    bound = math.ceil(bound + 1e-9 * (abs(c) + abs(base))) + 1.0  # float rounding, to_host's rint
    growth = float(np.abs(dd).max()) * 1e6
    return ClockFit(offset_ns=float(base + c), drift_ppm=d * 1e6, bound_ns=bound, n=n, ref_ns=ref,
                    first_ns=first, last_ns=last, growth_ppm=growth, drift_min_ppm=d_min * 1e6,
                    drift_max_ppm=d_max * 1e6)


def _fallback(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, ref: int, base: int, first: int,
              last: int, n: int, message: str) -> ClockFit:
    """Inconsistent samples: least squares through the bracket midpoints; the 'bound' is
    how far that line strays from the brackets, not a guarantee (consistent=False)."""
    log.warning("clocksync: %s; falling back to least squares", message)
    mid = (lo + hi) / 2
    if len(np.unique(x)) > 1:
        d, c = np.polyfit(x, mid, 1)
    else:
        d, c = 0.0, float(mid.mean())
    line = d * x + c
    stray = np.maximum(np.maximum(lo - line, line - hi), 0)
    bound = float(np.max(stray + (hi - lo) / 2))
    return ClockFit(offset_ns=float(base + c), drift_ppm=float(d) * 1e6, bound_ns=math.ceil(bound) + 1.0,
                    n=n, ref_ns=ref, first_ns=first, last_ns=last, growth_ppm=abs(float(d)) * 1e6,
                    drift_min_ppm=float(d) * 1e6, drift_max_ppm=float(d) * 1e6, consistent=False,
                    message=message)


__all__ = ["ClockSync", "ClockFit", "fit", "DEFAULT_MAX_DRIFT_PPM"]
