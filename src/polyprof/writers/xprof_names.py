"""The plane names XProf reads, for the XSpace writer.

XProf's trace viewer reads the host plane named exactly ``/host:CPU`` and the device
planes named ``/device:GPU:*``, ``/device:TPU:*`` and ``/device:CUSTOM:*``. Its
analyses (overview_page, framework_op_stats, kernel_stats, op_profile... all built on op
stats, ``xplane_to_op_stats.cc``) read only ``/device:TPU:*`` planes, else
``/device:GPU:*``: a CUSTOM plane is in the timeline but in no analysis. A device plane
named otherwise (``/device:OpenCL:0``, ``/device:MTIA:17``, ``/device:XPU:0``...) is in
no tool at all. So the writer names such planes ``/device:GPU:<n>``, XProf's name for
an accelerator it reads kernels from, and keeps the original name, vendor and index in
the plane's layout stat, which polyprof's reader restores. CUSTOM planes (from an
XSpace that had them) keep their name.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..trace.model import Plane

#: Device plane name prefixes XProf's tools read.
TPU_PREFIX = "/device:TPU:"
GPU_PREFIX = "/device:GPU:"
XPROF_DEVICE_PREFIXES = (GPU_PREFIX, TPU_PREFIX, "/device:CUSTOM:")


def written_names(planes: Sequence[Plane]) -> list[str]:
    """The XSpace plane name for each plane: its own, or ``/device:GPU:<n>`` for a
    device plane XProf would not read (``n`` is the plane's index when free)."""
    taken = {p.name for p in planes}
    out: list[str] = []
    for p in planes:
        name = p.name
        if p.kind == "device" and name.startswith("/device:") and not name.startswith(XPROF_DEVICE_PREFIXES):
            n = max(int(p.index), 0)
            while f"{GPU_PREFIX}{n}" in taken:
                n += 1
            name = f"{GPU_PREFIX}{n}"
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
