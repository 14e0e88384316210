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
TPU_PREFIX = "/device:TPU:"
XPROF_DEVICE_PREFIXES = ("/device:GPU:", TPU_PREFIX, "/device:CUSTOM:")
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


HOST_PLANE = "/host:CPU"


def line_homes(planes: Sequence[Plane]) -> list[int]:
    """For each plane, the plane whose XPlane holds its lines. XProf reads one host
    plane, ``/host:CPU``; the threads of other host processes (``/host:CPU:<pid>``, as
    the Kineto reader names them) go there too, and their own plane stays as an empty
    placeholder that keeps its name and properties for polyprof's reader."""
    main = next((p.id for p in planes if p.name == HOST_PLANE), None)
    return [main if main is not None and p.kind == "host" and p.name.startswith(HOST_PLANE + ":") else p.id
            for p in planes]


def write_order(planes: Sequence[Plane], homes: Sequence[int]) -> list[int]:
    """Plane ids in the order they are written: as in the trace, except that a
    placeholder comes before the plane holding its lines (so the reader has it)."""
    order: list[int] = []
    for p in planes:
        if p.id in order:
            continue
        order.extend(q.id for q in planes if homes[q.id] == p.id and q.id != p.id and q.id not in order)
        order.append(p.id)
    return order
