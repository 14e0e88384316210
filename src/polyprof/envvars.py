"""Numbers read from ``POLYPROF_*`` environment variables (limits, bounds, deadlines).

One reader, so every such variable is checked the same way and its error names the
variable, the text given and the unit expected. (The session options of ``polyprof
run`` are declared in ``collect/options.py`` and read there.)
"""

from __future__ import annotations

import math
import os

from .errors import PolyprofError


def number(name: str, default: float, unit: str, *, zero: bool = False,
           most: float = math.inf) -> float:
    """``name``'s value, a finite number above 0 (or 0 with ``zero``) and at most
    ``most``; ``default`` where the variable is unset or blank. Anything else (text,
    ``nan``, ``inf``, out of range) is a :class:`PolyprofError` naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        got = float(raw)
    except ValueError:
        got = math.nan
    if math.isfinite(got) and (got >= 0 if zero else got > 0) and got <= most:
        return got
    low = "from 0" if zero else "above 0"
    high = "" if math.isinf(most) else f" to {most:g}"
    raise PolyprofError(f"{name}={raw!r}: expected {unit}, a number {low}{high}")


def whole(name: str, default: int, unit: str, *, zero: bool = False, most: float = math.inf) -> int:
    """:func:`number` as a whole number (a fraction is cut off)."""
    return int(number(name, default, unit, zero=zero, most=most))
