"""The GPU messages of a Perfetto trace into the collector's columns, as Perfetto's
``GpuEventParser`` and ``GraphicsEventModule`` read them: ``GpuRenderStageEvent`` (a
complete slice on its GPU's hardware queue, queues and stages named by the
specifications) and ``GpuCounterEvent`` (samples of GPU counters named by legacy or
interned descriptors). A part of :class:`~.collector.Collector`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...trace.builder import TraceBuilder
from .kinds import COMPLETE, P_TIMESTAMP
from .sequences import Sequence, text
from .tracks import Tracks

_COMPUTE_STAGE = 2  # InternedGpuRenderStageSpecification.RenderStageCategory.COMPUTE
_FORWARDS = 2  # GpuCounterSpec.VALUE_DIRECTION_FORWARDS_LOOKING


class GpuEvents:
    """The GPU messages' methods of :class:`~.collector.Collector` (which holds their state
    and columns)."""

    b: TraceBuilder
    tracks: Tracks
    n: int
    kind: list[int]
    track: list[int]
    ts: list[int]
    clock: list[int]
    dur: list[int]
    name: list[int]
    cat: list[int]
    render_specs: tuple[list[str], list[str]]
    unnamed_queues: dict[int, dict[int, int]]
    backwards_counters: set[int]

    if TYPE_CHECKING:
        def skip(self, why: str) -> None: ...

        def _time(self, f: dict[int, Any], s: Sequence) -> tuple[int, int]: ...

        def _beyond_int64(self, what: str, *values: int) -> bool: ...

        def _stat(self, key: str, kind: str, row: int, value: Any) -> None: ...

        def _counter(self, code: int, ts: int, clock: int, value: float) -> None: ...

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
        if P_TIMESTAMP not in f:
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
