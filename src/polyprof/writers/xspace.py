"""Trace -> XSpace, with the stats and line names XProf's converters read.

Any Trace becomes an XSpace with one plane per plane and one line per track, metadata
deduplicated per plane, stats with their value kinds. XProf holds times as uint64
picoseconds, so absolute (wall-clock) times are written relative to the first event,
like JAX does, with a "Task Environment" plane giving the wall-clock start. A polyprof
category, flows, counters, track kinds and the trace's metadata are written in
``polyprof.*`` stats XProf ignores and the reader restores, so polyprof -> XSpace ->
polyprof keeps them. Device planes XProf's analyses would skip (any but GPU and TPU;
CUSTOM ones are in its timeline only) are written as ``/device:GPU:<n>`` under their
own name in the layout stat (``xprof_names.py``). A trace of several sources (an MPI
report's processes) has every process's threads on the one ``/host:CPU`` XProf reads,
its sources in a Task Environment stat and each plane's source in its layout; ids
unique per source (``formats/export_ids.py``). Events go in as columns (``xspace_stats``, ``formats.xspace.encode``).
"""

from __future__ import annotations

import contextlib
import gzip
import re
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import PolyprofError
from ..trace import keys
from ..trace.core import Trace
from ..formats import xprof_memory
from .xprof_names import line_homes, write_order, written_names
from .xprof_stats import GROUP_ID, STEP_LINE_ID, STEP_LINE_NAME, device_groups, device_step_spans
from ..derive import cache
from ..formats.xspace import names as N
from ..outfile import write_file
from ..formats.xspace.encode import encode_events
from ..formats.xspace.wire import pb
from .xprof_costs import METADATA_PLANE, device_caps, device_costs, write_hlo_module
from .xspace_plane import PlaneWriter, set_value
from .xspace_stats import WrittenStats
from ..trace import metadata_keys as mkeys


@dataclass
class _Plan:
    """What every plane's writing shares."""

    trace: Trace
    stats: WrittenStats
    names: np.ndarray  # event name ids -> str, per event row via trace.events["name"]
    long_ids: np.ndarray | None  # per event: id into long_table ("" = none)
    long_table: list[str]
    origin: int
    homes: list[int]
    plane_base: dict[int, int]
    counters: dict[str, np.ndarray]
    compiled: bool


def to_space(trace: Trace, hostname: str | None = None, compiled: bool = True) -> Any:
    """The XSpace message for ``trace`` (see the module docstring for what goes where);
    ``compiled=False`` encodes events through protobuf's messages (the reference)."""
    space = pb().XSpace()
    space.hostnames.extend([hostname] if hostname else hostnames(trace))
    meta_x = trace.metadata.get(mkeys.XSPACE, {}) if isinstance(trace.metadata.get(mkeys.XSPACE), dict) else {}
    space.errors.extend(str(e) for e in meta_x.get("errors", []))
    space.warnings.extend(str(w) for w in meta_x.get("warnings", []))
    for e in trace.metadata.get(mkeys.PLUGIN_ERRORS, []) or []:
        space.errors.append(f"{e.get('plugin', '?')} {e.get('phase', '?')}: {e.get('error', '')}")
    plan, first, last = _plan(trace, meta_x, compiled)
    plane_names = written_names(trace.planes)
    wrote_memory = False
    used_ids: set[int] = set()
    for p in (trace.planes[i] for i in write_order(trace.planes, plan.homes)):
        xp = space.planes.add()
        xp.id = p.pid if p.pid not in used_ids else 1_000_000 + p.id
        used_ids.add(xp.id)
        xp.name = plane_names[p.id]
        pw = PlaneWriter(xp)
        _write_plane(plan, p, xp, pw)
        if plane_names[p.id] == keys.HOST_PLANE and not wrote_memory:
            xprof_memory.write_line(xp, pw, trace, plan.origin, 2_100_000_000 + p.id)
            wrote_memory = True
    costs = device_costs(trace)
    if costs is not None and not any(p.name == METADATA_PLANE for p in trace.planes):
        # XProf's /host:metadata plane with the module of the framework ops; the reader drops it
        xp = space.planes.add()
        xp.id, xp.name = max(used_ids, default=0) + 1, METADATA_PLANE
        pw = PlaneWriter(xp)
        write_hlo_module(pw, costs)
        st = xp.stats.add()
        st.metadata_id = pw.stat_id(N.PLANE_STAT_GENERATED)
        st.int64_value = 1
    if not any(p.name == N.TASK_ENV for p in trace.planes):
        xp = space.planes.add()
        xp.name = N.TASK_ENV
        pw = PlaneWriter(xp)
        _task_env_stats(xp, pw, trace, first, last)
        st = xp.stats.add()
        st.metadata_id = pw.stat_id(N.PLANE_STAT_GENERATED)
        st.int64_value = 1
    return space


