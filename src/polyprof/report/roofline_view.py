"""The roofline chart of the HTML report: ops of ``op_efficiency`` as points (arithmetic
intensity against achieved FLOP/s, log-log, area by time) under the device's roofs
(``analyze/peaks.py``), drawn here as one inline SVG; the page only places it."""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np

from ..analyze.efficiency import resolve_peak
from ..analyze.peaks import UNRECOGNISED
from ..analyze.frames import column
from .tables import Report

W, H = 640, 360  # the chart, px
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 40
MAX_POINTS = 60


def _log_range(values: np.ndarray, lo_pad: float = 0.5, hi_pad: float = 0.5) -> tuple[float, float]:
    v = values[np.isfinite(values) & (values > 0)]
    if not len(v):
        return 0.0, 1.0
    return math.floor(math.log10(v.min()) - lo_pad), math.ceil(math.log10(v.max()) + hi_pad)


def roofline_svg(report: Report) -> str:
    """The chart as SVG text; "" when no op has both a FLOP and a byte figure."""
    oe = report.tables["op_efficiency"]
    if not len(oe):
        return ""
    x, y, t = (np.asarray(column(oe, c), np.float64) for c in ("intensity", "flops_per_s", "time_ns"))
    ok = np.flatnonzero(np.isfinite(x) & (x > 0) & np.isfinite(y) & (y > 0) & (t > 0))
    if not len(ok):
        return ""
    ok = ok[np.argsort(-t[ok], kind="stable")][:MAX_POINTS]
    pk = resolve_peak(report.trace, None)
    prec = [p for p in dict.fromkeys(column(oe, "precision")[ok].tolist()) if pk and pk.flops(p)]
    roofs = [(p or "peak", pk.flops(p)) for p in prec] if pk else []
    bw = pk.bandwidth if pk else 0.0
    ridge = [f / bw for _, f in roofs] if bw else []
    x0, x1 = _log_range(np.r_[x[ok], ridge])
    y0, y1 = _log_range(np.r_[y[ok], [f for _, f in roofs]])

    def px(v: float) -> float:
        return LEFT + (math.log10(v) - x0) / (x1 - x0) * (W - LEFT - RIGHT)

    def py(v: float) -> float:
        return H - BOTTOM - (math.log10(v) - y0) / (y1 - y0) * (H - TOP - BOTTOM)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
           'class="roofline" font-size="10">']
    for e in range(int(x0), int(x1) + 1):  # grid and labels, one per decade
        out.append(f'<line x1="{px(10 ** e):.1f}" y1="{TOP}" x2="{px(10 ** e):.1f}" y2="{H - BOTTOM}" stroke="#ddd"/>'
                   f'<text x="{px(10 ** e):.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">1e{e}</text>')
    for e in range(int(y0), int(y1) + 1):
        out.append(f'<line x1="{LEFT}" y1="{py(10 ** e):.1f}" x2="{W - RIGHT}" y2="{py(10 ** e):.1f}" stroke="#ddd"/>'
                   f'<text x="{LEFT - 4}" y="{py(10 ** e) + 3:.1f}" text-anchor="end">1e{e}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 6}" text-anchor="middle">arithmetic intensity '
               '(FLOP/byte)</text><text x="12" y="{0}" transform="rotate(-90 12 {0})" text-anchor="middle">'
               'achieved FLOP/s</text>'.format((TOP + H - BOTTOM) / 2))
    ridges: list[float | None] = list(ridge) if ridge else [None] * len(roofs)
    for (name, peak), r in zip(roofs, ridges):
        a = 10 ** x0
        pts = [(a, min(peak, a * bw) if bw else peak)]
        if r is not None and 10 ** x0 < r < 10 ** x1:
            pts.append((r, peak))
        pts.append((10 ** x1, peak))
        path = " ".join(f"{px(u):.1f},{py(max(v, 10 ** y0)):.1f}" for u, v in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="#c33" stroke-width="1.5"/>'
                   f'<text x="{W - RIGHT - 2}" y="{py(peak) - 3:.1f}" text-anchor="end" fill="#c33">'
                   f'{html.escape(name)} {peak / 1e12:.4g} TFLOP/s</text>')
    share = t[ok] / t[ok].sum()
    names, where = column(oe, "name"), column(oe, "where")
    roof_pct = column(oe, "roofline_pct")
    for i, s in zip(ok.tolist(), share.tolist()):
        rad = 3 + 17 * math.sqrt(s)
        colour = "#36c" if where[i] == "device" else "#999"
        tip = (f"{names[i]}: {y[i] / 1e12:.4g} TFLOP/s at {x[i]:.3g} FLOP/B, {t[i] / 1e6:.4g} ms"
               + (f", {roof_pct[i]:.1f}% of roofline" if np.isfinite(roof_pct[i]) else ""))
        out.append(f'<circle cx="{px(x[i]):.1f}" cy="{py(y[i]):.1f}" r="{rad:.1f}" fill="{colour}" '
                   f'fill-opacity="0.45" stroke="{colour}"><title>{html.escape(tip)}</title></circle>')
    out.append("</svg>")
    return "".join(out)


def roofline_view(report: Report) -> dict[str, Any]:
    """What the page shows: the SVG and a line on the peaks used."""
    svg = roofline_svg(report)
    pk = resolve_peak(report.trace, None) if svg else None
    why = f" for {pk.model} ({pk.source.removeprefix(UNRECOGNISED)})" if pk else ""  # (a device not recognised)
    note = (f"roofs: {pk.model} ({pk.source})" if pk and pk.rates else
            f"no device peaks known{why}: points only (--peak gives them)") if svg else ""
    return {"svg": svg, "note": note}
