"""The plane names XProf reads, for the XSpace writer.

XProf's converters (trace_viewer, overview_page, op stats...) read the host plane named
exactly ``/host:CPU`` and the device planes named ``/device:GPU:*``; if there are none,
``/device:TPU:*``; if none either, ``/device:CUSTOM:*``. A device plane named otherwise
(``/device:OpenCL:0``, ``/device:MTIA:17``, ``/device:XPU:0``...) is silently left out
of every tool. So the writer names such planes ``/device:CUSTOM:<n>`` and keeps the
original name in the plane's layout stat, which the reader restores.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..trace.model import Plane

#: Device plane name prefixes XProf's tools read.
XPROF_DEVICE_PREFIXES = ("/device:GPU:", "/device:TPU:", "/device:CUSTOM:")
CUSTOM_PREFIX = "/device:CUSTOM:"


def written_names(planes: Sequence[Plane]) -> list[str]:
    """The XSpace plane name for each plane: its own, or ``/device:CUSTOM:<n>`` for a
    device plane XProf would not read (``n`` is the plane's index when free)."""
    taken = {p.name for p in planes}
    out: list[str] = []
    for p in planes:
        name = p.name
        if p.kind == "device" and name.startswith("/device:") and not name.startswith(XPROF_DEVICE_PREFIXES):
            n = max(int(p.index), 0)
            while f"{CUSTOM_PREFIX}{n}" in taken:
                n += 1
            name = f"{CUSTOM_PREFIX}{n}"
            taken.add(name)
        out.append(name)
    return out
