"""The parser: each decoded packet into columns.

Packets are decoded a run at a time (``packets.py``) by the protobuf library into the
classes of ``trace_pb2`` (generated from ``trace.proto``: the part of Perfetto's format
read here) and gone through once, in file order. What a packet says goes into plain
lists for the run, turned into NumPy columns when the run ends, so no Python object is
kept per event:

- track events (``TrackEvent``): kind (begin, end, instant, complete), track, time and
  its clock (CLOCK_MONOTONIC for the legacy microsecond times, as Perfetto reads them),
  duration, name and category (ids into the builder's strings); their debug
  annotations as stat parts (rows, values) by key and value type; their flow ids;
- counters (``TYPE_COUNTER`` events, ``extra_*counter_values``, ``GpuCounterEvent``):
  track, time, clock, value;
- GPU render stages (``GpuRenderStageEvent``): complete slices on a hardware queue;
- track descriptors, legacy process/thread descriptors, process trees and clock
  snapshots: the few records ``tracks.py`` and ``clocks.py`` keep; the Chrome metadata
  entries polyprof's export writes (the device planes' properties).

Begin/end pairs, flows, tracks and clocks are resolved once everything is read
(``build.py``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import orjson

from ...trace import metadata_keys as mkeys
from ...trace.builder import TraceBuilder
from ..export_notes import HOST_NAME, PERFETTO_NOTES
from ..device_list import PERFETTO_DERIVED_COUNTERS, PERFETTO_FLOW_CATEGORIES, PERFETTO_PLANES
from .clocks import MONOTONIC, Clocks
from .gpu_events import GpuEvents
from .kinds import BEGIN, COMPLETE, END, INSTANT, P_TIMESTAMP
from .sequences import SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE, Sequence, text
from .tracks import Tracks

log = logging.getLogger("polyprof")

_TYPE_COUNTER = 4
#: legacy (Chrome JSON) phases -> kinds
_PHASES = {ord("B"): BEGIN, ord("E"): END, ord("X"): COMPLETE, ord("I"): INSTANT, ord("i"): INSTANT,
           ord("n"): INSTANT, ord("R"): INSTANT}
_SCOPE_PROCESS = 2  # LegacyEvent.InstantEventScope.SCOPE_PROCESS
# field numbers (trace.proto): TracePacket
_P_CLOCK, _P_SEQ, _P_FLAGS, _P_CLEARED, _P_DROPPED = 58, 10, 13, 41, 42
_INT64 = 1 << 63
_P_INTERNED, _P_DEFAULTS, _P_TRACK_EVENT, _P_DESCRIPTOR, _P_PROCESS, _P_THREAD = 12, 59, 11, 60, 43, 44
_P_CLOCKS, _P_TREE, _P_RENDER_STAGE, _P_GPU_COUNTERS = 6, 2, 53, 52
_P_STREAMING_PROFILE, _P_CHROME_EVENTS = 54, 5
# TrackEvent
_TE_TYPE, _TE_TRACK, _TE_NAME_IID, _TE_NAME, _TE_CATEGORY_IIDS, _TE_CATEGORIES = 9, 11, 10, 23, 3, 22
_TE_COUNTER, _TE_DOUBLE_COUNTER, _TE_ANNOTATIONS, _TE_LEGACY, _TE_DELTA_US, _TE_ABSOLUTE_US = 30, 44, 4, 6, 1, 16
_TE_EXTRA_TRACKS, _TE_EXTRA_VALUES, _TE_EXTRA_DOUBLE_TRACKS, _TE_EXTRA_DOUBLES = 31, 12, 45, 46
#: flow id fields: (number, per-sequence ids, terminating)
_FLOW_FIELDS = ((47, False, 0), (48, False, 1), (36, True, 0), (42, True, 1))
#: a track event's thread time and instruction count: ((delta, absolute), counter name, scale,
#: index of its base in ``Sequence.times``)
_THREAD_COUNTERS = (((2, 17), "thread_time", 1000, 1), ((8, 20), "thread_instruction_count", 1, 2))
#: the legacy delta-encoded fields (``Sequence.times`` must be valid for them)
_TE_DELTAS = (_TE_DELTA_US, 2, 8)
_MIN64, _MAX64 = -(1 << 63), (1 << 63) - 1
#: the ChromeMetadata entries read (what polyprof's export writes there)
_CHROME_METADATA = frozenset((PERFETTO_PLANES, PERFETTO_FLOW_CATEGORIES, PERFETTO_DERIVED_COUNTERS,
                               mkeys.DEVICE_PROPERTIES, mkeys.DISTRIBUTED_INFO, HOST_NAME,
                               *PERFETTO_NOTES.values()))
# DebugAnnotation
_DA_NAME_IID, _DA_NAME, _DA_STRING_IID, _DA_DICT, _DA_ARRAY = 1, 10, 17, 11, 12
_DA_KINDS = {2: "b", 3: "u", 4: "i", 5: "f", 7: "u", 9: "s", 6: "s"}


def _saturated(v: int) -> int:
    """``v`` held to int64, as Perfetto's sums of legacy deltas saturate."""
    return min(max(v, _MIN64), _MAX64)


