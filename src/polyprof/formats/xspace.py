"""XSpace (``*.xplane.pb``): the profile format of TensorFlow, JAX and XProf.

Reading: every XPlane becomes a plane, every XLine a track, every XEvent an event at
``line.timestamp_ns + offset_ps / 1000`` (integer ns: sub-ns precision is dropped,
which ``metadata["xspace"]["time_resolution"]`` says). Stats of every value kind are
kept under their XProf names; a ``ref_value`` becomes the referenced stat metadata's
name. Stats on an event's metadata apply to the event (event stats win), since XProf
treats them as the event's own. Well-known XProf names are also copied to polyprof's
keys (``step_num`` -> ``step``...) so analyses find them.

Writing: any Trace becomes an XSpace with one plane per plane and one line per track,
metadata deduplicated per plane, stats with their value kinds. A polyprof category, flows
and counters are written in a way XProf ignores and this reader restores, so
polyprof -> XSpace -> polyprof keeps them.
"""

from __future__ import annotations

import gzip
import logging
import re
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from ..trace import keys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace

log = logging.getLogger("polyprof")

#: XProf stat name -> polyprof key with the same meaning (the original is kept too).
XPROF_ALIASES: dict[str, str] = {
    "step_num": keys.STEP,
    "tf_op": keys.OP,
    "hlo_module": keys.MODULE,
    "stream_id": keys.STREAM,
    "device_id": keys.DEVICE,
}

#: Lines XProf shows on device planes (derived on GPU, native on TPU), as track kinds.
_LINE_KINDS: dict[str, str] = {
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
}

#: Category of the events of a device line, by line name.
_LINE_CATEGORIES: dict[str, str] = {
    keys.LINE_STEPS: keys.CAT_STEP,
    keys.LINE_XLA_MODULES: "xla_module",
    keys.LINE_XLA_OPS: "xla_op",
    "Async XLA Ops": "xla_async_op",
    "XLA TraceMe": "xla_traceme",
    keys.LINE_NAME_SCOPE: keys.CAT_DERIVED,
    keys.LINE_FRAMEWORK_OPS: keys.CAT_DERIVED,
    keys.LINE_SOURCE: keys.CAT_DERIVED,
    keys.LINE_SECTIONS: keys.CAT_DERIVED,
}

#: Category of host events that XProf would call TraceMe annotations.
CAT_TRACEME = "traceme"

# Names polyprof writes so its own XSpace files read back losslessly; XProf ignores them.
_STAT_CATEGORY = "polyprof.category"
_STAT_LONG_NAME = "long_name"  # XEventMetadata.name when the event is named by display_name
_STAT_FLOW_OUT = "polyprof.flow_out"
_STAT_FLOW_IN = "polyprof.flow_in"
_STAT_FLOW_CAT = "polyprof.flow_category"
_STAT_COUNTER_VALUE = "polyprof.counter_value"
_PLANE_STAT_ALIASES = "polyprof.aliases"  # XProf-named copies the writer added
_PLANE_STAT_PRODUCER = "polyprof.producer"
_COUNTER_LINE = "polyprof counters"

_DEVICE_RE = re.compile(r"^/device:([^:]+)(?::(\d+))?")


def _pb():
    from . import xplane_pb2

    return xplane_pb2