def _plan(trace: Trace, meta_x: dict[str, Any], compiled: bool) -> tuple[_Plan, int, int]:
    n = trace.n_events
    ev = trace.events
    homes = line_homes(trace.planes)
    # the default category of each event's line: events of another category get a stat
    table = np.asarray([trace.string_id(N.default_category(trace.planes[homes[t.plane]].kind == "host", t.name))
                        for t in trace.tracks], np.int64)
    stats = WrittenStats(trace, meta_x, table[ev["track"]] if n else np.zeros(0, np.int64))
    long_col = trace.stats.get(N.STAT_LONG_NAME)
    long_ids, long_table = None, [""]
    if long_col is not None and n:
        import pandas as pd

        long_ids, uniq = pd.factorize(long_col.dense(n, ""))
        long_table = [str(u) for u in uniq]
    first, last = trace.span_ns
    c = xprof_memory.xspace_counters(trace)  # with the memory series as counter tracks
    if len(c["ts_ns"]):
        first = min(first, int(c["ts_ns"].min())) if n else int(c["ts_ns"].min())
        last = max(last, int(c["ts_ns"].max()))
    if last - first > N.MAX_SPAN_NS:  # XEvent offsets are int64 ps
        named = ", ".join(sorted({s.label for s in trace.sources if s.label})) or "the trace"
        what = "a window of it (--steps) or another format" if len(cache.steps(trace)) else \
            "it in another format (it has no steps to export a window of)"
        raise PolyprofError(f"{named}: spans {last - first:,} ns, more than XSpace's ps offsets can hold "
                            f"({N.MAX_SPAN_NS:,} ns); export {what}")
    origin = first if (first >= N.MAX_PLAIN_NS or first < 0) else 0
    # one time base per XPlane: XProf's GPU tools take event offsets of different lines
    # as comparable (CUPTI writes every line of a device at the same timestamp)
    plane_base = {}
    if n:
        ev_home = np.asarray(homes, np.int64)[trace.track_plane[ev["track"]]]
        order = np.argsort(ev_home, kind="stable")
        uh, at = np.unique(ev_home[order], return_index=True)
        mins = np.minimum.reduceat(ev["start_ns"][order], at)
        plane_base = dict(zip(uh.tolist(), mins.tolist()))
    plan = _Plan(trace, stats, trace._string_array, long_ids, long_table, origin, homes, plane_base, c, compiled)
    return plan, first, last


def _write_plane(plan: _Plan, p: Any, xp: Any, pw: PlaneWriter) -> None:
    trace = plan.trace
    for k, v in p.properties.items():
        if k in N.RESERVED_PROPS or v is None:
            continue
        st = xp.stats.add()
        st.metadata_id = pw.stat_id(k)
        set_value(st, v, "", pw)
    caps = device_caps(trace, p) if xp.name.startswith("/device:GPU:") else {}
    for k, v in caps.items():  # XProf's device capabilities (xprof_costs), dropped on reading
        st = xp.stats.add()
        st.metadata_id = pw.stat_id(k)
        set_value(st, v, "", pw)
    layout: dict[str, Any] = {}
    if xp.name != p.name:
        layout["name"] = p.name
    inferred_kind, _, inferred_index = N.plane_kind(xp.name)
    if p.kind != inferred_kind:
        layout["kind"] = p.kind
    if p.vendor:
        layout["vendor"] = p.vendor
    if p.index != inferred_index:
        layout["index"] = p.index
    if p.source and len(trace.sources) > 1:
        layout["source"] = p.source  # (the sources: Task Environment's PLANE_STAT_SOURCES)
    for md in p.properties.get("xspace_event_metadata", []) or []:
        mid = pw.keep_event_id(int(md.get("id", 0)), md.get("display_name") or md.get("name", ""),
                               md.get("name", "") if md.get("display_name") else "")
        xm = xp.event_metadata[mid]
        for k, v in (md.get("stats") or {}).items():
            st = xm.stats.add()
            st.metadata_id = pw.stat_id(k)
            set_value(st, v, plan.stats.col_kind.get(k, ""), pw)
    track_layout: dict[str, Any] = {}
    lines = _PlaneLines(plan, xp, pw, p)
    for t in trace.tracks:
        if plan.homes[t.plane] == p.id:
            lines.write(t, track_layout)
    step_spans = device_step_spans(trace)
    if p.kind == "device" and p.id in step_spans and not any(
            t.name == STEP_LINE_NAME and plan.homes[t.plane] == p.id for t in trace.tracks):
        _write_step_line(xp, pw, step_spans[p.id], plan.origin, plan.plane_base.get(p.id, 0))
        track_layout[str(STEP_LINE_ID)] = {"generated": 1}
    if track_layout:
        layout["tracks"] = track_layout
    import orjson

    if plan.origin:
        st = xp.stats.add()
        st.metadata_id = pw.stat_id(N.PLANE_STAT_ORIGIN)
        st.int64_value = plan.origin
    if p.name == N.TASK_ENV:
        _task_env_stats(xp, pw, trace, None, None)
    for key, val in ((N.PLANE_STAT_PRODUCER, "polyprof"),
                     (N.PLANE_STAT_ALIASES, ",".join([*plan.stats.aliases, *caps])),
                     (N.PLANE_STAT_ADDED, ",".join(_added_here(plan, p.id))),
                     (N.PLANE_STAT_LAYOUT, orjson.dumps(layout, default=str).decode() if layout else "")):
        if val:
            st = xp.stats.add()
            st.metadata_id = pw.stat_id(key)
            st.str_value = val
    _write_counters(plan, p, xp, pw)


