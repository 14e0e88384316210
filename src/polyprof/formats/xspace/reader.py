"""XSpace -> Trace: planes, lines and events into columns.

Every XPlane becomes a plane, every XLine a track, every XEvent an event at
``line.timestamp_ns + offset_ps / 1000`` in integer ns: sub-ns precision is dropped
(start rounded down, end up, so nesting holds and no event becomes an instant), as
``metadata["xspace"]["time_resolution"]`` says. Everything comes from ``decode``'s
columns (the compiled walk, or protobuf's objects where it is missing), so the work per
event is NumPy's. Stat values are kept under their XProf names (``stats.py``); stats on
an event's metadata apply to the event (event stats win, ``metadata.py``), since XProf
treats them as the event's own. What XProf's names mean is applied last (``xla.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TraceFormatError
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from ...trace.model import Source
from ..safety import check_events, clean_metadata, guarded, reading
from . import copies, decode, gpu, names as N, xla
from .events import EventReader
from .stats import int_stat, layout
from .wire import check_planes, read_file
from ...trace import metadata_keys as mkeys

if TYPE_CHECKING:
    from ..xplane_pb2 import XSpace

log = logging.getLogger("polyprof")


@guarded
def load(path: str | Path) -> Trace:
    """Read an ``.xplane.pb`` file (plain or gzipped)."""
    path = Path(path)
    return from_bytes(read_file(path), source=str(path))


def from_bytes(data: bytes, source: str = "<bytes>") -> Trace:
    """A Trace from a serialized XSpace (from a file, or handed back by a native plugin)."""
    with reading(source):
        data = bytes(data)
        cols = decode.columns(data, source)
        size = len(data)
        del data  # the file's bytes are all in the columns now: not held through the read
        check_planes(len(cols.planes), any(p[1] for p in cols.planes), size, source)
        return _read(cols, source)


def from_space(space: XSpace, source: str = "<bytes>") -> Trace:
    """A Trace from a parsed XSpace message."""
    return _read(decode.columns_of_space(space), source)


def _read(cols: decode.EventColumns, source: str) -> Trace:
    check_events(source, cols.n_events)
    r = _SpaceReader(cols, source)
    line0 = 0
    for i, plane in enumerate(cols.planes):
        n_lines = int(cols.plane_lines[i])
        r.plane(plane, i, cols.lines[line0:line0 + n_lines], line0)
        line0 += n_lines
    cols.drop_events()  # every event read: only the stats' values are used after
    # (no heap trim after: the analyses that follow reuse the freed pages; giving them back
    # cost a 16 MB file's summary ~13 ms of CPU in faults)
    return r.finish(cols.texts)


class _SpaceReader:
    """Reads the planes one by one into a TraceBuilder, then builds the Trace."""

    def __init__(self, cols: decode.EventColumns, source: str):
        self.b = TraceBuilder()
        self.source = source
        self.cols = cols
        self.ev = EventReader(self.b, cols, source)
        self.line_start = [0, *np.cumsum(cols.line_events).tolist()]  # first event of each line (ints)
        self.producer = ""
        self.drop_aliases: set[str] = set()
        self.task_env: dict[str, Any] = {}
        self.stored_meta: dict[str, Any] = {}
        self.stored_sources: list[Any] | None = None  # a polyprof-written trace of several sources'
        self.sort = 0

    def plane(self, plane: tuple, number: int, lines: list[tuple], line0: int) -> None:
        """Plane ``number`` of the space ((id, name, stat names, stats)), whose ``lines``
        start at line ``line0`` of the columns."""
        plane_id, plane_name, stat_names, stats = plane
        props: dict[str, Any] = {}
        for mid, kind, value in stats:
            if kind:
                props[stat_names.get(mid, str(mid))] = stat_names.get(value, "") if kind == 6 else value
        self.producer = str(props.pop(N.PLANE_STAT_PRODUCER, self.producer))
        origin = int_stat(props.pop(N.PLANE_STAT_ORIGIN, 0), self.source, N.PLANE_STAT_ORIGIN)
        if N.PLANE_STAT_METADATA in props:
            self.stored_meta = layout(props.pop(N.PLANE_STAT_METADATA))
            clean_metadata(self.stored_meta)
        if N.PLANE_STAT_SOURCES in props:
            self.stored_sources = layout(props.pop(N.PLANE_STAT_SOURCES)).get("sources")
            if not isinstance(self.stored_sources, list):
                raise TraceFormatError(self.source, f"plane {plane_name!r}: damaged {N.PLANE_STAT_SOURCES}")
        if props.pop(N.PLANE_STAT_GENERATED, None):
            return
        aliases = [a for a in str(props.pop(N.PLANE_STAT_ALIASES, "")).split(",") if a]
        self.drop_aliases.update(aliases)
        for a in aliases:  # plane stats the writer added for XProf (device capabilities)
            props.pop(a, None)
        added_here = frozenset(a for a in str(props.pop(N.PLANE_STAT_ADDED, "")).split(",") if a)
        if plane_name == N.TASK_ENV:
            self.task_env.update(props)
        lay = layout(props.pop(N.PLANE_STAT_LAYOUT, None))
        kind, _, index = N.plane_kind(plane_name)
        is_host = kind == "host"  # decides default categories, as the writer assumed
        kind = str(lay.get("kind", kind))
        index = int_stat(lay.get("index", index), self.source, "plane index")
        source = int_stat(lay.get("source", 0), self.source, "plane source")  # (a trace of several sources)
        pid = self.b.plane(str(lay.get("name", plane_name)), kind, vendor=str(lay.get("vendor", "")),
                           index=index, pid=int(plane_id), properties=props, source=source)
        track_layout = lay.get("tracks", {})
        if not isinstance(track_layout, dict):
            raise TraceFormatError(self.source, f"plane {plane_name!r}: damaged {N.PLANE_STAT_LAYOUT} (tracks)")
        meta = self.ev.metadata(number, stat_names)
        e0, e1 = self.line_start[line0], self.line_start[line0 + len(lines)]
        orphans = meta.unreferenced(self.cols.ev_mid[e0:e1])
        if orphans:  # e.g. the HLO protos on /host:metadata: no events, but XProf tools use them
            self.b.planes[pid].properties["xspace_event_metadata"] = orphans
        kept = []
        for j, line in enumerate(lines):
            spec = self._line(plane_name, line, pid, is_host, track_layout, origin, line0 + j, meta, stat_names)
            if spec is not None:
                kept.append(spec)
        self.ev.plane_events(pid, kept, meta, stat_names, added_here)

    def _line(self, plane_name: str, line: tuple, pid: int, is_host: bool, track_layout: dict[str, Any],
              origin: int, index: int, meta: Any, stat_names: dict[int, str]
              ) -> tuple[Any, ...] | None:
        """(line index, event range, track, base ns, name, default category[, mixed, stream
        id]) of a line whose events become events (the last two: a stream line of XLA's GPU
        layout); None for one read otherwise or skipped."""
        line_id, display_id, name, display_name, timestamp_ns, duration_ps = line
        lname = name or display_name or f"line {line_id}"
        e0, e1 = self.line_start[index], self.line_start[index + 1]
        polyprof = self.producer == "polyprof"
        if lname == N.COUNTER_LINE and polyprof:
            self.ev.counters(pid, e0, e1, int(timestamp_ns) + origin, meta, stat_names)
            return None
        if lname == N.MEMORY_LINE and polyprof:
            return None  # a copy of the memory events for XProf's memory_profile
        tl = track_layout.get(str(line_id), {})
        if not isinstance(tl, dict) or not isinstance(tl.get("props", {}), dict):
            raise TraceFormatError(self.source, f"plane {plane_name!r}: damaged {N.PLANE_STAT_LAYOUT} "
                                                f"(line {line_id})")
        if tl.get("generated") and polyprof:
            return None  # a line only XProf needs (the writer's device Steps line)
        tprops: dict[str, Any] = dict(tl.get("props", {}))
        if display_id:
            tprops["display_id"] = int(display_id)
        if display_name and display_name != lname:
            tprops["display_name"] = display_name
        if duration_ps:
            tprops["duration_ps"] = int(duration_ps)
        tkind = tl.get("kind") or N.default_track_kind(is_host, lname)
        home = self.b.plane(str(tl["plane"]), source=int_stat(tl.get("source", 0), self.source, "line source")) \
            if tl.get("plane") else pid  # written on /host:CPU for XProf
        track = self.b.track(home, lname, str(tkind), tid=int_stat(tl.get("tid", line_id), self.source, "line tid"),
                             sort_index=self.sort, properties=tprops)
        self.sort += 1
        if e1 == e0:
            return None
        base_ns = int(timestamp_ns) + origin
        if abs(base_ns) > N.TIME_LIMIT_NS:
            raise TraceFormatError(self.source, f"line {lname!r} starts at {base_ns} ns: beyond +-2**62 ns")
        cat = N.default_category(is_host, lname)
        if not is_host and not polyprof and (gcat := gpu.line_category(lname)) is not None:
            return index, e0, e1, track, base_ns, lname, gcat, gpu.is_mixed(lname), gpu.line_stream(lname)  # XLA's GPU layout
        return index, e0, e1, track, base_ns, lname, cat

    def _sources(self) -> None:
        """The sources of a polyprof-written trace of several (the processes of an MPI
        Nsight report, merged ranks), which its planes' layouts name by index."""
        b = self.b
        if self.stored_sources is not None:
            from ..native import records  # the record checks: only for a file of several sources

            for i, s in enumerate(records(Path(self.source), "sources", self.stored_sources, Source,
                                          where=N.PLANE_STAT_SOURCES)):
                if s.id != i or b.source(s.rank, s.host, s.pid, s.label, s.clock, s.metadata) != i:
                    raise TraceFormatError(self.source, f"{N.PLANE_STAT_SOURCES}: sources[{i}] is not source {i}")
        bad = next((p for p in b.planes if not 0 <= p.source < max(len(b.sources), 1)), None)
        if bad is not None:
            raise TraceFormatError(self.source, f"plane {bad.name!r} names source {bad.source}, of "
                                                f"{len(b.sources)} in {N.PLANE_STAT_SOURCES}")

    def finish(self, texts: tuple[list[str], list[str], list[str]]) -> Trace:
        b = self.b
        value_kinds, stats = self.ev.finish(self.drop_aliases)
        b.metadata.update(self.stored_meta)  # a polyprof-written file: the trace's own metadata
        b.metadata.update({
            "source": {"format": "xspace", "path": self.source},
            "xspace": {
                "hostnames": list(texts[2]),
                "errors": list(texts[0]),
                "warnings": list(texts[1]),
                "time_resolution": "ns (XSpace ps times: starts rounded down, ends up)",
                "stat_value_kinds": value_kinds,
                "producer": self.producer or "unknown",
                "metadata_stat_keys": sorted(self.ev.md_keys),
            },
        })
        task_env = self.task_env
        for k in ("profile_start_time", "profile_stop_time"):
            if k not in task_env:
                continue
            if type(task_env[k]) is int and abs(task_env[k]) <= N.TIME_LIMIT_NS:
                b.metadata[mkeys.XSPACE][f"{k}_ns"] = task_env[k]
            else:
                b.metadata.setdefault(mkeys.WARNINGS, []).append(f"Task Environment {k} {task_env.pop(k)!r} ignored: "
                                                             "not a time in ns")
        if self.ev.bad_flows:
            b.metadata.setdefault(mkeys.WARNINGS, []).append(f"{self.ev.bad_flows} damaged flow stat(s) ignored")
        if self.ev.backwards:  # as the other readers keep them (formats/parts.Part.forward_times)
            said = (f"{self.ev.backwards} event(s) end before they start (a negative duration: a damaged file): "
                    "kept at their start, 0 ns long")
            b.metadata.setdefault(mkeys.WARNINGS, []).append(said)
            log.warning("%s: %s", self.source, said)
        if not self.stored_meta:
            b.metadata[mkeys.CLOCK_NAME] = "xspace"
        self._sources()
        trace = b.build()
        trace.stats.defer(lambda: stats.columns(None), stats.built, stats.has, stats.rows, stats.columns)
        trace.metadata[mkeys.XSPACE]["alias_keys"] = list(stats.alias)
        if not self.stored_meta:
            xla.wall_anchor(trace, task_env)
        if self.producer != "polyprof":
            xla.xprof_flows(trace)
            if trace.string_id("MemoryAllocation") >= 0 or trace.string_id("MemoryDeallocation") >= 0:
                from .. import xprof_memory  # only for a file with memory events (with the memory tables)

                xprof_memory.read(trace)  # TensorFlow's and XLA's allocator events as memory events
        xla.classify_host_events(trace, any(p.kind == "device" for p in trace.planes))
        if self.producer != "polyprof":  # XLA's GPU layout (polyprof's own files say what they hold)
            gpu.launch_calls(trace, trace.string_id(N.CAT_TRACEME))
            gpu.runtime_calls(trace, trace.string_id(N.CAT_TRACEME))
            gpu.framework_ops(trace)
            gpu.xla_ops(trace)
            copies.copy_details(trace)  # the size and memory kinds of copies and fills
            unread = gpu.uninterpreted_planes(trace)
            if unread:
                trace.metadata.setdefault(mkeys.WARNINGS, []).extend(unread)
                for w in unread:
                    log.warning("%s: %s", self.source, w)
        log.debug("xspace %s: %d planes, %d lines, %d events, %d stat keys (%s decode)", self.source,
                  len(trace.planes), len(trace.tracks), trace.n_events, len(stats.built) + len(stats.keys()),
                  decode.IMPLEMENTATION)  # len(trace.stats) would build every deferred column
        return trace
