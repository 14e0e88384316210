"""XSpace (``*.xplane.pb``): the profile format of TensorFlow, JAX and XProf.

Reading: every XPlane becomes a plane, every XLine a track, every XEvent an event at
``line.timestamp_ns + offset_ps / 1000`` in integer ns: sub-ns precision is dropped
(start rounded down, end up, so nesting holds and no event becomes an instant), as
``metadata["xspace"]["time_resolution"]`` says. Stats of every value kind are
kept under their XProf names; a ``ref_value`` becomes the referenced stat metadata's
name. Stats on an event's metadata apply to the event (event stats win), since XProf
treats them as the event's own. Well-known XProf names are also copied to polyprof's
keys (``step_num`` -> ``step``...) so analyses find them.

Writing: any Trace becomes an XSpace with one plane per plane and one line per track,
metadata deduplicated per plane, stats with their value kinds. XProf holds times as
uint64 picoseconds, so absolute (wall-clock) times are written relative to the first
event, like JAX does, with a "Task Environment" plane giving the wall-clock start. A
polyprof category, flows, counters, track kinds and the trace's metadata are written in
``polyprof.*`` stats XProf ignores and this reader restores, so polyprof -> XSpace ->
polyprof keeps them. Device planes XProf's tools would skip (any but GPU, TPU and
CUSTOM) are written as ``/device:CUSTOM:<n>`` under their own name in the layout stat
(``xprof_names.py``). XProf's own "flow" stats are kept as raw values (not decoded into
flows).
"""

from __future__ import annotations

import gzip
import logging
import re
import socket
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from ..trace import keys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace
from ..trace.memory import export_counters
from . import xprof_memory
from .safety import Inflation, check_events, clean_metadata, guarded, reading
from .xprof_names import line_homes, write_order, written_names  # noqa: F401  (written_names for callers)
from .xprof_stats import GROUP_ID, STEP_LINE_ID, STEP_LINE_NAME, device_step_spans, xprof_columns

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
_STAT_FLOW_OUT = "polyprof.flow_out"  # "k:flow id:category" on the source event
_STAT_FLOW_IN = "polyprof.flow_in"  # k on the destination event
_STAT_COUNTER_VALUE = "polyprof.counter_value"
_PLANE_STAT_ALIASES = "polyprof.aliases"  # XProf-named copies the writer added
_PLANE_STAT_PRODUCER = "polyprof.producer"
_PLANE_STAT_LAYOUT = "polyprof.layout"  # JSON: plane kind/vendor/index, track kinds the names do not say
_PLANE_STAT_ORIGIN = "polyprof.origin_ns"  # added to every time of the plane on reading
_PLANE_STAT_METADATA = "polyprof.metadata"  # the trace's metadata, JSON
_PLANE_STAT_GENERATED = "polyprof.generated"  # a plane only the writer needed (Task Environment)
_COUNTER_LINE = "polyprof counters"
_TASK_ENV = "Task Environment"
#: XProf keeps times as uint64 picoseconds: absolute wall-clock ns would overflow, so
#: the writer stores times relative to the first event when they are this large
_MAX_PLAIN_NS = 10**15

_DEVICE_RE = re.compile(r"^/device:([^:]+)(?::(\d{1,9}))?")


def _pb():
    from . import xplane_pb2

    return xplane_pb2


