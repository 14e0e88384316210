"""One line's events, from columns into the bytes of ``XLine.events`` entries: the
compiled encoder (``_wire.encode``) or, without it, protobuf's own messages. Either
way the line message takes them with ``MergeFromString``, so the writer never makes a
Python object per event when the extension is built; tests/test_xspace_decode.py checks
the two give the same messages."""

from __future__ import annotations

from typing import Any

import numpy as np

from .decode import _wire
from .wire import pb

_FIELD = {1: "double_value", 2: "uint64_value", 3: "int64_value", 4: "str_value", 5: "bytes_value",
          6: "ref_value"}


def encode_events(mid: np.ndarray, off: np.ndarray, dur: np.ndarray, nstats: np.ndarray, st_mid: np.ndarray,
                  st_kind: np.ndarray, st_int: np.ndarray, st_dbl: np.ndarray, objs: list[Any],
                  compiled: bool = True) -> bytes:
    """Events (int64 metadata id, offset and duration in ps, stats per event) and their
    stats (int64 metadata id, kind code as in ``decode``, int64 value (uint64 bits, ref
    ids), double value; ``objs``: the str/bytes values in order) as XLine bytes."""
    cols = [np.ascontiguousarray(a, dt) for a, dt in ((mid, np.int64), (off, np.int64), (dur, np.int64),
                                                      (nstats, np.int64), (st_mid, np.int64),
                                                      (st_kind, np.uint8), (st_int, np.int64),
                                                      (st_dbl, np.float64))]
    if compiled and _wire is not None:
        return bytes(_wire.encode(*cols, list(objs)))
    return _encode_messages(cols, list(objs))


def _encode_messages(cols: list[np.ndarray], objs: list[Any]) -> bytes:
    """The pure-Python reference: the same events through protobuf's message objects."""
    mid, off, dur, nstats, st_mid, st_kind, st_int, st_dbl = cols
    line = pb().XLine()
    s = o = 0
    smid, skind, sint, sdbl = st_mid.tolist(), st_kind.tolist(), st_int.tolist(), st_dbl.tolist()
    for m, t, d, n in zip(mid.tolist(), off.tolist(), dur.tolist(), nstats.tolist()):
        xe = line.events.add()
        xe.metadata_id = m
        xe.offset_ps = t
        xe.duration_ps = d
        for k in range(s, s + n):
            st = xe.stats.add()
            st.metadata_id = smid[k]
            kind = skind[k]
            if kind == 1:
                st.double_value = sdbl[k]
            elif kind in (2, 6):
                setattr(st, _FIELD[kind], sint[k] % (1 << 64))
            elif kind == 3:
                st.int64_value = sint[k]
            elif kind in (4, 5):
                setattr(st, _FIELD[kind], objs[o])
                o += 1
        s += n
    return line.SerializeToString()
