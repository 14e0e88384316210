"""The device planes' properties as the exports write them (Kineto's ``deviceProperties``
list: model, SM count, memory, registers...; XProf's peaks on a TPU plane): what the
efficiency tables match a device's peaks and occupancy by (``analyze/peaks.py``), so
an export read back keeps its MFU, rooflines and occupancy. Kineto's and the Chrome
JSON writers put the list at the document's top level; the Perfetto writer, which has
no such field, in a ``chrome_events`` metadata entry (:data:`PERFETTO_PLANES`) that
its reader puts back."""

from __future__ import annotations

from typing import Any

from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..trace.model import Plane

#: Plane properties the readers add that are not device properties (and the HLO protos
#: an XSpace plane carries for XProf, which mean nothing in a JSON file).
PLANE_EXTRAS = frozenset(("process_name", "process_labels", "process_sort_index", "xspace_event_metadata"))
#: the ``ChromeMetadata`` entry of a Perfetto export that holds the device planes'
#: properties (JSON: ``[{plane, vendor, properties}]``); Perfetto's metadata table
#: shows it as ``cr-polyprof_planes``
PERFETTO_PLANES = "polyprof_planes"
#: the ``ChromeMetadata`` entry of a Perfetto export that names its flows' categories
#: (JSON: a list; Perfetto's flows have none): flow ``k`` of category ``i`` (1-based in
#: that list, 0 for none) is written with id ``k + 1 + (i << FLOW_CATEGORY_SHIFT)``
PERFETTO_FLOW_CATEGORIES = "polyprof_flow_categories"
#: the Chrome metadata entry of polyprof's Perfetto export listing the counters it made
#: of the trace's memory series (JSON: [plane name, counter name] pairs): read back, the
#: memory events are there again, and those counters are left out
PERFETTO_DERIVED_COUNTERS = "polyprof_derived_counters"
FLOW_CATEGORY_SHIFT = 40
#: an XSpace device plane's properties that name its model (a GPU's, a TPU's), as Kineto's
#: ``name`` does
_MODEL_KEYS = ("gpu_device_name", "device_type_string", "device_name")


def json_value(v: Any) -> Any:
    """A property value JSON can hold: bytes (XSpace stats) as hex text, containers walked."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    return v


def plane_properties(plane: Plane) -> dict[str, Any]:
    """A device plane's properties as the exports write them: JSON values, without
    :data:`PLANE_EXTRAS`."""
    return {k: json_value(v) for k, v in (plane.properties or {}).items() if k not in PLANE_EXTRAS}


def device_properties(trace: Trace) -> list[dict[str, Any]]:
    """One entry per device plane (its properties, ``id`` its index), then the listed
    devices without events (the trace's ``deviceProperties`` metadata)."""
    out: list[dict[str, Any]] = []
    seen: set[Any] = set()  # device ids (the metadata may hold any JSON value)
    for p in trace.planes:
        if p.kind != "device" or p.index in seen:
            continue
        props = plane_properties(p)
        props.pop("id", None)
        # Kineto's ``name`` is the device's model; an XSpace plane gives it under its own key
        model = next((v for v in (props.get(k) for k in _MODEL_KEYS) if isinstance(v, str) and v), None)
        props.setdefault("name", model or p.name)
        out.append({"id": p.index, **props})
        seen.add(p.index)
    for d in trace.metadata.get(mkeys.DEVICE_PROPERTIES) or []:
        if isinstance(d, dict) and d.get("id") not in seen:
            out.append(d)
            seen.add(d.get("id"))
    return out