#: XProf's trace viewer keys a line's row by its display id (else its id) cut to 32 bits
#: and reads this key (line id -1) as "no row": such a line is shown empty, its events lost
_U32 = 0xFFFFFFFF


class _PlaneLines:
    """The lines of one written plane: ids kept unique, events as columns."""

    def __init__(self, plan: _Plan, xp: Any, pw: PlaneWriter, p: Any):
        self.plan, self.xp, self.pw, self.p = plan, xp, pw, p
        self.used_ids: set[int] = set()
        # the 32-bit row keys XProf gives this plane's lines (display ids: kept as read)
        self.keys: set[int] = {int(t.properties["display_id"]) & _U32 for t in plan.trace.tracks
                               if plan.homes[t.plane] == p.id and t.properties.get("display_id")}
        self.md_done: set[int] = set()
        ev = plan.trace.events
        if plan.trace.n_events:
            self.by_track = np.argsort(ev["track"], kind="stable")
            self.bounds = np.searchsorted(ev["track"][self.by_track], np.arange(len(plan.trace.tracks) + 1))
        self.sid = np.full(len(plan.stats.keys), -1, np.int64)  # stat key code -> this plane's stat id

    def write(self, t: Any, track_layout: dict[str, Any]) -> None:
        plan, xp = self.plan, self.xp
        xl = xp.lines.add()
        lid = self._line_id(t)
        xl.id = lid
        xl.name = t.name
        tl: dict[str, Any] = {}
        if t.kind != N.default_track_kind(self.p.kind == "host", t.name):
            tl["kind"] = t.kind
        if lid != t.tid:
            tl["tid"] = t.tid
        if t.plane != self.p.id:
            owner = plan.trace.planes[t.plane]
            tl["plane"] = owner.name  # a placeholder plane's thread
            if owner.source and len(plan.trace.sources) > 1:
                tl["source"] = owner.source
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
        if not plan.trace.n_events:
            return
        rows = self.by_track[self.bounds[t.id]:self.bounds[t.id + 1]]
        if len(rows):
            self._events(xl, rows)

    def _line_id(self, t: Any) -> int:
        """The track's thread id as its line id, unless another line of the plane has it,
        or (a line XProf keys by its id) XProf would not show it on a row of its own:
        key 0xFFFFFFFF (a Kineto string-named track's tid -1) or a key another line has
        (ids equal in their low 32 bits). Then an id of its own, the tid kept in the
        layout stat for the reader."""
        by_id = not t.properties.get("display_id")
        lid, n = int(t.tid), 0
        while lid in self.used_ids or (by_id and ((lid & _U32) == _U32 or (lid & _U32) in self.keys)):
            lid = 1_500_000_000 + t.id + n * len(self.plan.trace.tracks)
            n += 1
        self.used_ids.add(lid)
        if by_id:
            self.keys.add(lid & _U32)
        return lid

    def _events(self, xl: Any, rows: np.ndarray) -> None:
        plan, pw = self.plan, self.pw
        ev = plan.trace.events
        starts, durs = ev["start_ns"][rows], ev["dur_ns"][rows]
        order = np.lexsort((-durs, starts))  # parents before children
        rows, starts, durs = rows[order], starts[order], durs[order]
        base = plan.plane_base.get(self.p.id, int(starts[0]))
        xl.timestamp_ns = base - plan.origin
        # event metadata: one per (name, long name) on this plane
        long_ids = plan.long_ids[rows] if plan.long_ids is not None else np.zeros(len(rows), np.int64)
        key = ev["name"][rows].astype(np.int64) * (len(plan.long_table) + 1) + long_ids
        uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
        mids = np.zeros(len(uniq), np.int64)
        for j in np.argsort(first).tolist():  # ids in order of first use, as events are added
            i = int(first[j])
            mids[j] = pw.event_id(str(plan.names[ev["name"][rows[i]]]), plan.long_table[long_ids[i]])
        self._metadata_stats(rows, first, mids)
        ws = plan.stats
        counts, idx = ws.of_rows(rows)
        codes = ws.codes[idx]
        new = codes[self.sid[codes] < 0]
        if len(new):
            uniq_new, at = np.unique(new, return_index=True)
            for code in uniq_new[np.argsort(at)].tolist():  # ids in order of first use
                self.sid[code] = pw.stat_id(ws.keys[code])
        kind, vals = ws.kind[idx], ws.vals[idx]
        ints = vals  # (a double's bits where kind is 1: read as dbls)
        with_obj = kind >= 4
        objs = ws.objs[np.searchsorted(ws.obj_at, idx[with_obj])] if with_obj.any() else ws.objs[:0]
        obj_kind = kind[with_obj]
        if (obj_kind == 6).any():
            ints = vals.copy()
            ints[kind == 6] = [pw.ref_id(v) for v in objs[obj_kind == 6].tolist()]
        strs = objs[(obj_kind == 4) | (obj_kind == 5)].tolist()
        data = encode_events(mids[inv.reshape(-1)], (starts - base) * 1000, durs * 1000, counts, self.sid[codes],
                             kind, ints, vals.view(np.float64), strs, compiled=plan.compiled)
        xl.MergeFromString(data)

    def _metadata_stats(self, rows: np.ndarray, first: np.ndarray, mids: np.ndarray) -> None:
        """Stats that every event of a (plane, name) group shares go on its metadata."""
        ws = self.plan.stats
        if not ws.md_level:
            return
        for i, mid in sorted(zip(first.tolist(), mids.tolist())):
            md_here = ws.md_level.get(int(ws.groups[rows[i]]))
            if not md_here or mid in self.md_done:
                continue
            self.md_done.add(mid)
            xm = self.xp.event_metadata[mid]
            for key, v in md_here.items():
                st = xm.stats.add()
                st.metadata_id = self.pw.stat_id(key)
                set_value(st, v, ws.col_kind.get(key, ""), self.pw)