# =============================================================================== reading
def load(path: str | Path) -> Trace:
    """Read an ``.xplane.pb`` file (plain or gzipped)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(path, f"cannot read: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise TraceFormatError(path, f"truncated or corrupt gzip data ({e})") from None
    return from_bytes(data, source=str(path))


def parse(data: bytes, source: str = "<bytes>") -> Any:
    """The XSpace message in ``data``; TraceFormatError if it is not one."""
    from google.protobuf.message import DecodeError

    pb = _pb()
    space = pb.XSpace()
    try:
        space.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        detail = str(e).split(": ")[-1] if str(e) else "decode error"
        raise TraceFormatError(source, f"not a valid XSpace protobuf ({detail}): truncated, "
                                       "damaged, or not an .xplane.pb file") from None
    if not space.planes:
        if data:
            raise TraceFormatError(source, "parses as protobuf but holds no XSpace planes: "
                                           "not an .xplane.pb file")
        raise TraceFormatError(source, "empty file: no XSpace planes")
    if not any(p.name for p in space.planes):
        raise TraceFormatError(source, "protobuf whose planes have no names: not an XSpace profile")
    return space


def from_bytes(data: bytes, source: str = "<bytes>") -> Trace:
    """A Trace from a serialized XSpace (from a file, or handed back by a native plugin)."""
    return from_space(parse(bytes(data), source), source)


def _stat_value(st: Any, which: str, stat_names: dict[int, str]) -> Any:
    if which == "ref_value":
        return stat_names.get(st.ref_value, "")
    return getattr(st, which)


def _plane_kind(name: str) -> tuple[str, str, int]:
    """(kind, device type, index) of a plane from its XSpace name."""
    m = _DEVICE_RE.match(name)
    if m:
        return "device", m.group(1), int(m.group(2) or 0)
    return "host", "", 0


class _StatSink:
    """Stat values gathered per key as Python lists, turned into columns once."""

    def __init__(self) -> None:
        self.rows: dict[str, list[int]] = {}
        self.vals: dict[str, list[Any]] = {}

    def add(self, key: str, row: int, value: Any) -> None:
        r = self.rows.get(key)
        if r is None:
            r = self.rows[key] = []
            self.vals[key] = []
        r.append(row)
        self.vals[key].append(value)

    def flush(self, b: TraceBuilder) -> None:
        for key, rows in self.rows.items():
            vals = self.vals[key]
            kinds = {type(v) for v in vals}
            if kinds <= {int}:
                hi, lo = max(vals), min(vals)
                if hi < 2**63:
                    arr = np.asarray(vals, dtype=np.int64)
                elif lo >= 0:
                    arr = np.asarray(vals, dtype=np.uint64)
                else:  # int64 and huge uint64 under one key: keep exact values as text
                    arr = np.empty(len(vals), object)
                    arr[:] = [str(v) for v in vals]
            elif kinds <= {int, float}:
                arr = np.asarray(vals, dtype=np.float64)
            else:
                arr = np.empty(len(vals), object)
                arr[:] = vals
            b.add_stat(key, np.asarray(rows, np.int64), arr)
        self.rows, self.vals = {}, {}


def from_space(space: Any, source: str = "<bytes>") -> Trace:
    """A Trace from a parsed XSpace message."""
    b = TraceBuilder()
    sink = _StatSink()  # event-level stats (applied last: they win)
    md_sink = _StatSink()  # stats inherited from event metadata
    value_kinds: dict[str, set[str]] = {}
    flows_out: dict[int, int] = {}
    flows_in: dict[int, int] = {}
    flow_cats: dict[int, str] = {}
    counters: list[tuple[int, str, int, float]] = []
    producer = ""
    drop_aliases: set[str] = set()
    task_env: dict[str, Any] = {}
    sort = 0
    for plane in space.planes:
        stat_names = {int(k): m.name for k, m in plane.stat_metadata.items()}
        props: dict[str, Any] = {}
        for st in plane.stats:
            which = st.WhichOneof("value")
            if which:
                props[stat_names.get(st.metadata_id, str(st.metadata_id))] = _stat_value(st, which, stat_names)
        producer = str(props.pop(_PLANE_STAT_PRODUCER, producer))
        aliases = props.pop(_PLANE_STAT_ALIASES, "")
        if aliases:
            drop_aliases.update(a for a in str(aliases).split(",") if a)
        if plane.name == "Task Environment":
            task_env.update(props)
        kind, dev_type, index = _plane_kind(plane.name)
        if dev_type:
            props.setdefault("device_type", dev_type)
        pid = b.plane(plane.name, kind, index=index, pid=int(plane.id), properties=props)
        is_host = kind == "host"

        # event metadata: display name, category hint, inherited stats
        md_name: dict[int, str] = {}
        md_long: dict[int, str] = {}
        md_stats: dict[int, list[tuple[str, Any]]] = {}
        for mid, m in plane.event_metadata.items():
            mid = int(mid)
            md_name[mid] = m.display_name or m.name
            if m.display_name and m.name and m.display_name != m.name:
                md_long[mid] = m.name
            if m.stats:
                lst = []
                for st in m.stats:
                    which = st.WhichOneof("value")
                    if which:
                        key = stat_names.get(st.metadata_id, str(st.metadata_id))
                        lst.append((key, _stat_value(st, which, stat_names)))
                        value_kinds.setdefault(key, set()).add(which)
                md_stats[mid] = lst
            if m.metadata:
                md_stats.setdefault(mid, []).append(("xevent_metadata", bytes(m.metadata)))
            if m.child_id:
                md_stats.setdefault(mid, []).append(("child_ids", ",".join(map(str, m.child_id))))

        orphans = _unreferenced_metadata(plane, md_stats)
        if orphans:  # e.g. the HLO protos on /host:metadata: no events, but XProf tools use them
            b.planes[pid].properties["xspace_event_metadata"] = orphans
        for line in plane.lines:
            lname = line.name or line.display_name or f"line {line.id}"
            tprops: dict[str, Any] = {"xline_id": int(line.id)}
            if line.display_id:
                tprops["display_id"] = int(line.display_id)
            if line.display_name and line.display_name != lname:
                tprops["display_name"] = line.display_name
            if line.duration_ps:
                tprops["duration_ps"] = int(line.duration_ps)
            if is_host:
                tkind = "thread"
            else:
                tkind = _LINE_KINDS.get(lname, "stream")
            track = b.track(pid, lname, tkind, tid=int(line.id), sort_index=sort, properties=tprops)
            sort += 1
            n = len(line.events)
            if not n:
                continue
            if lname == _COUNTER_LINE and producer == "polyprof":
                _read_counters(line, pid, md_name, stat_names, counters)
                continue
            base_ps = int(line.timestamp_ns) * 1000
            mids = np.empty(n, np.int64)
            begin_ps = np.empty(n, np.int64)
            dur_ps = np.empty(n, np.int64)
            row0 = b.n_events
            cats: list[str] | None = None
            line_cat = CAT_TRACEME if is_host else _LINE_CATEGORIES.get(lname, "")
            for i, e in enumerate(line.events):
                mids[i] = e.metadata_id
                if e.WhichOneof("data") == "num_occurrences":
                    begin_ps[i] = 0
                    sink.add("num_occurrences", row0 + i, int(e.num_occurrences))
                else:
                    begin_ps[i] = e.offset_ps
                dur_ps[i] = e.duration_ps
                for st in e.stats:
                    which = st.WhichOneof("value")
                    if not which:
                        continue
                    key = stat_names.get(st.metadata_id, str(st.metadata_id))
                    val = _stat_value(st, which, stat_names)
                    if key == _STAT_CATEGORY:
                        if cats is None:
                            cats = [""] * n
                        cats[i] = str(val)
                        continue
                    if key == _STAT_FLOW_OUT:
                        flows_out[int(val)] = row0 + i
                        continue
                    if key == _STAT_FLOW_IN:
                        flows_in[int(val)] = row0 + i
                        continue
                    if key == _STAT_FLOW_CAT:
                        fid, _, fcat = str(val).partition(":")
                        flow_cats[int(fid)] = fcat
                        continue
                    value_kinds.setdefault(key, set()).add(which)
                    sink.add(key, row0 + i, val)
            # absolute times in ns, rounding start and end (not duration) so nesting holds
            start = (base_ps + begin_ps) // 1000
            end = (base_ps + begin_ps + dur_ps) // 1000
            names = np.empty(n, object)
            names[:] = [md_name.get(m, "") for m in mids.tolist()]
            if cats is not None:
                category: Any = np.asarray([c or line_cat for c in cats], object)
            else:
                category = line_cat
            b.events(track, names, start, end - start, category)
            for m_i, m in enumerate(mids.tolist()):
                if m in md_long:
                    md_sink.add(_STAT_LONG_NAME, row0 + m_i, md_long[m])
                for key, val in md_stats.get(m, ()):
                    md_sink.add(key, row0 + m_i, val)
    md_sink.flush(b)
    sink.flush(b)
    for fid, src in flows_out.items():
        dst = flows_in.get(fid)
        if dst is not None:
            b.flow(src, dst, fid, flow_cats.get(fid, ""))
    series: dict[tuple[int, str], tuple[list[int], list[float]]] = {}
    for pid, name, ts, val in counters:
        t, v = series.setdefault((pid, name), ([], []))
        t.append(ts)
        v.append(val)
    for (pid, name), (t, v) in series.items():
        b.counter(pid, name, t, v)

    b.metadata.update({
        "source_format": "xspace",
        "source": source,
        "clock": "xspace",
        "xspace": {
            "hostnames": list(space.hostnames),
            "errors": list(space.errors),
            "warnings": list(space.warnings),
            "time_resolution": "ns (XSpace picosecond offsets rounded down to ns)",
            "stat_value_kinds": {k: sorted(v) for k, v in value_kinds.items()},
            "producer": producer or "unknown",
        },
    })
    if "profile_start_time" in task_env:
        b.metadata["xspace"]["profile_start_time_ns"] = int(task_env["profile_start_time"])
    if "profile_stop_time" in task_env:
        b.metadata["xspace"]["profile_stop_time_ns"] = int(task_env["profile_stop_time"])
    trace = b.build()
    _add_aliases(trace, drop_aliases)
    _classify_host_events(trace)
    return trace


def _unreferenced_metadata(plane: Any, md_stats: dict[int, list[tuple[str, Any]]]) -> list[dict[str, Any]]:
    """Event metadata that no event uses but that carries stats, as plain dicts."""
    used = {int(e.metadata_id) for line in plane.lines for e in line.events}
    out = []
    for mid, m in plane.event_metadata.items():
        mid = int(mid)
        if mid in used or mid not in md_stats:
            continue
        out.append({"id": mid, "name": m.name, "display_name": m.display_name,
                    "stats": {k: v for k, v in md_stats[mid]}})
    return out


def _read_counters(line: Any, plane: int, md_name: dict[int, str], stat_names: dict[int, str],
                   out: list[tuple[int, str, int, float]]) -> None:
    """Counter samples polyprof wrote as instant events with a value stat."""
    base_ps = int(line.timestamp_ns) * 1000
    for e in line.events:
        value = 0.0
        for st in e.stats:
            if stat_names.get(st.metadata_id) == _STAT_COUNTER_VALUE:
                value = st.double_value
        out.append((plane, md_name.get(int(e.metadata_id), ""), (base_ps + e.offset_ps) // 1000, value))


def _add_aliases(trace: Trace, drop: set[str]) -> None:
    """Copy XProf-named stats to polyprof keys; drop copies a polyprof writer added."""
    for key in drop:
        trace.stats.pop(key, None)
    for xname, pkey in XPROF_ALIASES.items():
        if xname in trace.stats and pkey not in trace.stats:
            trace.stats[pkey] = trace.stats[xname]


def _classify_host_events(trace: Trace) -> None:
    """Host TraceMe events carrying a step number are steps; ``$``-names are Python calls."""
    if not trace.n_events:
        return
    cat = trace.events["category"]
    tr_id = trace.string_id(CAT_TRACEME)
    if tr_id < 0:
        return
    is_tr = cat == tr_id
    step = trace.stats.get(keys.STEP)
    new_ids: dict[str, int] = {}

    def sid(s: str) -> int:
        i = trace.string_id(s)
        if i < 0:
            i = new_ids.get(s, -1)
            if i < 0:
                i = new_ids[s] = len(trace.strings)
                trace.strings.append(s)
        return i

    if step is not None and len(step):
        rows = step.rows[is_tr[step.rows]]
        if len(rows):
            cat[rows] = sid(keys.CAT_STEP)
    names = trace.strings
    py_names = np.fromiter((n.startswith("$") for n in names), bool, len(names))
    py_rows = np.flatnonzero(is_tr & py_names[trace.events["name"]])
    if len(py_rows):
        cat[py_rows] = sid("python_function")
    if new_ids:
        trace.__dict__.pop("_string_array", None)
        trace.__dict__.pop("_string_index", None)
        trace.__dict__.pop("kinds", None)


def sniff(head: bytes, path: Path) -> bool:
    """True if ``head`` (first bytes, maybe ``GZ``-prefixed) starts an XSpace message.

    An XSpace begins with its first plane (field 1, length-delimited) whose first field
    is one of XPlane's. Files named ``*.xplane.pb`` are claimed too, so damaged ones get
    an error that says what is wrong instead of "unrecognised format".
    """
    body = head[2:] if head.startswith(b"GZ") else head
    if path.name.endswith((".xplane.pb", ".xplane.pb.gz", ".xspace.pb")):
        return True
    if len(body) < 3 or body[0] != 0x0A:
        return False
    length, pos = _varint(body, 1)
    if length is None or length <= 0 or pos >= len(body):
        return False
    return body[pos] in (0x08, 0x12, 0x1A, 0x22, 0x2A, 0x32)


def _varint(data: bytes, pos: int) -> tuple[int | None, int]:
    shift = value = 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None, pos
