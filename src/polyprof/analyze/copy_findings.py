"""The copy findings: copies from or to pageable host memory, and many small copies,
each per device against its analysed span. Read from every copy (``copies.per_copy``),
so they see what the ``copies`` table sums. Thresholds are module constants, as in
``findings.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..trace.core import Trace
from .advice import suggestion
from .common import qualified_names
from .copies import KINDS, SMALL_BYTES, PerCopy, per_copy
from .units import fmt_size
from .finding import Finding
from .frames import column
from ..trace.sorting import member, unique, unique_counts

PAGEABLE_SPAN_SHARE = 2.0  # pageable copies' time, share of the device's analysed span
PAGEABLE_COPY_SHARE = 25.0  # ... and of the device's copy time (else other copies are the point)
PAGEABLE_HIGH_SHARE = 10.0  # of the span: high severity
SMALL_MIN_COUNT = 100  # copies under 1 MiB (copies.SMALL_BYTES) on a device, fills not counted
SMALL_SPAN_SHARE = 2.0  # their time, share of the device's analysed span
SMALL_MAX_GBPS = 2.0  # ... and their achieved bandwidth (bytes over their time) below this, GB/s
SMALL_HIGH_SHARE = 10.0  # of the span: high severity
_MEMSET = KINDS.index("memset")
_TOP = 5  # events listed per finding


def copy_findings(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    return [*pageable_copies(trace, t), *small_copies(trace, t)]


def pageable_copies(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    """Per device: copies from or to pageable host memory, worst device first."""
    c = per_copy(trace)  # (made once for the table and both rules)
    return _worst_first(_pageable(trace, c, _spans(t))) if len(c.rows) else []


def small_copies(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    """Per device: many small, slow copies, worst device first."""
    c = per_copy(trace)  # (made once for the table and both rules)
    return _worst_first(_small(trace, c, _spans(t))) if len(c.rows) else []


def _worst_first(found: list[Finding]) -> list[Finding]:
    return sorted(found, key=lambda f: -f.evidence["share_pct"])


def _spans(t: Callable[[str], Any]) -> dict[str, int]:
    """Each device's analysed span (the temporal breakdown's device rows; the first row of
    a name wins, as ``findings._by_plane``)."""
    tb = t("temporal_breakdown")
    out: dict[str, int] = {}
    if not len(tb):
        return out
    keep = column(tb, "track_id") == -1
    for plane, span in zip(column(tb, "plane")[keep].tolist(), column(tb, "span_ns")[keep].tolist()):
        out.setdefault(str(plane), int(span or 0))
    return out


def _gbps(nbytes: float, ns: float) -> float | None:
    """Bytes over ns (GB/s), None without time."""
    return round(nbytes / ns, 4) if ns > 0 else None


def _sums(c: PerCopy, sel: np.ndarray) -> tuple[int, int, int, float | None]:
    """(count, ns, bytes of those with a size, GB/s over the time of those with a size);
    a copy a time window cuts: its part inside, time and bytes (``PerCopy.moved``)."""
    sized = sel & ~np.isnan(c.size)
    nbytes = float(c.moved[sized].sum())
    return int(sel.sum()), int(c.dur[sel].sum()), int(nbytes), _gbps(nbytes, float(c.dur[sized].sum()))


def _by_kind(c: PerCopy, sel: np.ndarray) -> dict[str, int]:
    kinds, n = unique_counts(c.kind[sel])
    return {KINDS[int(k)]: int(x) for k, x in zip(kinds.tolist(), n.tolist())}


def _top(trace: Trace, c: PerCopy, sel: np.ndarray) -> list[dict[str, Any]]:
    """The copies of ``sel`` per (name, kind), most time first: count, total_ns,
    total_bytes, mean_bytes, gbps."""
    at = np.flatnonzero(sel)
    codes, labels, _ = qualified_names(trace, c.rows[at])  # (named as kernel_breakdown's rows: module/op)
    key = codes * len(KINDS) + c.kind[at]
    out = []
    for k in unique(key).tolist():
        g = np.zeros(len(sel), bool)
        g[at[key == k]] = True
        n, ns, nbytes, gbps = _sums(c, g)
        sized = int((g & ~np.isnan(c.size)).sum())
        out.append({"name": labels[k // len(KINDS)], "kind": KINDS[k % len(KINDS)], "count": n,
                    "total_ns": ns, "total_bytes": nbytes, "mean_bytes": nbytes // sized if sized else None,
                    "gbps": gbps})
    out.sort(key=lambda e: (-e["total_ns"], e["name"], e["kind"]))
    return out[:_TOP]


def _pageable(trace: Trace, c: PerCopy, spans: dict[str, int]) -> list[Finding]:
    out = []
    for plane in unique(c.plane[c.pageable]).tolist():
        name = trace.planes[plane].name
        span = spans.get(name, 0)
        on = c.plane == plane
        copies = on & (c.kind != _MEMSET)
        sel = on & c.pageable
        n, ns, nbytes, gbps = _sums(c, sel)
        copy_ns = int(c.dur[copies].sum())
        share = 100.0 * ns / span if span else 0.0
        of_copies = 100.0 * ns / copy_ns if copy_ns else 0.0
        if share < PAGEABLE_SPAN_SHARE or of_copies < PAGEABLE_COPY_SHARE:
            continue
        # the same kinds of copy from or to pinned memory on this device, for comparison
        pinned = copies & ~c.pageable & member(c.kind, unique(c.kind[sel]))
        title = (f"{name}: copies from or to pageable host memory take {share:.0f}% of the span "
                 f"({n} copies, {fmt_size(nbytes)}" + (f" at {gbps:.1f} GB/s)" if gbps is not None else ")"))
        out.append(Finding(
            "pageable_copies", title, "high" if share >= PAGEABLE_HIGH_SHARE else "medium", name,
            {"copies": n, "time_ns": ns, "moved_bytes": nbytes, "gbps": gbps,
             **({"pinned_gbps": _sums(c, pinned)[3]} if pinned.any() else {}), "by_kind": _by_kind(c, sel),
             "span_ns": span, "share_pct": round(share, 2), "all_copies_ns": copy_ns,
             "pct_of_copy_time": round(of_copies, 2)},
            _top(trace, c, sel), suggestion(trace, "pageable_copies")))
    return out


def _small(trace: Trace, c: PerCopy, spans: dict[str, int]) -> list[Finding]:
    small = (c.kind != _MEMSET) & ~np.isnan(c.size) & (np.nan_to_num(c.size, nan=SMALL_BYTES) < SMALL_BYTES)
    out = []
    for plane in unique(c.plane[small]).tolist():
        name = trace.planes[plane].name
        span = spans.get(name, 0)
        sel = small & (c.plane == plane)
        n, ns, nbytes, gbps = _sums(c, sel)
        share = 100.0 * ns / span if span else 0.0
        if n < SMALL_MIN_COUNT or share < SMALL_SPAN_SHARE or gbps is None or gbps >= SMALL_MAX_GBPS:
            continue
        large = (c.plane == plane) & (c.kind != _MEMSET) & (np.nan_to_num(c.size) >= SMALL_BYTES)
        copies = (c.plane == plane) & (c.kind != _MEMSET)
        out.append(Finding(
            "small_copies", f"{name}: {n} copies under {SMALL_BYTES >> 20} MiB take {share:.0f}% of the span "
                            f"({fmt_size(nbytes / n)} each on average, {gbps:.2f} GB/s)",
            "high" if share >= SMALL_HIGH_SHARE else "medium", name,
            {"copies": n, "time_ns": ns, "moved_bytes": nbytes, "gbps": gbps, "mean_bytes": nbytes // n,
             "all_copies": int(copies.sum()), "by_kind": _by_kind(c, sel),
             **({"large_gbps": _sums(c, large)[3]} if large.any() else {}), "span_ns": span,
             "share_pct": round(share, 2)},
            _top(trace, c, sel), suggestion(trace, "small_copies")))
    return out