class Collector(GpuEvents):
    """Columns of everything read so far (see the module's docstring)."""

    def __init__(self) -> None:
        self.b = TraceBuilder()
        self.tracks = Tracks()
        self.clocks = Clocks()
        self.seqs: dict[int, Sequence] = {}
        self.n = 0  # track-event rows so far
        self.parts: list[dict[str, np.ndarray]] = []
        self.counter_parts: list[dict[str, np.ndarray]] = []
        #: stat key -> value kind ("i", "u", "f", "b", "s") -> [(rows, values)]
        self.stats: dict[str, dict[str, list[tuple[np.ndarray, np.ndarray]]]] = {}
        self.flow_parts: list[np.ndarray] = []  # (space, id, row, terminating) x n
        self.skipped: dict[str, int] = {}
        #: ChromeEventBundle metadata by name (polyprof's export keeps the planes' properties there)
        self.chrome_meta: dict[str, Any] = {}
        self._texts: dict[str, str] = {}
        #: names of GPU hardware queues (by position) and of render stages (the named
        #: ones, in order) from ``GpuRenderStageEvent.specifications``, as Perfetto's
        #: GpuEventParser keeps them: for the whole trace, not per sequence
        self.render_specs: tuple[list[str], list[str]] = ([], [])
        #: hw queue id -> GPU -> the track of the queue while it had no name (the first
        #: specification to name it renames that track)
        self.unnamed_queues: dict[int, dict[int, int]] = {}
        #: the counter tracks whose samples look backwards (build.py moves each value to
        #: the sample before); those of legacy descriptors are added in build.py
        self.backwards_counters: set[int] = set()
        self._fresh()

    def _fresh(self) -> None:
        self.kind: list[int] = []
        self.track: list[int] = []
        self.ts: list[int] = []
        self.clock: list[int] = []
        self.dur: list[int] = []
        self.name: list[int] = []
        self.cat: list[int] = []
        self.c_track: list[int] = []
        self.c_ts: list[int] = []
        self.c_clock: list[int] = []
        self.c_value: list[float] = []
        self.st: dict[tuple[str, str], tuple[list[int], list[Any]]] = {}
        self.flows: list[int] = []

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    # ------------------------------------------------------------------ a run of packets
    def add(self, trace: Any) -> None:
        """Every packet of a decoded ``Trace`` message."""
        for p in trace.packet:
            self.packet(p)
        self.flush()

    def flush(self) -> None:
        if self.kind:
            self.parts.append({
                "kind": np.array(self.kind, np.int8), "track": np.array(self.track, np.int64),
                "ts": np.array(self.ts, np.int64), "clock": np.array(self.clock, np.int64),
                "dur": np.array(self.dur, np.int64), "name": np.array(self.name, np.int32),
                "cat": np.array(self.cat, np.int32)})
        if self.c_track:
            self.counter_parts.append({
                "track": np.array(self.c_track, np.int64), "ts": np.array(self.c_ts, np.int64),
                "clock": np.array(self.c_clock, np.int64), "value": np.array(self.c_value, np.float64)})
        for (k, kind), (rows, vals) in self.st.items():
            self.stats.setdefault(k, {}).setdefault(kind, []).append((np.array(rows, np.int64), _values(kind, vals)))
        if self.flows:
            self.flow_parts.append(np.array(self.flows, np.int64).reshape(-1, 4))
        self._fresh()

    def packet(self, p: Any) -> None:
        # the set fields by number, in one call (cheaper than asking for each field)
        f = {fd.number: v for fd, v in p.ListFields()}
        seq_id = f.get(_P_SEQ, 0)
        s = self.sequence(seq_id)
        flags = f.get(_P_FLAGS, 0)
        if flags & SEQ_INCREMENTAL_STATE_CLEARED or f.get(_P_CLEARED):
            s.reset()
        elif f.get(_P_DROPPED):
            s.lost()
        if flags & SEQ_NEEDS_INCREMENTAL_STATE and not s.valid:
            self.skip("packets needing incremental state lost with a dropped packet")
            return
        if _P_DEFAULTS in f:
            s.defaults(f[_P_DEFAULTS])
        if _P_INTERNED in f:
            s.intern(f[_P_INTERNED], self.b.intern)
        if _P_CLOCKS in f:
            self.clocks.snapshot(f[_P_CLOCKS], seq_id)
        te = f.get(_P_TRACK_EVENT)
        if te is not None:
            self.track_event(f, te, s)
        elif _P_DESCRIPTOR in f:
            self.tracks.describe(f[_P_DESCRIPTOR])
        elif _P_THREAD in f:
            if not s.valid:  # its reference times would misplace the deltas after the next clear
                self.skip("thread descriptors while incremental state was lost")
                return
            t = f[_P_THREAD]
            s.describe_thread(t)
            self.tracks.thread(t.pid, t.tid, t.thread_name)
        elif _P_PROCESS in f:
            d = f[_P_PROCESS]
            self.tracks.process(d.pid, d.process_name or (d.cmdline[0] if d.cmdline else ""), list(d.process_labels))
        elif _P_TREE in f:
            for pr in f[_P_TREE].processes:
                self.tracks.process(pr.pid, pr.cmdline[0] if pr.cmdline else "", [], weak=True)
            for th in f[_P_TREE].threads:
                self.tracks.thread(th.tgid, th.tid, th.name, weak=True)
        elif _P_RENDER_STAGE in f:
            self.render_stage(f, f[_P_RENDER_STAGE], s)
        elif _P_GPU_COUNTERS in f:
            self.gpu_counters(f, f[_P_GPU_COUNTERS], s)
        elif _P_STREAMING_PROFILE in f:
            self.streaming_profile(f[_P_STREAMING_PROFILE], s)
        elif _P_CHROME_EVENTS in f:
            self.chrome_metadata(f[_P_CHROME_EVENTS])

    def sequence(self, seq_id: int) -> Sequence:
        """The incremental state of sequence ``seq_id`` (made when first seen)."""
        s = self.seqs.get(seq_id)
        if s is None:
            s = self.seqs[seq_id] = Sequence(seq_id)
        return s

    def pending(self) -> bool:
        """Whether rows, counters, flows or stats wait in the lists for :meth:`flush`."""
        return bool(self.kind or self.c_track or self.flows or self.st)

    def _time(self, f: dict[int, Any], s: Sequence) -> tuple[int, int]:
        return self.clocks.resolve(f.get(_P_CLOCK, s.clock), f.get(P_TIMESTAMP, 0), s.id)

    def _beyond_int64(self, what: str, *values: int) -> bool:
        """Whether a time or duration (a uint64 field, or microseconds times 1000) is past
        int64 ns: then the event is skipped, counted (the walk leaves those packets here)."""
        if all(-_INT64 <= v < _INT64 for v in values):
            return False
        self.skip(f"{what} with a time or duration beyond int64 ns")
        return True

    # ------------------------------------------------------------------ track events
    def track_event(self, f: dict[int, Any], te: Any, s: Sequence) -> None:
        t = {fd.number: v for fd, v in te.ListFields()}
        kind = t.get(_TE_TYPE, 0)
        dur = 0
        legacy = t.get(_TE_LEGACY)
        times = s.times
        if times is None and any(k in t for k in _TE_DELTAS):
            self.skip("track events with delta times and no thread descriptor since the last clear or loss")
            return
        if _TE_DELTA_US in t or _TE_ABSOLUTE_US in t:
            # legacy microseconds, on CLOCK_MONOTONIC whatever the packet's clock, and over
            # the packet's timestamp (Perfetto's track_event_tokenizer.cc); an absolute time
            # is a one-off: the deltas still run from the thread descriptor's base
            if _TE_DELTA_US in t:
                assert times is not None
                ts = times[0] = _saturated(times[0] + t[_TE_DELTA_US] * 1000)
            else:
                ts = t[_TE_ABSOLUTE_US] * 1000
            if ts < 0:  # an unset or damaged time (Perfetto drops these too)
                self.skip("track events with a negative time")
                return
            clock = MONOTONIC
        elif P_TIMESTAMP in f:
            clock, ts = self._time(f, s)
        else:
            self.skip("track events without a timestamp")
            return
        if not kind:
            kind = _PHASES.get(legacy.phase, 0) if legacy is not None else 0
            if kind == COMPLETE:
                dur = legacy.duration_us * 1000  # type: ignore[union-attr]
            if not kind:
                self.skip("track events of no type (or a legacy phase not read)")
                return
        if self._beyond_int64("track events", ts, dur):
            return
        track = self._track(t, legacy, s)
        if _TE_EXTRA_VALUES in t:
            self._extra(t.get(_TE_EXTRA_TRACKS) or s.extra_counters, t[_TE_EXTRA_VALUES], ts, clock, s)
        if _TE_EXTRA_DOUBLES in t:
            self._extra(t.get(_TE_EXTRA_DOUBLE_TRACKS) or s.extra_doubles, t[_TE_EXTRA_DOUBLES], ts, clock, s)
        for (delta, absolute), counter, scale, base in _THREAD_COUNTERS:
            if delta in t:
                assert times is not None
                v = times[base] = _saturated(times[base] + t[delta] * scale)
            elif absolute in t:  # a one-off: the base stays
                v = t[absolute] * scale
            else:
                continue
            self._counter(self.tracks.child_counter(track, counter), ts, clock, v)
        if kind == _TYPE_COUNTER:
            value = t.get(_TE_COUNTER, t.get(_TE_DOUBLE_COUNTER))
            if value is None:
                self.skip("counter events without a value")
                return
            self._counter(track, ts, clock, self._running(track, value, s))
            return
        if kind not in (BEGIN, END, INSTANT, COMPLETE):
            self.skip(f"track events of type {kind}")
            return
        row = self.n
        self.n += 1
        self.kind.append(kind)
        self.track.append(track)
        self.ts.append(ts)
        self.clock.append(clock)
        self.dur.append(dur)
        if kind == END:  # its flows belong to the slice it closes (build.py)
            self.name.append(0)
            self.cat.append(0)
            self._flows(t, legacy, s, row)
            return
        if _TE_NAME_IID in t:
            name = s.names.get(t[_TE_NAME_IID])
            if name is None:
                name = self.b.intern(f"<name iid {t[_TE_NAME_IID]} not interned>")
                self.skip("event names not interned on their sequence (named by iid)")
        elif _TE_NAME in t:
            name = self.b.intern(text(t[_TE_NAME]))
        elif legacy is not None and legacy.name_iid:
            name = s.names.get(legacy.name_iid, self.b.intern(""))
        else:
            name = self.b.intern("")
        self.name.append(name)
        if _TE_CATEGORY_IIDS in t:
            ids = [s.cats.get(i) for i in t[_TE_CATEGORY_IIDS]]
            cat = ids[0] if len(ids) == 1 and ids[0] is not None else \
                self.b.intern(",".join(self.b.strings[i] if i is not None else "" for i in ids))
        elif _TE_CATEGORIES in t:
            cat = self.b.intern(",".join(map(text, t[_TE_CATEGORIES])))
        else:
            cat = self.b.intern("")
        self.cat.append(cat)
        if _TE_ANNOTATIONS in t:
            for a in t[_TE_ANNOTATIONS]:
                self._annotation(a, s, row, "")
        self._flows(t, legacy, s, row)

    def _flows(self, t: dict[int, Any], legacy: Any, s: Sequence, row: int) -> None:
        fl = self.flows
        for number, space, term in _FLOW_FIELDS:
            if number in t:
                sp = s.id + 1 if space else 0
                for fid in t[number]:
                    fl += (sp, _signed(fid), row, term)
        if legacy is not None and legacy.HasField("bind_id"):
            # a legacy flow (FlowDirection: 1 in, 2 out, 3 both); the bind id links them
            fl += (-1, _signed(legacy.bind_id), row, 1 if legacy.flow_direction == 1 else 0)

    def _track(self, t: dict[int, Any], legacy: Any, s: Sequence) -> int:
        """The track of an event: pid/tid overrides, else its track uuid, else (for a
        legacy event without a type) its legacy scope, else the sequence's default track,
        else the sequence's thread, else the default track (uuid 0)."""
        untyped = legacy is not None and not t.get(_TE_TYPE)
        if legacy is not None and legacy.HasField("tid_override"):
            pid = legacy.pid_override if legacy.HasField("pid_override") else self._pid(s)
            return self.tracks.thread(pid or 0, legacy.tid_override, "")
        uuid = t.get(_TE_TRACK)
        if uuid is not None and not (untyped and uuid == 0):
            return self.tracks.of_uuid(uuid)
        if untyped and legacy.instant_event_scope == _SCOPE_PROCESS:
            return self.tracks.process_track(self._pid(s) or 0)
        if s.track is not None and not untyped:
            return self.tracks.of_uuid(s.track)
        if s.thread is not None:
            return self.tracks.thread(s.thread[0], s.thread[1], "")
        if s.track is not None:
            return self.tracks.of_uuid(s.track)
        return self.tracks.of_uuid(0)

    def _pid(self, s: Sequence) -> int | None:
        """The process of a sequence: of its legacy thread, else of its default track."""
        if s.thread is not None:
            return s.thread[0]
        return self.tracks.pid_of(self.tracks.of_uuid(s.track)) if s.track is not None else None

    def _running(self, code: int, value: float, s: Sequence) -> float:
        """A counter's value: an incremental counter's running sum on this sequence."""
        if not self.tracks.incremental(code):
            return float(value)
        v = s.counters[code] = s.counters.get(code, 0) + value
        return float(v)

    def _counter(self, code: int, ts: int, clock: int, value: float) -> None:
        self.c_track.append(code)
        self.c_ts.append(ts)
        self.c_clock.append(clock)
        self.c_value.append(float(value))

    def _extra(self, uuids: Any, values: Any, ts: int, clock: int, s: Sequence) -> None:
        for u, v in zip(uuids, values):
            code = self.tracks.of_uuid(u)
            self._counter(code, ts, clock, self._running(code, v, s))

    def _annotation(self, a: Any, s: Sequence, row: int, prefix: str) -> None:
        key, kind, value = "", "", None
        nested = None
        for fd, v in a.ListFields():
            n = fd.number
            if n == _DA_NAME_IID:
                key = s.anames.get(v, f"<annotation iid {v}>")
            elif n == _DA_NAME:
                key = text(v)
            elif n in _DA_KINDS:
                kind, value = _DA_KINDS[n], text(v)
            elif n == _DA_STRING_IID:
                kind, value = "s", s.values.get(v, "")
            elif n in (_DA_DICT, _DA_ARRAY):
                nested = (n, v)
        if prefix:
            key = f"{prefix}.{key}" if key else prefix
        if kind:
            self._stat(key, kind, row, value)
        elif nested is not None:
            if nested[0] == _DA_DICT:
                for e in nested[1]:
                    self._annotation(e, s, row, key)
            else:
                self._stat(key, "s", row, orjson.dumps([_plain(x, s) for x in nested[1]]).decode())

    def _stat(self, key: str, kind: str, row: int, value: Any) -> None:
        if kind == "s":  # one object per distinct text, not one per event
            value = self._texts.setdefault(value, value)
        e = self.st.get((key, kind))
        if e is None:
            e = self.st[(key, kind)] = ([], [])
        e[0].append(row)
        e[1].append(value)

    def streaming_profile(self, sp: Any, s: Sequence) -> None:
        """Chrome's stack samples are not read, but their time deltas move the sequence's
        legacy delta base (track events after them run from there), as in Perfetto's
        profile_module.cc."""
        if s.times is None:
            return
        t = s.times
        for d in sp.timestamp_delta_us:
            if t[0] < 0:  # a damaged base: Perfetto stops there, and drops what runs from it
                break
            t[0] = _saturated(t[0] + d * 1000)

    def chrome_metadata(self, bundle: Any) -> None:
        """``ChromeEventBundle.metadata``: the entries polyprof's export writes (the device
        planes' properties, ``deviceProperties``), their JSON decoded, for ``build.py``;
        Chrome's own entries are not read."""
        for m in bundle.metadata:
            name = text(m.name)
            if name not in _CHROME_METADATA or m.WhichOneof("value") != "json_value":
                continue
            try:  # the standard library's: it takes the NaN a property may hold
                self.chrome_meta[name] = json.loads(m.json_value)
            except ValueError:
                self.skip(f"Chrome metadata entries {name!r} whose JSON does not parse")


def _signed(v: int) -> int:
    """A uint64 id as int64 (the same bits)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _plain(a: Any, s: Sequence) -> Any:
    """A nested annotation as a JSON value."""
    v = a.WhichOneof("value")
    if v is None:
        if a.dict_entries:
            return {(s.anames.get(e.name_iid, "") if e.WhichOneof("name_field") == "name_iid" else text(e.name)):
                    _plain(e, s) for e in a.dict_entries}
        return [_plain(x, s) for x in a.array_values]
    if v == "string_value_iid":
        return s.values.get(a.string_value_iid, "")
    return text(getattr(a, v))


def _values(kind: str, vals: list[Any]) -> np.ndarray:
    if kind == "s":
        out = np.empty(len(vals), object)
        out[:] = vals
        return out
    return np.array(vals, {"i": np.int64, "u": np.uint64, "f": np.float64, "b": np.bool_}[kind])
