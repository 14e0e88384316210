"""Args not typed at load, kept as JSON text (one batch per 8192 events), typed on first use.

The reader hands these functions to the Trace's ``StatTable.defer``: the decode of
every column, a cheap test of whether a key may be in the text, and the decode of some
keys for some rows. The text was checked at load (UTF-8, numbers in range), so nothing
here can fail on it.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from .. import kineto_memory
from ...trace.stats import StatColumn, merge_columns
from .args import _EAGER_NAMES, _group_args, _typed_stat, arg_names
from .events import _DECODE_ANY


def _decode_deferred_args(batches: list[tuple[int, bytes]], late: dict[str, list[tuple[np.ndarray, np.ndarray]]]
                          ) -> dict[str, StatColumn]:
    """The stat columns of every arg not typed at load, as the reader types them (one
    part per batch and arg name, then the parts of E events; see TraceBuilder.build).

    The text was checked at load, so this cannot fail: its nesting passed msgspec's
    recursion limit then; if a deeper call stack now makes it fail, it runs again on a
    thread of its own (a fresh stack).
    """
    try:
        return _deferred_columns(batches, late)
    except RecursionError:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="polyprof-args") as pool:
            return pool.submit(_deferred_columns, batches, late).result()


def _args_may_hold(batches: list[tuple[int, bytes]], late: dict[str, Any], key: str) -> bool:
    """Whether any deferred arg may be called ``key``: its JSON name, quoted, occurs in
    the text. Conservative: a batch with a \\u escape, or a name a writer could escape
    otherwise, counts as a yes. Looking up a stat the args do not have (e.g. XProf's
    ``device_duration_ps`` on a Kineto trace) then decodes nothing."""
    if key in late:
        return True
    names = arg_names(key)
    if any(c in n for n in names for c in '"\\/') or any(ord(c) < 0x20 or ord(c) > 0x7E for n in names for c in n):
        return True
    needles = [b'"' + n.encode() + b'"' for n in names]
    return any(b"\\u" in text or any(nd in text for nd in needles) for _, text in batches)


_DECODE_RAWS = msgspec.json.Decoder(list[msgspec.Raw]).decode


def _decode_arg_rows(batches: list[tuple[int, bytes]], late: dict[str, list[tuple[np.ndarray, np.ndarray]]],
                     keys: list[str], rows: np.ndarray) -> dict[str, StatColumn]:
    """Some deferred args for some rows only: each batch holding one of the rows is split
    into its events' JSON texts (no values built) and just those are decoded. Values are
    typed from these rows as the full decode types a column."""
    names = {k: arg_names(k) for k in keys}
    rows = np.unique(np.asarray(rows, np.int64))
    starts = [b for b, _ in batches] + [np.iinfo(np.int64).max]
    got: dict[str, tuple[list[int], list[Any]]] = {k: ([], []) for k in keys}
    for i, (base, text) in enumerate(batches):
        sel = rows[(rows >= base) & (rows < starts[i + 1])]
        if not len(sel):
            continue
        raws = _DECODE_RAWS(text)
        for r in sel.tolist():
            a = _DECODE_ANY(raws[r - base]) if r - base < len(raws) else None
            if not a:
                continue
            if type(a) is not dict:
                a = {"args": a}
            for k in keys:
                for n in names[k]:
                    if a.get(n) is not None:
                        got[k][0].append(r)
                        got[k][1].append(a[n])
                        break
    out = {}
    for k in keys:
        r_list, vals = got[k]
        for lr, lv in late.get(k, []):
            m = np.isin(lr, rows)
            r_list.extend(lr[m].tolist())
            vals.extend(list(lv[m]))
        if r_list:
            _, r_arr, arr = _typed_stat(names[k][0], np.asarray(r_list, np.int64), vals)
            if len(r_arr):
                out[k] = StatColumn(r_arr, arr)
    return out


def _deferred_columns(batches: list[tuple[int, bytes]], late: dict[str, list[tuple[np.ndarray, np.ndarray]]]
                      ) -> dict[str, StatColumn]:
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for base, text in batches:
        groups = _group_args(_DECODE_ANY(text), base)
        for name in _EAGER_NAMES:
            groups.pop(name, None)
        for name in kineto_memory.MEMORY_KEYS:
            groups.pop(name, None)
        for name, (rows, vals) in groups.items():
            key, r, arr = _typed_stat(name, np.array(rows, np.int64), vals)
            if len(r):
                parts.setdefault(key, []).append((r, arr))
    for key, p in late.items():
        parts.setdefault(key, []).extend(p)
    return {key: merge_columns(p) for key, p in parts.items()}
