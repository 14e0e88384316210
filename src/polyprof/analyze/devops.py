"""Device time per framework op: the device-side table of XProf's framework_op_stats.

Each device activity is attributed to one op name: the framework op the trace gives
the activity itself (``tf_op`` / ``op`` stats of XLA ops, read as XProf reads them:
``jit(f)/jit(main)/add:`` is the op ``jit(f)/jit(main)/add``), else the framework op of the
host call that launched it (``derive/correlate.py``), else the activity's own name.
Per-op device time uses each activity's per-op duration (``analyze.common.op_durations``:
XProf's ``device_duration_ps`` where present). The XSpace writer gives XProf these same
names (as ``tf_op``), so both tools group device time the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import re

import numpy as np

from ..derive import cache
from ..trace import keys
from ..trace.core import Trace
from .common import device_view
from .frames import empty_frame, factorize, frame, order_desc
from .grouping import group_stats
from .window import WindowArg

if TYPE_CHECKING:
    from .table import Table

#: stats that name an activity's framework op directly (XProf's name first)
OP_STATS = ("tf_op", keys.OP)


# patterns compiled on first use (re's cache), not at import: a GPU trace needs none
_TF_NAME = r"[A-Za-z0-9.][A-Za-z0-9_./>-]*"
_TF_TYPE = r"[A-Z_][a-zA-Z0-9_]*"
_JAX_TYPE = r"[a-z_][a-z0-9_]*(\[.*\])?"


def framework_op_name(fullname: str) -> str:
    """The op name in a TF/JAX ``tf_op`` stat (``name:Type``, ``scope/add:``), read as
    XProf reads it (tsl ``ParseTfOpFullname``); other text is returned whole."""
    name, sep, typ = fullname.partition(":")
    if not sep or name == "Iterator":
        return fullname
    if re.fullmatch(_TF_NAME, name) and re.fullmatch(_TF_TYPE, typ):
        return name
    if not typ:
        return name
    return name if re.fullmatch(_JAX_TYPE, typ) else fullname


def device_op_names(trace: Trace) -> np.ndarray:
    """The op name (object array) of every row of ``device_view(trace)``."""
    return cache.memo(trace, "device_op_names", _names)


def _names(trace: Trace) -> np.ndarray:
    v = device_view(trace)
    strings = np.asarray(trace.strings, dtype=object)
    out = strings[trace.events["name"][v.rows]] if len(v.rows) else np.zeros(0, object)
    corr = cache.correlation(trace)
    has_op = corr.op >= 0
    if has_op.any():
        out[has_op] = strings[trace.events["name"][corr.op[has_op]]]
    for key in reversed(OP_STATS):  # the first key wins
        col = trace.stats.loaded().get(key)  # typed at load by the XSpace reader; no deferred decode
        if col is None or col.kind != "O" or not len(v.rows):
            continue
        m, vals = col.lookup(v.rows)
        ok = np.fromiter((isinstance(x, str) and x != "" for x in vals), bool, len(vals))
        idx = np.flatnonzero(m)[ok]
        parsed = {x: framework_op_name(x) for x in set(vals[ok].tolist())}
        out[idx] = [parsed[x] for x in vals[ok].tolist()]
    return out


def device_op_breakdown(trace: Trace, window: WindowArg = None) -> Table:
    """Device time per framework op, one row per (device, op).

    Columns: ``plane``, ``op`` (see the module doc), ``count`` (device activities),
    ``total_ns`` (their summed per-op device time), ``mean_ns``, ``share_pct`` (of the
    device's summed activity time). Sorted by ``total_ns``, largest first. With a
    ``window``, the activity launched in its steps.
    """
    v = device_view(trace, window)
    cols = ["plane", "op", "count", "total_ns", "mean_ns", "share_pct"]
    c = v.counted
    if not c.any():
        return empty_frame(cols, ("plane", "op"), np.float64)
    codes, uniq = factorize(device_op_names(trace)[c])
    key = v.plane[c].astype(np.int64) * len(uniq) + codes
    g = group_stats(key, v.dur[c])
    plane, op = np.divmod(g["key"], len(uniq))
    per_plane = np.bincount(v.plane[c], weights=v.dur[c].astype(np.float64), minlength=len(trace.planes))
    out = frame({
        "plane": np.array([trace.planes[int(p)].name for p in plane], object),
        "op": np.asarray(uniq, object)[op], "count": g["count"], "total_ns": g["total"], "mean_ns": g["mean"],
        "share_pct": 100.0 * g["total"] / np.maximum(per_plane[plane], 1)}, order=order_desc(g["total"]))
    return out
