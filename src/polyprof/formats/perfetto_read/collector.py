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
from ..device_list import PERFETTO_DERIVED_COUNTERS, PERFETTO_FLOW_CATEGORIES, PERFETTO_PLANES
from .clocks import MONOTONIC, Clocks
from .sequences import SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE, Sequence, text
from .tracks import Tracks

log = logging.getLogger("polyprof")

BEGIN, END, INSTANT, COMPLETE = 1, 2, 3, 5
_TYPE_COUNTER = 4
#: legacy (Chrome JSON) phases -> kinds
_PHASES = {ord("B"): BEGIN, ord("E"): END, ord("X"): COMPLETE, ord("I"): INSTANT, ord("i"): INSTANT,
           ord("n"): INSTANT, ord("R"): INSTANT}
_COMPUTE_STAGE = 2  # InternedGpuRenderStageSpecification.RenderStageCategory.COMPUTE
_SCOPE_PROCESS = 2  # LegacyEvent.InstantEventScope.SCOPE_PROCESS
# field numbers (trace.proto): TracePacket
_P_TIMESTAMP, _P_CLOCK, _P_SEQ, _P_FLAGS, _P_CLEARED, _P_DROPPED = 8, 58, 10, 13, 41, 42
_INT64 = 1 << 63
_P_INTERNED, _P_DEFAULTS, _P_TRACK_EVENT, _P_DESCRIPTOR, _P_PROCESS, _P_THREAD = 12, 59, 11, 60, 43, 44
_P_CLOCKS, _P_TREE, _P_RENDER_STAGE, _P_GPU_COUNTERS = 6, 2, 53, 52
_FORWARDS = 2  # GpuCounterSpec.VALUE_DIRECTION_FORWARDS_LOOKING
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
                               mkeys.DEVICE_PROPERTIES, mkeys.DISTRIBUTED_INFO))
# DebugAnnotation
_DA_NAME_IID, _DA_NAME, _DA_STRING_IID, _DA_DICT, _DA_ARRAY = 1, 10, 17, 11, 12
_DA_KINDS = {2: "b", 3: "u", 4: "i", 5: "f", 7: "u", 9: "s", 6: "s"}


def _saturated(v: int) -> int:
    """``v`` held to int64, as Perfetto's sums of legacy deltas saturate."""
    return min(max(v, _MIN64), _MAX64)


