"""The names both directions share: XProf's stat and line conventions, polyprof's own
``polyprof.*`` stats (what the writer adds so its files read back losslessly), limits."""

from __future__ import annotations

import re

from ...trace import keys

#: XProf stat name -> polyprof key with the same meaning (the original is kept too).
XPROF_ALIASES: dict[str, str] = {
    "step_num": keys.STEP,
    "tf_op": keys.OP,
    "hlo_module": keys.MODULE,
    "stream_id": keys.STREAM,
    "device_id": keys.DEVICE,
}

#: Lines XProf shows on device planes (derived on GPU, native on TPU), as track kinds.
LINE_KINDS: dict[str, str] = {
    keys.LINE_STEPS: "steps",
    keys.LINE_XLA_MODULES: "line",
    keys.LINE_XLA_OPS: "line",
    "Async XLA Ops": "line",
    "XLA TraceMe": "line",
    "Overlay": "line",
    keys.LINE_NAME_SCOPE: "derived",
    keys.LINE_FRAMEWORK_OPS: "derived",
    keys.LINE_SOURCE: "derived",
    keys.LINE_SECTIONS: "derived",
    "TensorFlow Name Scope": "derived",  # the two lines' names before XProf's "Framework ..." (TF 2 files)
    "TensorFlow Ops": "derived",
}

#: Category of the events of a device line, by line name.
LINE_CATEGORIES: dict[str, str] = {
    keys.LINE_STEPS: keys.CAT_STEP,
    keys.LINE_XLA_MODULES: "xla_module",
    keys.LINE_XLA_OPS: "xla_op",
    "Async XLA Ops": "xla_async_op",
    "XLA TraceMe": "xla_traceme",
    keys.LINE_NAME_SCOPE: keys.CAT_DERIVED,
    keys.LINE_FRAMEWORK_OPS: keys.CAT_DERIVED,
    keys.LINE_SOURCE: keys.CAT_DERIVED,
    keys.LINE_SECTIONS: keys.CAT_DERIVED,
    "TensorFlow Name Scope": keys.CAT_DERIVED,
    "TensorFlow Ops": keys.CAT_DERIVED,
}

#: Category of host events that XProf would call TraceMe annotations.
CAT_TRACEME = "traceme"
#: Category of the host TraceMe events of XLA's own runtime (kind RUNTIME: gpu.runtime_calls).
CAT_XLA_RUNTIME = "xla_runtime"

# Names polyprof writes so its own XSpace files read back losslessly; XProf ignores them.
STAT_CATEGORY = "polyprof.category"
STAT_LONG_NAME = "long_name"  # XEventMetadata.name when the event is named by display_name
STAT_FLOW_OUT = "polyprof.flow_out"  # "k:flow id:category" on the source event
STAT_FLOW_IN = "polyprof.flow_in"  # k on the destination event
STAT_COUNTER_VALUE = "polyprof.counter_value"
PLANE_STAT_ALIASES = "polyprof.aliases"  # XProf-named copies the writer added
PLANE_STAT_PRODUCER = "polyprof.producer"
PLANE_STAT_LAYOUT = "polyprof.layout"  # JSON: plane kind/vendor/index, track kinds the names do not say
PLANE_STAT_ORIGIN = "polyprof.origin_ns"  # added to every time of the plane on reading
PLANE_STAT_METADATA = "polyprof.metadata"  # the trace's metadata, JSON
PLANE_STAT_SOURCES = "polyprof.sources"  # JSON {"sources": [...]}: a trace of several sources' (layout "source")
PLANE_STAT_GENERATED = "polyprof.generated"  # a plane only the writer needed (Task Environment)
PLANE_STAT_ADDED = "polyprof.added"  # stats the writer added to this plane's events only (the key is the trace's elsewhere)
COUNTER_LINE = "polyprof counters"
MEMORY_LINE = "polyprof memory (XProf)"  # the writer's copy of the memory events for XProf (formats/xprof_memory.py)
TASK_ENV = "Task Environment"
#: Plane properties that are not plane stats (the unused event metadata kept for writing back).
RESERVED_PROPS = ("xspace_event_metadata",)

#: XProf keeps times as uint64 picoseconds: absolute wall-clock ns would overflow, so
#: the writer stores times relative to the first event when they are this large
MAX_PLAIN_NS = 10**15
#: Times the reader accepts (line timestamps in ns, offsets and durations in ps).
TIME_LIMIT_NS = 2**62
TIME_LIMIT_PS = 2**62
#: The longest span the writer can express: ps offsets from a line's start, with room for durations.
MAX_SPAN_NS = (2**63 - 1) // 1000 // 2

#: XStat value kinds as the decoder numbers them, by XStat field name.
VALUE_KINDS = {1: "double_value", 2: "uint64_value", 3: "int64_value", 4: "str_value",
               5: "bytes_value", 6: "ref_value"}

_DEVICE_RE = re.compile(r"^/device:([^:]+)(?::(\d{1,9}))?")


def plane_kind(name: str) -> tuple[str, str, int]:
    """(kind, device type, index) of a plane from its XSpace name."""
    m = _DEVICE_RE.match(name)
    if m:
        return "device", m.group(1), int(m.group(2) or 0)
    return "host", "", 0


def default_category(plane_is_host: bool, line_name: str) -> str:
    """The category of a line's events when they carry no ``polyprof.category`` stat."""
    return CAT_TRACEME if plane_is_host else LINE_CATEGORIES.get(line_name, "")


def default_track_kind(plane_is_host: bool, line_name: str) -> str:
    """The track kind of a line when the layout stat does not say."""
    return "thread" if plane_is_host else LINE_KINDS.get(line_name, "stream")
