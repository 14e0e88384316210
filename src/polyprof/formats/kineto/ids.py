"""Correlation and external ids, typed at load (the args every analysis reads).

A batch of args is one JSON text ``[args, ...]``. The fast path decodes it into structs
that hold only the id fields, as int64; anything else (strings, nulls, out-of-range
numbers, two names of one key in one event) goes through the general path, which gives
the same columns the deferred decode of any other arg gives.
"""

from __future__ import annotations

from operator import attrgetter

import msgspec
import numpy as np

from .args import _ARG_KEYS, _EAGER_NAMES, _group_args
from .events import _DECODE_ANY

_ABSENT = -2 ** 63  # an eager arg an event does not have (JSON holding this very number: not the fast path)
_ABSENT_TEXT = str(_ABSENT).encode()


class _KinetoIds(msgspec.Struct, gc=False):
    """The args of an event typed at load (``_EAGER_NAMES``) when they are integers, as
    Kineto writes them; other args are skipped. Other values: the general path."""

    correlation: int = _ABSENT
    external: int = msgspec.field(default=_ABSENT, name="External id")


class _EagerInts(_KinetoIds, gc=False):
    correlation_id: int = _ABSENT
    external_id: int = _ABSENT


_EAGER_FIELDS = tuple(zip(_EAGER_NAMES, map(attrgetter, ("correlation", "external", "correlation_id",
                                                         "external_id"))))
_DECODE_EAGER = (msgspec.json.Decoder(list[_KinetoIds]).decode, msgspec.json.Decoder(list[_EagerInts]).decode)


def fast_ids(text: bytes, base: int) -> list[tuple[str, np.ndarray, np.ndarray]] | None:
    """(stat key, rows, int64 values) of the ids in one batch (``[args, ...]`` from row
    ``base``), or None where the fast path does not apply: the values are not all int64
    (or absent), or an event has two names of one stat key."""
    # the stat-key spellings (files polyprof wrote) need a "_" (or an escape): else skipped
    all_names = b"_" in text or b"\\" in text
    fields = _EAGER_FIELDS if all_names else _EAGER_FIELDS[:2]
    try:
        if _ABSENT_TEXT in text:
            raise ValueError
        items = _DECODE_EAGER[all_names](text)
        cols = [(name, np.fromiter(map(get, items), np.int64, len(items))) for name, get in fields]
    except (msgspec.ValidationError, OverflowError, ValueError):  # other values (or not an object)
        return None
    found = [(_ARG_KEYS.get(name, name), col, col != _ABSENT) for name, col in cols]
    found = [f for f in found if f[2].any()]
    if len({key for key, _, _ in found}) != len(found):
        return None
    return [(key, np.flatnonzero(has) + base, col[has]) for key, col, has in found]


def id_columns(correlation: np.ndarray, external: np.ndarray, base: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """What :func:`fast_ids` gives, from the compiled tokenizer's columns of the two ids
    (``_ABSENT`` where an event has none)."""
    found = [(_ARG_KEYS[name], col, col != _ABSENT) for name, col in (("correlation", correlation),
                                                                     ("External id", external))]
    return [(key, np.flatnonzero(has) + base, col[has]) for key, col, has in found if has.any()]


def id_groups(text: bytes, base: int) -> dict[str, tuple[list[int], list]]:
    """The general path: (rows, values) of each id arg name in one batch, untyped."""
    return {name: g for name, g in _group_args(_DECODE_ANY(text), base).items() if name in _EAGER_NAMES}