class Collector:
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
        return self.clocks.resolve(f.get(_P_CLOCK, s.clock), f.get(_P_TIMESTAMP, 0), s.id)

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
        elif _P_TIMESTAMP in f:
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

    # ------------------------------------------------------------------ GPU messages
    def render_stage(self, f: dict[int, Any], g: Any, s: Sequence) -> None:
        """A ``GpuRenderStageEvent``: a complete slice on its GPU's hardware queue. As
        Perfetto's ``GpuEventParser``: only an event with an ``event_id`` is a slice (one
        with only ``specifications`` names queues and stages for the events after); a
        queue or stage by number is named by those, else ``Unknown GPU Queue <id>`` and
        ``render stage(<id>)``; one whose ``hw_queue_iid`` is not interned is dropped."""
        if g.HasField("specifications"):
            self._render_specs(g)
        if not g.HasField("event_id"):
            return
        queues, stages = self.render_specs
        qid = -1
        if g.HasField("hw_queue_iid"):
            if g.hw_queue_iid not in s.specs:
                self.skip("GPU render stages whose hw_queue_iid no interned specification names, "
                          "as Perfetto drops them")
                return
            queue = s.specs[g.hw_queue_iid][0]
        else:
            qid = g.hw_queue_id & 0xFFFFFFFF  # Perfetto reads the int32 as uint32
            queue = queues[qid] if qid < len(queues) else ""
        sid = g.stage_id & 0xFFFFFFFFFFFFFFFF  # and this one as uint64
        stage_name, category = (stages[sid] if sid < len(stages) else f"render stage({sid})", 0)
        if g.HasField("stage_iid"):  # one not interned: Perfetto's name is null, as for track events
            if g.stage_iid not in s.specs:
                self.skip("GPU render stage names not interned on their sequence (named by iid)")
            stage_name, category = s.specs.get(g.stage_iid, (f"<stage iid {g.stage_iid} not interned>", 0))
        which = g.WhichOneof("name_field")
        if which == "name":
            label = text(g.name)
        elif which == "name_iid":
            label = self.b.strings[s.names[g.name_iid]] if g.name_iid in s.names else stage_name
        else:
            label = stage_name
        clock, ts = self._time(f, s)
        if self._beyond_int64("GPU render stages", ts, g.duration):
            return
        if queue or qid < 0:
            code = self.tracks.gpu_queue(g.gpu_id, queue)
        else:
            code = self.tracks.gpu_queue(g.gpu_id, f"Unknown GPU Queue {qid}")
            self.unnamed_queues.setdefault(qid, {}).setdefault(g.gpu_id, code)
        row = self.n
        self.n += 1
        self.kind.append(COMPLETE)
        self.track.append(code)
        self.ts.append(ts)
        self.clock.append(clock)
        self.dur.append(g.duration)
        self.name.append(self.b.intern(label))
        self.cat.append(self.b.intern("kernel" if category == _COMPUTE_STAGE else "gpu_render_stage"))
        self._stat("stage", "s", row, stage_name)
        if g.HasField("submission_id"):
            self._stat("submission_id", "u", row, g.submission_id)
        if g.HasField("context"):
            self._stat("context", "u", row, g.context)
        for e in g.extra_data:
            self._stat(text(e.name), "s", row, text(e.value))

    def _render_specs(self, g: Any) -> None:
        """``specifications``: queues by position in this message (a later one renames),
        named stages added to those before. A queue events used unnamed has its track
        renamed on the message's GPU, once (``InsertTrackForUninternedRenderStage``)."""
        queues, stages = self.render_specs
        for i, q in enumerate(g.specifications.hw_queue):
            if not q.HasField("name"):
                continue
            queues.extend([""] * (i + 1 - len(queues)))
            queues[i] = text(q.name)
            unnamed = self.unnamed_queues.pop(i, None)
            if unnamed and queues[i] and g.gpu_id in unnamed:
                self.tracks.info[unnamed[g.gpu_id]]["name"] = queues[i]
        stages.extend(text(st.name) for st in g.specifications.stage if st.HasField("name"))

    def gpu_counters(self, f: dict[int, Any], g: Any, s: Sequence) -> None:
        """A ``GpuCounterEvent``: samples of GPU counters, named by a descriptor. As
        Perfetto's ``GraphicsEventModule``: a legacy counter id is its first descriptor's
        in the file (on that one's GPU), wherever the samples are, and ``build.py`` drops
        the samples of an id none describes; an interned descriptor's ids are its own (a
        sample of an id it lacks is dropped). A value is the counter's over the interval
        ending at its sample unless the descriptor says forwards; samples in a packet
        without a timestamp are dropped."""
        if g.HasField("counter_descriptor_iid"):
            ids = self._interned_gpu_counters(g.counter_descriptor_iid, s)
            if ids is None:
                if g.counters:
                    self.skip("GPU counter events whose counter_descriptor_iid names no interned descriptor, "
                              "as Perfetto drops them")
                return
        else:
            ids = None
            if g.HasField("counter_descriptor"):
                for spec in g.counter_descriptor.specs:
                    if spec.HasField("counter_id") and spec.HasField("name"):
                        self.tracks.gpu_counter_specs.setdefault(
                            spec.counter_id, (g.gpu_id, text(spec.name), spec.value_direction == _FORWARDS))
        if not g.counters:
            return
        if _P_TIMESTAMP not in f:
            self.skip("GPU counter events without a timestamp, as Perfetto drops them")
            return
        clock, ts = self._time(f, s)
        if self._beyond_int64("GPU counter events", ts):
            return
        for c in g.counters:
            which = c.WhichOneof("value")
            if which is None or not c.HasField("counter_id"):
                continue
            if ids is None:
                code = self.tracks.gpu_counter(c.counter_id)
            elif c.counter_id in ids:
                code, forwards = ids[c.counter_id]
                if not forwards:
                    self.backwards_counters.add(code)
            else:
                self.skip("GPU counter samples whose counter id their interned descriptor lacks, "
                          "as Perfetto drops them")
                continue
            self._counter(code, ts, clock, getattr(c, which))

    def _interned_gpu_counters(self, iid: int, s: Sequence) -> dict[int, tuple[int, bool]] | None:
        """Counter id -> (track code, forwards-looking) of the sequence's interned GPU
        counter descriptor ``iid`` (its counters are by GPU and name, as Perfetto's);
        None when the sequence has no such descriptor."""
        ids = s.gpu_maps.get(iid)
        if ids is not None:
            return ids
        d = s.gpu_descs.get(iid)
        if d is None or not d.HasField("counter_descriptor"):
            return None
        ids = s.gpu_maps[iid] = {}
        for spec in d.counter_descriptor.specs:
            if spec.HasField("counter_id") and spec.HasField("name") and spec.counter_id not in ids:
                ids[spec.counter_id] = (self.tracks.gpu_counter_named(d.gpu_id, text(spec.name)),
                                        spec.value_direction == _FORWARDS)
        return ids


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
