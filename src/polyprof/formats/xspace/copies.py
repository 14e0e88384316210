"""The size and memory kinds of XLA's GPU copies and fills, from their detail stats.

XLA's GPU tracer describes each copy in a ``memcpy_details`` stat and each fill in a
``memset_details`` (or ``Memset_details``) one: space-separated ``key:value`` tokens,
``kind_src:device kind_dst:pinned size:4 dest:0 async:1`` (CUPTI, recent XLA),
``size:4 dest:1 async:1`` (older TensorFlow), ``kind:unknown num_bytes:4 async:0``
(fills; polyprof's own writer, ``writers/xprof_stats.py``). The size becomes the event's
``bytes`` stat (``trace/keys.py``), the memory kinds its ``src kind`` and ``dst kind``
(``Pageable``, ``Pinned``, ``Device``, as the CUPTI plugin names them), where the event
has no such stat already; the copy's direction stays in its name (``MemcpyH2D``).
"""

from __future__ import annotations

import numpy as np

from ...trace import keys
from ...trace.core import Trace
from ...trace.factorize import factorize
from ...trace.sorting import first_and_inverse, member
from ...trace.stats import StatColumn

#: the detail stats, as XLA spells them
DETAILS = ("memcpy_details", "memset_details", "Memcpy_details", "Memset_details")
#: tokens that give the size
SIZE_TOKENS = ("num_bytes", "size")
#: token -> stat of the memory kinds
KIND_TOKENS = {"kind_src": keys.SRC_KIND, "kind_dst": keys.DST_KIND}


def _tokens(text: object) -> dict[str, str]:
    if not isinstance(text, str):
        return {}
    return dict(t.split(":", 1) for t in text.split() if ":" in t)


def copy_details(trace: Trace) -> None:
    """Set ``bytes``, ``src kind`` and ``dst kind`` of the events with detail stats (see the
    module doc); values a stat already holds stay. Each distinct text is parsed once."""
    found: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for key in DETAILS:
        if not trace.stats.may_have(key):
            continue
        try:
            col = trace.stats[key]
        except KeyError:
            continue
        codes, texts = factorize(np.asarray(col.values, object))
        tokens = [_tokens(t) for t in texts.tolist()]
        sizes = [next((t[k] for k in SIZE_TOKENS if k in t), "") for t in tokens]
        per_text: dict[str, list[object]] = {
            keys.BYTES: [int(x) if x.isdigit() else None for x in sizes],
            **{stat: [t.get(tok, "").capitalize() or None for t in tokens] for tok, stat in KIND_TOKENS.items()}}
        for stat, vals in per_text.items():
            ok = np.array([x is not None for x in vals], bool)[codes]
            if ok.any():
                found.setdefault(stat, []).append((col.rows[ok], np.array(vals, object)[codes[ok]]))
    for stat, parts in found.items():
        every = np.concatenate([r for r, _ in parts])
        first, _ = first_and_inverse(every)  # (a row of two detail stats: the first's)
        rows, got = every[first], np.concatenate([x for _, x in parts])[first]
        _add(trace, stat, rows, got.astype(np.int64) if stat == keys.BYTES else got)


def _add(trace: Trace, stat: str, rows: np.ndarray, vals: np.ndarray) -> None:
    """Put ``vals`` at ``rows`` into ``stat``, keeping the values it holds."""
    if trace.stats.may_have(stat):
        old = trace.stats[stat]
        new = ~member(rows, old.rows)
        rows = np.concatenate([old.rows, rows[new]])
        both_numbers = old.kind in "iuf" and vals.dtype.kind in "iuf"
        dtype = np.result_type(old.values.dtype, vals.dtype) if both_numbers else np.dtype(object)
        vals = np.concatenate([np.asarray(old.values).astype(dtype), vals[new].astype(dtype)])
    order = np.argsort(rows, kind="stable")
    trace.stats.put(stat, StatColumn(rows[order], vals[order]))
