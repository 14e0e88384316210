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
    codes, texts = device_op_codes(trace)
    return texts[codes]


def device_op_codes(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(per row of ``device_view(trace)`` a code, the op name of each code: an object
    array): one code per distinct name among the rows. Computed once per trace."""
    return cache.memo(trace, "device_op_codes", _codes)


def _codes(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    v = device_view(trace)
    strings = trace.strings
    # codes: string ids of the trace's names, then ids past them for op names that are not one
    codes = np.asarray(trace.events["name"][v.rows], np.int64) if len(v.rows) else np.zeros(0, np.int64)
    corr = cache.correlation(trace)
    has_op = corr.op >= 0
    if has_op.any():
        codes[has_op] = trace.events["name"][corr.op[has_op]]
    extra: dict[str, int] = {}
    for key in reversed(OP_STATS):  # the first key wins
        col = trace.stats.loaded().get(key)  # typed at load by the XSpace reader; no deferred decode
        if col is None or col.kind != "O" or not len(v.rows):
            continue
        m, vals = col.lookup(v.rows)
        values = vals.tolist()
        try:
            distinct = set(values)
        except TypeError:  # unhashable values, which name no op
            values = [x if isinstance(x, str) else None for x in values]
            distinct = set(values)
        code_of = {}  # per distinct value: its name's code, -1 for no text
        for x in distinct:
            if not isinstance(x, str) or not x:
                code_of[x] = -1
                continue
            name = framework_op_name(x)
            i = trace.string_id(name)
            code_of[x] = i if i >= 0 else extra.setdefault(name, len(strings) + len(extra))
        got = np.fromiter(map(code_of.__getitem__, values), np.int64, len(values))
        ok = got >= 0
        codes[np.flatnonzero(m)[ok]] = got[ok]
    texts = np.empty(len(strings) + len(extra), object)
    texts[:len(strings)] = strings
    texts[len(strings):] = list(extra)
    return codes, texts


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
    op_codes, texts = device_op_codes(trace)
    codes, uniq_codes = factorize(op_codes[c])
    uniq = texts[uniq_codes]
    if len(set(uniq.tolist())) < len(uniq):  # a string table holding a text twice: by the texts
        codes, uniq = factorize(uniq[codes])
    key = v.plane[c].astype(np.int64) * len(uniq) + codes
    g = group_stats(key, v.dur[c])
    plane, op = np.divmod(g["key"], len(uniq))
    per_plane = np.bincount(v.plane[c], weights=v.dur[c].astype(np.float64), minlength=len(trace.planes))
    out = frame({
        "plane": np.array([trace.planes[int(p)].name for p in plane], object),
        "op": np.asarray(uniq, object)[op], "count": g["count"], "total_ns": g["total"], "mean_ns": g["mean"],
        "share_pct": 100.0 * g["total"] / np.maximum(per_plane[plane], 1)}, order=order_desc(g["total"]))
    return out
