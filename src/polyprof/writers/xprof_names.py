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
    device plane XProf would not read (``n`` is the plane's index when free). Planes of
    several sources (processes of one Nsight report, merged ranks) may share a name: the
    first keeps it, a later ``/host:CPU`` is written ``/host:CPU:<pid>`` (a placeholder,
    :func:`line_homes`) and a later device ``/device:<kind>:<n>`` under a free ``n`` of its
    kind (XProf would take two planes of one name for one device, or read only the first
    ``/host:CPU``); the layout stat keeps the name, which polyprof's reader restores."""
    taken = {p.name for p in planes}
    written: set[str] = set()
    out: list[str] = []
    for p in planes:
        name = p.name
        if p.kind == "device" and name.startswith("/device:") and not name.startswith(XPROF_DEVICE_PREFIXES):
            name = _free(GPU_PREFIX, max(int(p.index), 0), taken)
        elif name in written and name == HOST_PLANE:
            name = _free(f"{HOST_PLANE}:", max(int(p.pid), 0), taken)
        elif name in written and name.startswith("/device:") and name.rpartition(":")[2].isdigit():
            name = _free(name.rpartition(":")[0] + ":", int(name.rpartition(":")[2]), taken)
        taken.add(name)
        written.add(name)
        out.append(name)
    return out


def _free(prefix: str, n: int, taken: set[str]) -> str:
    """``prefix<n>``, ``n`` counted up to the first name not ``taken``."""
    while f"{prefix}{n}" in taken:
        n += 1
    return f"{prefix}{n}"


HOST_PLANE = "/host:CPU"


def line_homes(planes: Sequence[Plane]) -> list[int]:
    """For each plane, the plane whose XPlane holds its lines. XProf reads one host
    plane, the first named ``/host:CPU``; the threads of other host processes
    (``/host:CPU:<pid>``, as the Kineto reader names them, or another source's
    ``/host:CPU``: the processes of an MPI Nsight report) go there too, and their own plane
    stays as an empty placeholder that keeps its name, source and properties for
    polyprof's reader."""
    main = next((p.id for p in planes if p.name == HOST_PLANE), None)
    return [main if main is not None and p.kind == "host" and p.id != main
            and (p.name == HOST_PLANE or p.name.startswith(HOST_PLANE + ":")) else p.id for p in planes]


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