def _added_here(plan: _Plan, plane: int) -> list[str]:
    """The keys the writer added to this plane's events alone (``xprof_costs.plane_columns``)."""
    homes = np.asarray(plan.homes, np.int64)
    tp, tracks = plan.trace.track_plane, plan.trace.events["track"]
    return [k for k, (rows, _) in plan.stats.plane_added.items() if (homes[tp[tracks[rows]]] == plane).any()]


def _write_counters(plan: _Plan, p: Any, xp: Any, pw: PlaneWriter) -> None:
    """The plane's counter samples as instants on polyprof's counter line, the value in a
    stat. XProf takes an event whose name reads as ``name:type`` for a framework op
    wherever it is, so a counter named so (``memory.allocated_bytes:torch``) is written
    under a name XProf does not parse (``counter_event_name``) and shown, and read back,
    by its own name (the display name). On a device plane the samples carry the
    ``group_id`` of their step (``xprof_stats.device_groups``): XProf would otherwise
    give them the group of the event before them and stretch that step."""
    c = plan.counters
    sel = np.flatnonzero(c["plane"] == p.id) if len(c["ts_ns"]) else np.zeros(0, np.int64)
    if not len(sel):
        return
    xl = xp.lines.add()
    xl.id = 2_000_000_000 + p.id
    xl.name = N.COUNTER_LINE
    ts = c["ts_ns"][sel]
    base = int(ts.min())
    xl.timestamp_ns = base - plan.origin
    strings = plan.trace.strings
    mids = np.asarray([pw.event_id(strings[nm], counter_event_name(strings[nm])) for nm in c["name"][sel].tolist()],
                      np.int64)
    n = len(sel)
    grouped = p.kind == "device" and GROUP_ID not in plan.trace.stats and len(cache.steps(plan.trace))
    groups = device_groups(plan.trace).counters[sel] if grouped else np.full(n, -1, np.int64)
    has = groups >= 0
    counts = 1 + has.astype(np.int64)
    first = np.cumsum(counts) - counts  # each sample's first stat: the value, then its group
    k = int(counts.sum())
    st_mid = np.full(k, pw.stat_id(N.STAT_COUNTER_VALUE), np.int64)
    kind = np.ones(k, np.uint8)
    ints, dbls = np.zeros(k, np.int64), np.zeros(k, np.float64)
    dbls[first] = c["value"][sel]
    if has.any():
        gs = first[has] + 1
        st_mid[gs] = pw.stat_id(GROUP_ID)
        kind[gs] = 3  # int64_value
        ints[gs] = cache.steps(plan.trace).number[groups[has]]
    data = encode_events(mids, (ts - base) * 1000, np.zeros(n, np.int64), counts, st_mid, kind, ints, dbls, [],
                         compiled=plan.compiled)
    xl.MergeFromString(data)


