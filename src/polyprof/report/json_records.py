"""A table's rows as JSON records, written column by column with NumPy, without pandas.

``[{"column":value,...},...]``, compact. How values are printed (docs/analysis.md,
"Numbers in --json"; the rules of pandas' ``to_json(orient="records",
double_precision=15)``, which wrote ``--json`` before, so its documents stay byte for
byte what they were):

- integers (and times, which are integer nanoseconds) in full: ``123``;
- floats with up to 15 digits after the point, trailing zeros dropped but one kept
  (``0.5``, ``2.0``, ``0.333333333333333``); beyond 1e16 or below 1e-15 (not 0) as
  C's ``%.15g`` (``1e+20``, ``5e-16``);
- NaN, infinities, None: ``null``; booleans ``true`` / ``false``;
- text JSON-escaped with ASCII only (``\\u00e9``) and ``/`` as ``\\/``;
- in object columns, lists and tuples as arrays, dicts as objects, bytes as UTF-8
  text, anything else as the text of ``str()``.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring_ascii
from typing import Any

import numpy as np

from ..analyze.table import Table

#: pandas' (ultrajson's) bounds of the fixed-point form
_BIG, _SMALL = 1e16, 1e-15
_DIGITS = 15
_SCALE = 10.0 ** _DIGITS


def records(t: Table) -> str:
    """The rows of ``t`` as one compact JSON array of objects."""
    n = len(t)
    if not n:
        return "[]"
    acc: np.ndarray | None = None
    for i, name in enumerate(t.columns):
        key = ("{" if i == 0 else ",") + text(name) + ":"
        part = np.empty(n, object)
        part[:] = key
        acc = part + values(t[name]) if acc is None else acc + part + values(t[name])
    assert acc is not None
    return "[" + "},".join(acc.tolist()) + "}]"


def values(a: np.ndarray) -> np.ndarray:
    """Each value of a column as its JSON text (an object array of str)."""
    kind = a.dtype.kind
    out = np.empty(len(a), object)
    if kind == "b":
        out[:] = np.where(a, "true", "false").tolist()
    elif kind in "iu":
        out[:] = list(map(str, a.tolist()))
    elif kind == "f":
        out[:] = floats(a.astype(np.float64, copy=False))
    else:
        out[:] = [value(v) for v in a.tolist()]
    return out


def floats(a: np.ndarray) -> list[str]:
    """float64 values as JSON text (the rules in the module's docstring)."""
    n = len(a)
    text: list[str] = ["null"] * n
    finite = np.isfinite(a)
    v = np.abs(a)
    wide = finite & ((v > _BIG) | ((v != 0) & (v < _SMALL)))
    for i in np.flatnonzero(wide).tolist():
        text[i] = "%.15g" % float(a[i])
    fixed = np.flatnonzero(finite & ~wide)
    if len(fixed):
        f = v[fixed]
        whole = f.astype(np.uint64)
        tmp = (f - whole.astype(np.float64)) * _SCALE
        frac = tmp.astype(np.uint64)
        diff = tmp - frac.astype(np.float64)
        frac += (diff > 0.5) | ((diff == 0.5) & ((frac == 0) | ((frac & 1) == 1)))  # half: up when odd or 0
        over = frac >= np.uint64(10 ** _DIGITS)
        frac[over] = 0
        whole[over] += np.uint64(1)
        neg = a[fixed] < 0
        for i, w, fr, s in zip(fixed.tolist(), whole.tolist(), frac.tolist(), neg.tolist()):
            digits = f"{fr:015d}".rstrip("0") if fr else "0"
            text[i] = f"-{w}.{digits}" if s else f"{w}.{digits}"
    return text


def value(v: Any) -> str:
    """One Python value as JSON text (an object column's)."""
    if v is None:
        return "null"
    if isinstance(v, str):
        return text(v)
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return floats(np.array([v], np.float64))[0] if math.isfinite(v) else "null"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(map(value, v)) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(text(str(k)) + ":" + value(x) for k, x in v.items()) + "}"
    if isinstance(v, bytes):
        return text(v.decode("utf-8", "replace"))
    if type(v).__name__ in ("NAType", "NaTType"):  # pandas' missing values, in a table made from a DataFrame
        return "null"
    return text(str(v))


def python_records(t: Table) -> list[dict[str, Any]]:
    """The rows of ``t`` as dicts of Python values, missing values (NaN, None) None: for
    documents that print their numbers with orjson (``diff --json``, a store's ``--json``)."""
    return [{k: None if v is None or (isinstance(v, float) and v != v) else v for k, v in r.items()}
            for r in t.to_dicts()]


def text(s: str) -> str:
    """A JSON string: ASCII only, ``/`` escaped."""
    out = encode_basestring_ascii(s)
    return out.replace("/", "\\/") if "/" in out else out