# =============================================================================== reading
@guarded
def load(path: str | Path) -> Trace:
    """Read an ``.xplane.pb`` file (plain or gzipped)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(path, f"cannot read: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, path)
    return from_bytes(data, source=str(path))


def _gunzip(data: bytes, path: Path) -> bytes:
    """Inflate every gzip member, within the inflation limits (safety.Inflation)."""
    inflation = Inflation(path, len(data))
    out: list[bytes] = []
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            while rest:
                chunk = d.decompress(rest, 1 << 24)
                inflation.add(len(chunk))
                out.append(chunk)
                rest = d.unconsumed_tail
                if d.eof:
                    break
            if not d.eof:
                raise TraceFormatError(path, "truncated gzip data: the compressed stream ends early")
            rest = d.unused_data
            if rest and rest[:2] != b"\x1f\x8b":
                break  # trailing bytes after the last member, as gzip(1) allows
    except zlib.error as e:
        raise TraceFormatError(path, f"truncated or corrupt gzip data ({e})") from None
    return b"".join(out)


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
    with reading(source):
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
    check_events(source, sum(len(line.events) for plane in space.planes for line in plane.lines))
    b = TraceBuilder()
    sink = _StatSink()  # event-level stats (applied last: they win)
    md_sink = _StatSink()  # stats inherited from event metadata
    value_kinds: dict[str, set[str]] = {}
    flows_out: dict[int, tuple[int, int, str]] = {}
    flows_in: dict[int, int] = {}
    counters: list[tuple[int, str, int, float]] = []
    producer = ""
    drop_aliases: set[str] = set()
    task_env: dict[str, Any] = {}
    stored_meta: dict[str, Any] = {}
    md_keys: set[str] = set()
    bad_flows = 0
    sort = 0
    for plane in space.planes:
        stat_names = {int(k): m.name for k, m in plane.stat_metadata.items()}
        props: dict[str, Any] = {}
        for st in plane.stats:
            which = st.WhichOneof("value")
            if which:
                props[stat_names.get(st.metadata_id, str(st.metadata_id))] = _stat_value(st, which, stat_names)
        producer = str(props.pop(_PLANE_STAT_PRODUCER, producer))
        origin = _int_stat(props.pop(_PLANE_STAT_ORIGIN, 0), source, _PLANE_STAT_ORIGIN)
        if _PLANE_STAT_METADATA in props:
            stored_meta = _layout(props.pop(_PLANE_STAT_METADATA))
            clean_metadata(stored_meta)
        if props.pop(_PLANE_STAT_GENERATED, None):
            continue
        aliases = props.pop(_PLANE_STAT_ALIASES, "")
        if aliases:
            drop_aliases.update(a for a in str(aliases).split(",") if a)
        if plane.name == _TASK_ENV:
            task_env.update(props)
        layout = _layout(props.pop(_PLANE_STAT_LAYOUT, None))
        kind, _, index = _plane_kind(plane.name)
        is_host = kind == "host"  # decides default categories, as the writer assumed
        kind = str(layout.get("kind", kind))
        index = _int_stat(layout.get("index", index), source, "plane index")
        pid = b.plane(str(layout.get("name", plane.name)), kind, vendor=str(layout.get("vendor", "")), index=index,
                      pid=int(plane.id), properties=props)
        track_layout = layout.get("tracks", {})
        if not isinstance(track_layout, dict):
            raise TraceFormatError(source, f"plane {plane.name!r}: damaged {_PLANE_STAT_LAYOUT} (tracks)")

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
                md_keys.update(k for k, _ in lst)
            if m.metadata:
                md_stats.setdefault(mid, []).append(("xevent_metadata", bytes(m.metadata)))
            if m.child_id:
                md_stats.setdefault(mid, []).append(("child_ids", ",".join(map(str, m.child_id))))

        special = {mid: name for mid, name in stat_names.items()
                   if name in (_STAT_CATEGORY, _STAT_FLOW_OUT, _STAT_FLOW_IN)}
        plane_stats: dict[int, tuple[list[int], list[Any]]] = {}
        seen: set[tuple[int, str]] = set()
        orphans = _unreferenced_metadata(plane, md_stats)
        if orphans:  # e.g. the HLO protos on /host:metadata: no events, but XProf tools use them
            b.planes[pid].properties["xspace_event_metadata"] = orphans
        for line in plane.lines:
            lname = line.name or line.display_name or f"line {line.id}"
            if lname == _COUNTER_LINE and producer == "polyprof":
                _read_counters(line, pid, md_name, stat_names, counters, origin)
                continue
            if lname == xprof_memory.LINE and producer == "polyprof":
                continue  # a copy of the memory events for XProf's memory_profile
            tl = track_layout.get(str(line.id), {})
            if not isinstance(tl, dict) or not isinstance(tl.get("props", {}), dict):
                raise TraceFormatError(source, f"plane {plane.name!r}: damaged {_PLANE_STAT_LAYOUT} (line {line.id})")
            if tl.get("generated") and producer == "polyprof":
                continue  # a line only XProf needs (the writer's device Steps line)
            tprops: dict[str, Any] = dict(tl.get("props", {}))
            if line.display_id:
                tprops["display_id"] = int(line.display_id)
            if line.display_name and line.display_name != lname:
                tprops["display_name"] = line.display_name
            if line.duration_ps:
                tprops["duration_ps"] = int(line.duration_ps)
            tkind = tl.get("kind") or ("thread" if is_host else _LINE_KINDS.get(lname, "stream"))
            home = b.plane(str(tl["plane"])) if tl.get("plane") else pid  # written on /host:CPU for XProf
            track = b.track(home, lname, str(tkind), tid=_int_stat(tl.get("tid", line.id), source, "line tid"),
                            sort_index=sort,
                            properties=tprops)
            sort += 1
            n = len(line.events)
            if not n:
                continue
            base_ns = int(line.timestamp_ns) + origin
            if abs(base_ns) > _TIME_LIMIT_NS:
                raise TraceFormatError(source, f"line {lname!r} starts at {base_ns} ns: beyond +-2**62 ns")
            mids = np.empty(n, np.int64)
            begin_ps = np.empty(n, np.int64)
            dur_ps = np.empty(n, np.int64)
            row0 = b.n_events
            cats: list[str | None] | None = None
            line_cat = CAT_TRACEME if is_host else _LINE_CATEGORIES.get(lname, "")
            by_mid = plane_stats  # metadata id -> (rows, values), per plane
            for i, e in enumerate(line.events):
                mids[i] = e.metadata_id
                off = e.offset_ps
                if not off and e.WhichOneof("data") == "num_occurrences":
                    sink.add("num_occurrences", row0 + i, int(e.num_occurrences))
                begin_ps[i] = off
                dur_ps[i] = e.duration_ps
                ev_stats = e.stats
                if not ev_stats:
                    continue
                row = row0 + i
                for st in ev_stats:
                    which = st.WhichOneof("value")
                    if which is None:
                        continue
                    mid = st.metadata_id
                    val = getattr(st, which) if which != "ref_value" else stat_names.get(st.ref_value, "")
                    tag = special.get(mid)
                    if tag is not None:
                        if tag == _STAT_CATEGORY:
                            if cats is None:
                                cats = [None] * n
                            cats[i] = str(val)
                        elif tag == _STAT_FLOW_OUT:
                            flow = _flow_out(val)
                            if flow is None:
                                bad_flows += 1
                            else:
                                flows_out[flow[0]] = (row, flow[1], flow[2])
                        elif type(val) is int or (type(val) is str and val.lstrip("-").isdigit()):
                            flows_in[int(val)] = row
                        else:
                            bad_flows += 1
                        continue
                    seen.add((mid, which))
                    slot = by_mid.get(mid)
                    if slot is None:
                        slot = by_mid[mid] = ([], [])
                    slot[0].append(row)
                    slot[1].append(val)
            # absolute times in ns: start rounded down, end up, so nesting holds and no
            # event shorter than 1 ns turns into an instant
            if begin_ps.min() < -_TIME_LIMIT_PS or begin_ps.max() > _TIME_LIMIT_PS or dur_ps.min() < 0 \
                    or dur_ps.max() > _TIME_LIMIT_PS:
                raise TraceFormatError(source, f"line {lname!r}: an event offset or duration is negative or "
                                               "beyond 2**62 ps")
            start = base_ns + begin_ps // 1000
            end = base_ns + -((-(begin_ps + dur_ps)) // 1000)
            names = np.empty(n, object)
            names[:] = [md_name.get(m, "") for m in mids.tolist()]
            if cats is not None:
                category: Any = np.asarray([line_cat if c is None else c for c in cats], object)
            else:
                category = line_cat
            b.events(track, names, start, end - start, category)
            if md_long or md_stats:  # metadata-level values, one group of events per metadata id
                uniq, inv = np.unique(mids, return_inverse=True)
                order = np.argsort(inv, kind="stable")
                bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
                for j, m in enumerate(uniq.tolist()):
                    extra = md_stats.get(m, [])
                    if m in md_long:
                        extra = [*extra, (_STAT_LONG_NAME, md_long[m])]
                    if not extra:
                        continue
                    rows = (order[bounds[j]:bounds[j + 1]] + row0).tolist()
                    for key, val in extra:
                        md_sink.rows.setdefault(key, []).extend(rows)
                        md_sink.vals.setdefault(key, []).extend([val] * len(rows))
        for mid, (rows, vals) in plane_stats.items():
            key = stat_names.get(mid, str(mid))
            sink.rows.setdefault(key, []).extend(rows)
            sink.vals.setdefault(key, []).extend(vals)
        for mid, which in seen:
            value_kinds.setdefault(stat_names.get(mid, str(mid)), set()).add(which)
    md_sink.flush(b)
    sink.flush(b)
    for k, (src, fid, fcat) in sorted(flows_out.items()):
        dst = flows_in.get(k)
        if dst is not None:
            b.flow(src, dst, fid, fcat)
    series: dict[tuple[int, str], tuple[list[int], list[float]]] = {}
    for pid, name, ts, val in counters:
        t, v = series.setdefault((pid, name), ([], []))
        t.append(ts)
        v.append(val)
    for (pid, name), (t, v) in series.items():
        b.counter(pid, name, t, v)

    b.metadata.update(stored_meta)  # a polyprof-written file: the trace's own metadata
    b.metadata.update({
        "source": {"format": "xspace", "path": source},
        "xspace": {
            "hostnames": list(space.hostnames),
            "errors": list(space.errors),
            "warnings": list(space.warnings),
            "time_resolution": "ns (XSpace ps times: starts rounded down, ends up)",
            "stat_value_kinds": {k: sorted(v) for k, v in value_kinds.items()},
            "producer": producer or "unknown",
            "metadata_stat_keys": sorted(md_keys),
        },
    })
    for k in ("profile_start_time", "profile_stop_time"):
        if k not in task_env:
            continue
        if type(task_env[k]) is int and abs(task_env[k]) <= _TIME_LIMIT_NS:
            b.metadata["xspace"][f"{k}_ns"] = task_env[k]
        else:
            b.metadata.setdefault("warnings", []).append(f"Task Environment {k} {task_env.pop(k)!r} ignored: "
                                                         "not a time in ns")
    if bad_flows:
        b.metadata.setdefault("warnings", []).append(f"{bad_flows} damaged flow stat(s) ignored")
    if not stored_meta:
        b.metadata["clock"] = "xspace"
    trace = b.build()
    if not stored_meta:
        _wall_anchor(trace, task_env)
    if producer != "polyprof":
        _xprof_flows(trace)
    _add_aliases(trace, drop_aliases)
    _classify_host_events(trace, any(p.kind == "device" for p in trace.planes))
    log.debug("xspace %s: %d planes, %d lines, %d events, %d stat keys", source, len(trace.planes),
              len(trace.tracks), trace.n_events, len(trace.stats))
    return trace


_TIME_LIMIT_NS = 2**62
_TIME_LIMIT_PS = 2**62


def _int_stat(v: Any, source: str, what: str) -> int:
    """An integer polyprof wrote (as int or decimal text); TraceFormatError if it is not one."""
    if type(v) is int and -2**63 <= v < 2**63:
        return v
    if type(v) is str and len(v) < 21 and v.strip().lstrip("-").isdigit() and -2**63 <= int(v) < 2**63:
        return int(v)
    if not v:
        return 0
    raise TraceFormatError(source, f"damaged {what}: {str(v)[:60]!r} is not an integer")


def _flow_out(val: Any) -> tuple[int, int, str] | None:
    """(key, flow id, category) of a polyprof flow-out stat ``key:id:category``; None if damaged."""
    parts = str(val).split(":", 2)
    if len(parts) != 3 or not all(p.lstrip("-").isdigit() and len(p) < 19 for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1]), parts[2]


def _layout(raw: Any) -> dict[str, Any]:
    if not raw:
        return {}
    import orjson

    try:
        out = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}


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
    return sorted(out, key=lambda d: d["id"])  # map order is unspecified


def _read_counters(line: Any, plane: int, md_name: dict[int, str], stat_names: dict[int, str],
                   out: list[tuple[int, str, int, float]], origin: int) -> None:
    """Counter samples polyprof wrote as instant events with a value stat."""
    base_ns = int(line.timestamp_ns) + origin
    if abs(base_ns) > _TIME_LIMIT_NS:
        return
    for e in line.events:
        value = 0.0
        for st in e.stats:
            if stat_names.get(st.metadata_id) == _STAT_COUNTER_VALUE:
                value = st.double_value
        out.append((plane, md_name.get(int(e.metadata_id), ""), base_ns + e.offset_ps // 1000, value))


def _wall_anchor(trace: Trace, task_env: dict[str, Any]) -> None:
    """Link the file's times to wall-clock time where the file says how.

    JAX/TSL (and XProf) store times relative to the profile start, whose wall-clock
    time is the ``profile_start_time`` stat of the "Task Environment" plane; older
    writers store absolute wall-clock ns. Anything else is left unanchored.
    """
    start, _ = trace.span_ns
    wall0 = task_env.get("profile_start_time")
    if trace.n_events and wall0 and 0 <= start < 10**15:  # relative times (< ~11 days)
        trace.metadata["wall_anchor"] = {"mono_ns": 0, "wall_ns": int(wall0), "uncertainty_ns": 0}
        trace.metadata["clock"] = "xspace (ns since profile_start_time)"
    elif trace.n_events and start > 10**18:  # absolute wall-clock ns
        trace.metadata["wall_anchor"] = {"mono_ns": 0, "wall_ns": 0, "uncertainty_ns": 0}
        trace.metadata["clock"] = "xspace (wall-clock ns)"


_FLOW_ID_MASK = (1 << 56) - 1


def _xprof_flows(trace: Trace) -> None:
    """Flows from XProf's "flow" stats (direction in bits 0-1, a 56-bit flow id in bits
    2-57, a context type in bits 58-63): the events sharing a flow id, in time order,
    linked one to the next (category ``xflow`` or ``xflow:<context type>``). XProf
    itself links GPU launches to kernels by correlation id, which stays a stat here."""
    col = trace.stats.get("flow")
    if col is None or col.kind not in "iu" or len(col) < 2:
        return
    vals = col.values.astype(np.uint64)
    ids = (vals >> np.uint64(2)) & np.uint64(_FLOW_ID_MASK)
    cats = (vals >> np.uint64(58)).astype(np.int64)
    order = np.lexsort((trace.start_ns[col.rows], ids))
    rows, ids, cats = col.rows[order], ids[order], cats[order]
    link = np.flatnonzero(ids[1:] == ids[:-1])
    if not len(link):
        return
    names = [("xflow" if c == 0 else f"xflow:{c}") for c in cats[link].tolist()]
    cat_ids = []
    for nm in names:
        i = trace.string_id(nm)
        if i < 0:
            i = len(trace.strings)
            trace.strings.append(nm)
            trace.__dict__.pop("_string_index", None)
            trace.__dict__.pop("_string_array", None)
            trace.__dict__.pop("kinds", None)
        cat_ids.append(i)
    fl = trace.flows
    trace.flows = {
        "src": np.concatenate([fl["src"], rows[link]]).astype(np.int64),
        "dst": np.concatenate([fl["dst"], rows[link + 1]]).astype(np.int64),
        "id": np.concatenate([fl["id"], ids[link].astype(np.int64)]),
        "category": np.concatenate([fl["category"], np.asarray(cat_ids, np.int32)]),
    }


def _add_aliases(trace: Trace, drop: set[str]) -> None:
    """Copy XProf-named stats to polyprof keys; drop copies a polyprof writer added."""
    for key in drop:
        trace.stats.pop(key, None)
    added = []
    for xname, pkey in XPROF_ALIASES.items():
        if xname in trace.stats and pkey not in trace.stats:
            trace.stats[pkey] = trace.stats[xname]
            added.append(pkey)
    trace.metadata["xspace"]["alias_keys"] = added


def _classify_host_events(trace: Trace, has_devices: bool) -> None:
    """Host TraceMe events carrying a step number are steps; ``$``-names are Python calls.
    Without device planes (XLA's CPU backend) the host events naming an HLO op are the
    ops' execution: the device activity of that profile."""
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
    hlo = trace.stats.get(keys.HLO_OP)
    if not has_devices and hlo is not None and len(hlo):
        rows = hlo.rows[is_tr[hlo.rows]]
        if len(rows):
            cat[rows] = sid("xla_op")
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


#: XSpace's fields (planes, errors, warnings, hostnames), all length-delimited: their tags
_XSPACE_TAGS = (0x0A, 0x12, 0x1A, 0x22)
#: XPlane's first field tags (id, name, lines, event_metadata, stat_metadata, stats)
_XPLANE_TAGS = (0x08, 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A)


def is_protobuf_xspace(body: bytes, total: int | None) -> bool:
    """True if ``body`` (the first bytes of a file of ``total`` bytes, None if unknown)
    walks as XSpace's top-level fields: tag, length, next tag, ... each field inside
    the file, the first one a plane starting with an XPlane field.

    JSON text can start the same way (``\\n[`` is a plane of 91 bytes), but its bytes do
    not walk: every hop must land on a field tag and, in a small file, end exactly at
    its end."""
    if len(body) < 3 or body[0] != 0x0A:
        return False
    pos = 0
    fields = 0
    while pos < len(body):
        if body[pos] not in _XSPACE_TAGS:
            return False
        length, start = _varint(body, pos + 1)
        if length is None:
            return start >= len(body) and fields > 0  # the varint runs past the head
        if fields == 0 and (length == 0 or start < len(body) and body[start] not in _XPLANE_TAGS):
            return False
        end = start + length
        if total is not None and end > total:
            return False
        pos, fields = end, fields + 1
    return pos == len(body) or total is None or pos <= total


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


# =============================================================================== writing
_RESERVED_PROPS = ("xspace_event_metadata",)


class _PlaneWriter:
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


def _set_value(st: Any, value: Any, kind: str, pw: _PlaneWriter) -> None:
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
        import orjson

        try:
            st.str_value = orjson.dumps(value, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        except orjson.JSONEncodeError:  # nested beyond 254 levels or ints beyond 64 bits (read from JSON)
            st.str_value = msgspec_text(value)


def msgspec_text(value: Any) -> str:
    """JSON text of a value orjson refuses; its repr if even that fails."""
    import msgspec

    try:
        return msgspec.json.encode(value, enc_hook=str).decode()
    except (msgspec.EncodeError, RecursionError, TypeError, OverflowError):
        return repr(value)[:100_000]


def _metadata_level(trace: Trace, md_keys: set[str]) -> tuple[np.ndarray, dict[int, dict[str, Any]]]:
    """Which stats can go back on event metadata: those every event of one
    (plane, name, long name) group carries with one value, as the source had them.

    Returns each event's group code and, per group, the stats that are metadata-level.
    """
    import pandas as pd

    n = trace.n_events
    keys_ = [k for k in md_keys if k in trace.stats]
    if not n or not keys_:
        return np.zeros(n, np.int64), {}
    long_col = trace.stats.get(_STAT_LONG_NAME)
    long_ids = (pd.factorize(long_col.dense(n, ""))[0] if long_col is not None
                else np.zeros(n, np.int64))
    ev = trace.events
    groups = pd.factorize(pd.MultiIndex.from_arrays(
        [trace.event_planes(), ev["name"], long_ids]))[0]
    out: dict[int, dict[str, Any]] = {}
    for key in keys_:
        col = trace.stats[key]
        dense = col.dense(n, None)
        df = pd.DataFrame({"g": groups, "v": pd.Series(dense, dtype=object)})
        agg = df.groupby("g")["v"].agg(["nunique", "count", "size", "first"])
        ok = agg[(agg["nunique"] == 1) & (agg["count"] == agg["size"])]
        for g, v in zip(ok.index.tolist(), ok["first"].tolist()):
            out.setdefault(int(g), {})[key] = v
    return groups, out


def _default_category(plane_is_host: bool, line_name: str) -> str:
    return CAT_TRACEME if plane_is_host else _LINE_CATEGORIES.get(line_name, "")


_MAX_SPAN_NS = (2**63 - 1) // 1000 // 2  # ps offsets from a line's start, with room for durations


def to_space(trace: Trace, hostname: str | None = None) -> Any:
    """The XSpace message for ``trace`` (see the module docstring for what goes where)."""
    pb = _pb()
    space = pb.XSpace()
    host = hostname or _hostname(trace)
    if host:
        space.hostnames.append(host)
    meta_x = trace.metadata.get("xspace", {}) if isinstance(trace.metadata.get("xspace"), dict) else {}
    space.errors.extend(str(e) for e in meta_x.get("errors", []))
    space.warnings.extend(str(w) for w in meta_x.get("warnings", []))
    for e in trace.metadata.get("plugin_errors", []) or []:
        space.errors.append(f"{e.get('plugin', '?')} {e.get('phase', '?')}: {e.get('error', '')}")

    # value kind per stat key: the source's XSpace kind when known, else the column's dtype
    src_kinds: dict[str, list[str]] = meta_x.get("stat_value_kinds", {}) or {}
    aliases = {p: x for x, p in XPROF_ALIASES.items() if p in trace.stats and x not in trace.stats}
    col_kind: dict[str, str] = {}
    for key, col in trace.stats.items():
        k = col.kind
        known = set(src_kinds.get(key, ()))
        if k == "O" and known == {"ref_value"}:
            k = "ref"
        elif k == "i" and known == {"uint64_value"}:
            k = "u"
        elif k == "O":
            k = ""
        col_kind[key] = k
    # the XStat field each column's values go to, when one field fits them all
    field_of: dict[str, str | None] = {}
    for key, col in trace.stats.items():
        k = col_kind[key]
        if k == "f":
            field_of[key] = "double_value"
        elif k == "i":
            field_of[key] = "int64_value"
        elif k == "u":
            field_of[key] = "uint64_value" if (not len(col.values) or col.values.min() >= 0) else "int64_value"
        elif k == "ref" and all(isinstance(v, str) for v in col.values):
            field_of[key] = "ref"
        elif k == "" and all(isinstance(v, str) for v in col.values):
            field_of[key] = "str_value"
        elif k == "" and all(isinstance(v, bytes) for v in col.values):
            field_of[key] = "bytes_value"
        else:
            field_of[key] = None
    for key, alias in aliases.items():
        field_of[alias], col_kind[alias] = field_of[key], col_kind[key]

    n = trace.n_events
    ev = trace.events
    names = trace.names() if n else np.zeros(0, object)
    cats = trace.categories() if n else np.zeros(0, object)
    long_col = trace.stats.get(_STAT_LONG_NAME)
    long_names = long_col.dense(n, "") if long_col is not None else None

    # per-event stats: (key, value) lists, built column by column
    ev_stats: list[list[tuple[str, Any]] | None] = [None] * n
    skip = {_STAT_LONG_NAME}
    skip.update(k for k in meta_x.get("alias_keys", []) or []
                if any(x in trace.stats for x, p in XPROF_ALIASES.items() if p == k))
    groups, md_level = _metadata_level(trace, set(meta_x.get("metadata_stat_keys", []) or []))
    for key, col in trace.stats.items():
        if key in skip:
            continue
        vals = col.values.tolist() if col.kind in "iuf" else list(col.values)
        out_keys = [key] + ([aliases[key]] if key in aliases else [])
        for r, v in zip(col.rows.tolist(), vals):
            lst = ev_stats[r]
            if lst is None:
                lst = ev_stats[r] = []
            for ok in out_keys:
                lst.append((ok, v))
    # the stats XProf's GPU tools read (kernel details, framework op, step groups)
    added = {k: c for k, c in xprof_columns(trace).items() if k not in aliases.values()}
    for key, (rows_, vals) in added.items():
        field_of[key] = None
        for r, v in zip(rows_.tolist(), vals):
            lst = ev_stats[r]
            if lst is None:
                lst = ev_stats[r] = []
            lst.append((key, v))
    fl = trace.flows
    flow_marks: list[list[tuple[str, Any]]] = [[] for _ in range(n)] if len(fl["src"]) else []
    for k, (s, d, fid, c) in enumerate(zip(fl["src"].tolist(), fl["dst"].tolist(), fl["id"].tolist(),
                                            fl["category"].tolist())):
        flow_marks[s].append((_STAT_FLOW_OUT, f"{k + 1}:{fid}:{trace.strings[c]}"))
        flow_marks[d].append((_STAT_FLOW_IN, k + 1))

    first, last = trace.span_ns
    if len(trace.counters["ts_ns"]):
        first = min(first, int(trace.counters["ts_ns"].min())) if n else int(trace.counters["ts_ns"].min())
        last = max(last, int(trace.counters["ts_ns"].max()))
    if last - first > _MAX_SPAN_NS:  # XEvent offsets are int64 ps
        from ..errors import PolyprofError

        raise PolyprofError(f"the trace spans {last - first:,} ns: more than XSpace's ps offsets can hold "
                            f"({_MAX_SPAN_NS:,} ns)")
    origin = first if (first >= _MAX_PLAIN_NS or first < 0) else 0
    by_track = np.argsort(ev["track"], kind="stable") if n else np.zeros(0, np.int64)
    bounds = np.searchsorted(ev["track"][by_track], np.arange(len(trace.tracks) + 1)) if n else None
    used_plane_ids: set[int] = set()
    c = export_counters(trace)  # with the memory series as counter tracks
    plane_names = written_names(trace.planes)
    wrote_memory = False
    homes = line_homes(trace.planes)
    # one time base per XPlane: XProf's GPU tools take event offsets of different lines
    # as comparable (CUPTI writes every line of a device at the same timestamp)
    plane_base = {}
    step_spans = device_step_spans(trace)
    if n:
        ev_home = np.asarray(homes, np.int64)[trace.track_plane[ev["track"]]]
        for h in np.unique(ev_home).tolist():
            plane_base[h] = int(ev["start_ns"][ev_home == h].min())
    for p in (trace.planes[i] for i in write_order(trace.planes, homes)):
        xp = space.planes.add()
        xid = p.pid if p.pid not in used_plane_ids else 1_000_000 + p.id
        used_plane_ids.add(xid)
        xp.id = xid
        xp.name = plane_names[p.id]
        pw = _PlaneWriter(xp)
        host_plane = p.kind == "host"
        for k, v in p.properties.items():
            if k in _RESERVED_PROPS or v is None:
                continue
            st = xp.stats.add()
            st.metadata_id = pw.stat_id(k)
            _set_value(st, v, "", pw)
        layout: dict[str, Any] = {}
        if xp.name != p.name:
            layout["name"] = p.name
        inferred_kind, _, inferred_index = _plane_kind(xp.name)
        if p.kind != inferred_kind:
            layout["kind"] = p.kind
        if p.vendor:
            layout["vendor"] = p.vendor
        if p.index != inferred_index:
            layout["index"] = p.index
        track_layout: dict[str, Any] = {}
        for md in p.properties.get("xspace_event_metadata", []) or []:
            mid = pw.keep_event_id(int(md.get("id", 0)), md.get("display_name") or md.get("name", ""),
                                   md.get("name", "") if md.get("display_name") else "")
            xm = xp.event_metadata[mid]
            for k, v in (md.get("stats") or {}).items():
                st = xm.stats.add()
                st.metadata_id = pw.stat_id(k)
                _set_value(st, v, col_kind.get(k, ""), pw)
        used_line_ids: set[int] = set()
        md_done: set[int] = set()
        sids = pw.stat_ids
        for t in trace.tracks:
            if homes[t.plane] != p.id:
                continue
            xl = xp.lines.add()
            lid = int(t.tid)
            if lid in used_line_ids:
                lid = 1_500_000_000 + t.id
            used_line_ids.add(lid)
            xl.id = lid
            xl.name = t.name
            tl: dict[str, Any] = {}
            if t.kind != ("thread" if host_plane else _LINE_KINDS.get(t.name, "stream")):
                tl["kind"] = t.kind
            if lid != t.tid:
                tl["tid"] = t.tid
            if t.plane != p.id:
                tl["plane"] = trace.planes[t.plane].name  # a placeholder plane's thread
            extra = {k: v for k, v in t.properties.items() if k not in ("display_name", "display_id", "duration_ps")}
            if extra:
                tl["props"] = extra
            if tl:
                track_layout[str(lid)] = tl
            if t.properties.get("display_name"):
                xl.display_name = str(t.properties["display_name"])
            if t.properties.get("display_id"):
                xl.display_id = int(t.properties["display_id"])
            if t.properties.get("duration_ps"):
                xl.duration_ps = int(t.properties["duration_ps"])
            if bounds is None:
                continue
            rows = by_track[bounds[t.id]:bounds[t.id + 1]]
            if not len(rows):
                continue
            starts = ev["start_ns"][rows]
            durs = ev["dur_ns"][rows]
            order = np.lexsort((-durs, starts))  # parents before children
            rows, starts, durs = rows[order], starts[order], durs[order]
            base = plane_base.get(p.id, int(starts[0]))
            xl.timestamp_ns = base - origin
            default_cat = _default_category(host_plane, t.name)
            offs = ((starts - base) * 1000).tolist()
            dps = (durs * 1000).tolist()
            for r, off, dp in zip(rows.tolist(), offs, dps):
                nm = names[r]
                xe = xl.events.add()
                xe.metadata_id = pw.event_id(nm, long_names[r] if long_names is not None else "")
                xe.offset_ps = off
                xe.duration_ps = dp
                if cats[r] != default_cat:
                    st = xe.stats.add()
                    st.metadata_id = pw.stat_id(_STAT_CATEGORY)
                    st.str_value = cats[r]
                md_here = md_level.get(int(groups[r])) if md_level else None
                if md_here and xe.metadata_id not in md_done:
                    md_done.add(xe.metadata_id)
                    xm = xp.event_metadata[xe.metadata_id]
                    for key, v in md_here.items():
                        st = xm.stats.add()
                        st.metadata_id = pw.stat_id(key)
                        _set_value(st, v, col_kind.get(key, ""), pw)
                for key, v in ev_stats[r] or ():
                    if md_here and key in md_here:
                        continue
                    st = xe.stats.add()
                    st.metadata_id = sids.get(key) or pw.stat_id(key)
                    f = field_of.get(key)
                    if f is None:
                        _set_value(st, v, col_kind.get(key, ""), pw)
                    elif f == "ref":
                        st.ref_value = sids.get(v) or pw.stat_id(v)
                    else:
                        setattr(st, f, v)
                if flow_marks:
                    for key, v in flow_marks[r]:
                        st = xe.stats.add()
                        st.metadata_id = pw.stat_id(key)
                        _set_value(st, v, "", pw)
        if p.kind == "device" and p.id in step_spans and not any(
                t.name == STEP_LINE_NAME and homes[t.plane] == p.id for t in trace.tracks):
            _write_step_line(xp, pw, step_spans[p.id], origin, plane_base.get(p.id, 0))
            track_layout[str(STEP_LINE_ID)] = {"generated": 1}
        if track_layout:
            layout["tracks"] = track_layout
        import orjson

        if origin:
            st = xp.stats.add()
            st.metadata_id = pw.stat_id(_PLANE_STAT_ORIGIN)
            st.int64_value = origin
        if p.name == _TASK_ENV:
            _task_env_stats(xp, pw, trace, None, None)
        for key, val in ((_PLANE_STAT_PRODUCER, "polyprof"),
                         (_PLANE_STAT_ALIASES, ",".join(sorted({*aliases.values(), *added}))),
                         (_PLANE_STAT_LAYOUT, orjson.dumps(layout, default=str).decode() if layout else "")):
            if val:
                st = xp.stats.add()
                st.metadata_id = pw.stat_id(key)
                st.str_value = val
        sel = np.flatnonzero(c["plane"] == p.id) if len(c["ts_ns"]) else []
        if len(sel):
            xl = xp.lines.add()
            xl.id = 2_000_000_000 + p.id
            xl.name = _COUNTER_LINE
            ts = c["ts_ns"][sel]
            base = int(ts.min())
            xl.timestamp_ns = base - origin
            vid = pw.stat_id(_STAT_COUNTER_VALUE)
            for nm, t_, v in zip(c["name"][sel].tolist(), ((ts - base) * 1000).tolist(), c["value"][sel].tolist()):
                xe = xl.events.add()
                xe.metadata_id = pw.event_id(trace.strings[nm])
                xe.offset_ps = t_
                st = xe.stats.add()
                st.metadata_id = vid
                st.double_value = v
        if plane_names[p.id] == keys.HOST_PLANE and not wrote_memory:
            xprof_memory.write_line(xp, pw, trace, origin, 2_100_000_000 + p.id)
            wrote_memory = True
    if not any(p.name == _TASK_ENV for p in trace.planes):
        xp = space.planes.add()
        xp.name = _TASK_ENV
        pw = _PlaneWriter(xp)
        _task_env_stats(xp, pw, trace, first, last)
        st = xp.stats.add()
        st.metadata_id = pw.stat_id(_PLANE_STAT_GENERATED)
        st.int64_value = 1
    return space


def _write_step_line(xp: Any, pw: _PlaneWriter, spans: list[tuple[int, str, int, int]], origin: int,
                     base: int) -> None:
    """XProf's derived "Steps" line of a device: one event per step, over the device
    activity launched in it, with the step's group id (``xprof_stats``)."""
    xl = xp.lines.add()
    xl.id = STEP_LINE_ID
    xl.name = STEP_LINE_NAME
    base = min(base, min(s for _, _, s, _ in spans))
    xl.timestamp_ns = base - origin
    gid = pw.stat_id(GROUP_ID)
    for group, name, start, end in spans:
        xe = xl.events.add()
        xe.metadata_id = pw.event_id(name)
        xe.offset_ps = (start - base) * 1000
        xe.duration_ps = (end - start) * 1000
        st = xe.stats.add()
        st.metadata_id = gid
        st.int64_value = group


def _wall_ns(trace: Trace, t: int) -> int | None:
    """Wall-clock ns of trace time ``t``, if the trace says how to know it."""
    anchor = trace.metadata.get("wall_anchor")
    if isinstance(anchor, dict) and "wall_ns" in anchor and "mono_ns" in anchor:
        return int(anchor["wall_ns"]) + t - int(anchor["mono_ns"])
    if trace.metadata.get("clock") == "wall" or t > 10**18:
        return t
    return None


def _task_env_stats(xp: Any, pw: _PlaneWriter, trace: Trace, first: int | None, last: int | None) -> None:
    """The profile's start/stop wall times (as XProf and JAX write them) and, for
    reading back, the trace's metadata."""
    import orjson

    if first is not None and last is not None and trace.n_events:
        for key, t in (("profile_start_time", first), ("profile_stop_time", last)):
            wall = _wall_ns(trace, t)
            if wall is not None and wall >= 0:
                st = xp.stats.add()
                st.metadata_id = pw.stat_id(key)
                st.uint64_value = wall
    st = xp.stats.add()
    st.metadata_id = pw.stat_id(_PLANE_STAT_METADATA)
    st.str_value = orjson.dumps(trace.metadata, default=str,
                                option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()


def _hostname(trace: Trace) -> str:
    sess = trace.metadata.get("session")
    if isinstance(sess, dict) and sess.get("hostname"):
        return str(sess["hostname"])
    hosts = (trace.metadata.get("xspace") or {}).get("hostnames") if isinstance(trace.metadata.get("xspace"), dict) else None
    if hosts:
        return str(hosts[0])
    for p in trace.planes:
        if p.properties.get("hostname"):
            return str(p.properties["hostname"])
    return ""


def to_bytes(trace: Trace) -> bytes:
    """``trace`` as a serialized XSpace (what ``.xplane.pb`` files hold)."""
    return to_space(trace).SerializeToString()


def write(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as an ``.xplane.pb`` file (gzipped if the name ends in ``.gz``)."""
    path = Path(path)
    data = to_bytes(trace)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=5)
    path.write_bytes(data)
    return path


def write_logdir(trace: Trace, logdir: str | Path, run: str | None = None, host: str | None = None) -> Path:
    """Write ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``, where TensorBoard and
    XProf look for profiles; ``run`` defaults to the current time as XProf names runs."""
    run = run or time.strftime("%Y_%m_%d_%H_%M_%S")
    host = host or _hostname(trace) or socket.gethostname() or "localhost"
    host = re.sub(r"[^A-Za-z0-9._-]", "_", host)
    out = Path(logdir) / "plugins" / "profile" / run
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{host}.xplane.pb"
    path.write_bytes(to_space(trace, hostname=host).SerializeToString())
    return path