def counter_event_name(name: str) -> str:
    """The XEventMetadata name of a counter: ``name`` itself unless XProf would read it as
    an op (``tsl ParseTfOpFullname``: ``name:type``, or a name starting ``memcpy``);
    then ``name`` with ``:`` as ``/``, after "counter ". "" = the name itself."""
    if ":" not in name and not name.lower().startswith("memcpy"):
        return ""
    return "counter " + name.replace(":", "/")


def _write_step_line(xp: Any, pw: PlaneWriter, spans: list[tuple[int, str, int, int]], origin: int,
                     base: int) -> None:
    """XProf's derived "Steps" line of a device: one marker per step with the step's group
    id (``xprof_stats.device_step_spans``: the host step where it holds the step's device
    activity, else that activity's span)."""
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
    anchor = trace.metadata.get(mkeys.SOURCE_WALL_ANCHOR)
    if isinstance(anchor, dict) and "wall_ns" in anchor and "mono_ns" in anchor:
        return int(anchor["wall_ns"]) + t - int(anchor["mono_ns"])
    if trace.metadata.get(mkeys.CLOCK_NAME) == "wall" or t > 10**18:
        return t
    return None


def _task_env_stats(xp: Any, pw: PlaneWriter, trace: Trace, first: int | None, last: int | None) -> None:
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
    st.metadata_id = pw.stat_id(N.PLANE_STAT_METADATA)
    st.str_value = orjson.dumps(trace.metadata, default=str,
                                option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    if len(trace.sources) > 1:  # which process or rank each plane is of (its layout's "source")
        st = xp.stats.add()
        st.metadata_id = pw.stat_id(N.PLANE_STAT_SOURCES)
        st.str_value = orjson.dumps({"sources": [asdict(src) for src in trace.sources]}, default=str,
                                    option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()


def hostnames(trace: Trace) -> list[str]:
    """The hosts ``trace`` was recorded on, distinct, in order: its sources' hosts (what
    the readers take from the file: nsys's ``Hostname``, rocpd's node, an XSpace's
    ``hostnames``, a live session's host), then those its metadata and planes name
    beside them. Empty when the trace names none."""
    sess = trace.metadata.get(mkeys.SESSION)
    xs = trace.metadata.get(mkeys.XSPACE)
    named = [s.host for s in trace.sources]
    named += [str(h) for h in (xs.get("hostnames") or [] if isinstance(xs, dict) else [])]
    named.append(str(sess.get("hostname") or "") if isinstance(sess, dict) else "")
    named += [str(p.properties.get("hostname") or "") for p in trace.planes]
    return list(dict.fromkeys(h for h in named if h))


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


def write_logdir(trace: Trace, logdir: str | Path, run: str | None = None, host: str | None = None,
                 force: bool = False) -> Path:
    """Write ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``, where TensorBoard and
    XProf look for profiles; ``run`` defaults to the current time as XProf names runs.
    ``host`` defaults to the (first) host the trace was recorded on (``hostnames``), and
    to this machine's only where the trace names none."""
    run = run or time.strftime("%Y_%m_%d_%H_%M_%S")
    recorded = hostnames(trace)
    name = host or (recorded[0] if recorded else "") or socket.gethostname() or "localhost"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    out = Path(logdir) / "plugins" / "profile" / run
    path = out / f"{name}.xplane.pb"
    data = to_space(trace, hostname=host or (None if recorded else name)).SerializeToString()
    made = [d for d in (out, *out.parents) if not d.exists()]  # the folders this write makes, deepest first
    out.mkdir(parents=True, exist_ok=True)
    try:
        write_file(path, lambda tmp: tmp.write_bytes(data), force)
    except BaseException:  # (a full disk: the folders it made go too; one another writer filled stays)
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    return path
