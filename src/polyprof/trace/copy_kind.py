"""A copy's kind read from its name or its ``copy kind`` stat (``HtoD``, ``DtoH``,
``DtoD``, ``PtoP``, ``HtoH``, ``Unified ...``, ``memset``, ``map`` or ``unknown``): the copy table
(``analyze/copies.py``) and the Kineto export's copy names (``formats/kineto_view.py``)
read it the same way."""

from __future__ import annotations

import re

_SHORT = r"([HDPA])(?:to|2)([HDPA])"  # HtoD, H2D, PtoP (compiled on first use: re's cache)
_WORDS = r"(host|device|peer|array)[-_ ]?to[-_ ]?(host|device|peer|array)"


#: OpenCL's map and unmap commands (the opencl plugin's names): a mapping, which moves
#: the buffer's bytes only where the device's memory is not the host's, in a direction
#: the command does not say: kind ``map``, no bytes or bandwidth counted
_MAPS = frozenset(("mapbuffer", "mapimage", "unmapmemobject", "svmmap", "svmunmap"))


def copy_kind(text: str) -> str:
    """The kind of a copy from its name or ``copy kind`` stat (``analyze/copies.py``'s
    module doc): arrays count as device memory (``HtoA`` is ``HtoD``)."""
    low = text.lower()
    if low.startswith("memset") or "memset" in low.split(" ", 1)[0]:
        return "memset"
    if low in _MAPS:
        return "map"
    m = re.search(_SHORT, text)
    ends = (m.group(1), m.group(2)) if m else None
    if ends is None:
        w = re.search(_WORDS, low)
        ends = (w.group(1)[0].upper(), w.group(2)[0].upper()) if w else None
    if ends is None:
        return "unknown"
    a, b = ("D" if e == "A" else e for e in ends)
    kind = "PtoP" if "P" in (a, b) else f"{a}to{b}"
    return f"Unified {kind}" if "unified" in low else kind
