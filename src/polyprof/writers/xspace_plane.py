"""The pieces of an XPlane the writer fills one at a time: interned event and stat
metadata, and one XStat from a Python value of any kind."""

from __future__ import annotations

from typing import Any

import numpy as np


class PlaneWriter:
    """One XPlane: interns event and stat metadata as events are added."""

    def __init__(self, xplane: Any):
        self.x = xplane
        self.stat_ids: dict[str, int] = {}
        self.event_ids: dict[tuple[str, str], int] = {}
        self._next_event_id = 1

    def stat_id(self, name: str) -> int:
        i = self.stat_ids.get(name)
        if i is None:
            i = self.stat_ids[name] = len(self.x.stat_metadata) + 1
            m = self.x.stat_metadata[i]
            m.id = i
            m.name = name
        return i

    def keep_event_id(self, mid: int, name: str, long_name: str = "") -> int:
        """Event metadata under a given id (XProf keys HLO protos by program id)."""
        if mid in self.x.event_metadata or mid == 0:
            return self.event_id(name, long_name)
        m = self.x.event_metadata[mid]
        m.id = mid
        m.name = long_name or name
        if long_name:
            m.display_name = name
        self.event_ids.setdefault((name, long_name), mid)
        return mid

    def ref_id(self, value: str) -> int:
        """Stat metadata whose name is ``value``, for ``ref_value`` stats (XProf's interning)."""
        return self.stat_id(value)

    def event_id(self, name: str, long_name: str = "") -> int:
        key = (name, long_name)
        i = self.event_ids.get(key)
        if i is None:
            while self._next_event_id in self.x.event_metadata:
                self._next_event_id += 1
            i = self.event_ids[key] = self._next_event_id
            m = self.x.event_metadata[i]
            m.id = i
            if long_name:
                m.name = long_name
                m.display_name = name
            else:
                m.name = name
        return i



def set_value(st: Any, value: Any, kind: str, pw: PlaneWriter) -> None:
    """Fill one XStat with ``value`` as ``kind`` ('i', 'u', 'f', 'ref', or '' = by type)."""
    if kind == "ref" and isinstance(value, str):
        st.ref_value = pw.ref_id(value)
    elif kind in ("i", "u") and not isinstance(value, (str, bytes)):
        v = int(value)
        if v >= 2**63 or (kind == "u" and v >= 0):
            st.uint64_value = v
        else:
            st.int64_value = v
    elif kind == "f":
        st.double_value = float(value)
    elif isinstance(value, bool):
        st.int64_value = int(value)
    elif isinstance(value, (int, np.integer)):
        v = int(value)
        if 2**63 <= v < 2**64:
            st.uint64_value = v
        elif -2**63 <= v < 2**63:
            st.int64_value = v
        else:  # an integer no XStat can hold
            st.str_value = str(v)
    elif isinstance(value, (float, np.floating)):
        st.double_value = float(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        st.bytes_value = bytes(value)
    elif isinstance(value, str):
        st.str_value = value
    else:
        st.str_value = json_text(value)


def json_text(value: Any) -> str:
    """JSON text of a value no XStat field holds (lists, dicts...)."""
    import orjson

    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    except orjson.JSONEncodeError:  # nested beyond 254 levels or ints beyond 64 bits (read from JSON)
        return msgspec_text(value)


def msgspec_text(value: Any) -> str:
    """JSON text of a value orjson refuses; its repr if even that fails."""
    import msgspec

    try:
        return msgspec.json.encode(value, enc_hook=str).decode()
    except (msgspec.EncodeError, RecursionError, TypeError, OverflowError):
        return repr(value)[:100_000]
