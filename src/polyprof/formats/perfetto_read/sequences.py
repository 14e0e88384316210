"""What a packet sequence carries from packet to packet: its incremental state.

Perfetto's producers write each sequence (``trusted_packet_sequence_id``) in order and
send strings once: ``InternedData`` gives names, categories, annotation names and string
values small ids (iids) that later packets of the same sequence use. A packet flagged
``SEQ_INCREMENTAL_STATE_CLEARED`` (or with ``incremental_state_cleared``) starts the
state afresh; after ``previous_packet_dropped`` the state is unknown until the next
clear, and packets flagged ``SEQ_NEEDS_INCREMENTAL_STATE`` are skipped meanwhile (and
counted), as Perfetto's trace processor does. ``TracePacketDefaults`` (a default clock
and default tracks for track events), a legacy ``ThreadDescriptor`` (the thread a
sequence's events are on) and the running values of incremental counters (each
sequence sums its own deltas, from zero after a clear) belong to the state too.

The legacy delta-encoded times (``TrackEvent.timestamp_delta_us``, thread time and
instruction count deltas, Chrome's ``StreamingProfilePacket`` deltas) run from the
reference values of the sequence's last ``ThreadDescriptor``: as in Perfetto's
``TrackEventSequenceState``, that base is valid only from a thread descriptor on until
the next clear or lost packet (``times`` is None meanwhile, and delta-timed events are
skipped), and a one-off absolute time (``timestamp_absolute_us``) does not move it.
"""

from __future__ import annotations

from typing import Any, Callable

def text(v: Any) -> str:
    """A string field's value as text: protobuf hands a proto2 string that is not valid
    UTF-8 over as bytes."""
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2


class Sequence:
    """The incremental state of one packet sequence."""

    __slots__ = ("id", "valid", "names", "cats", "anames", "values", "specs", "contexts", "clock",
                 "track", "extra_counters", "extra_doubles", "thread", "times", "counters", "gpu_descs",
                 "gpu_maps")

    def __init__(self, seq_id: int):
        self.id = seq_id
        self.clock = 0  # TracePacketDefaults.timestamp_clock_id (0: none)
        self.track: int | None = None  # TrackEventDefaults.track_uuid
        self.extra_counters: list[int] = []
        self.extra_doubles: list[int] = []
        self.thread: tuple[int, int] | None = None  # legacy ThreadDescriptor (pid, tid)
        self.reset()

    def reset(self) -> None:
        """A clear: interned data and counter sums start afresh. The defaults and the
        legacy thread stay until a packet sets them again (as in Perfetto's trace
        processor, where a new generation of the state inherits them)."""
        self.valid = True
        #: the legacy delta base: [time ns (CLOCK_MONOTONIC), thread time ns, thread instruction
        #: count], set by a ThreadDescriptor; None until one comes (it does not outlive a clear)
        self.times: list[int] | None = None
        self.names: dict[int, int] = {}  # iid -> string id (the builder's table)
        self.cats: dict[int, int] = {}
        self.anames: dict[int, str] = {}
        self.values: dict[int, str] = {}
        self.specs: dict[int, tuple[str, int]] = {}  # GPU render stage / hw queue iid -> (name, category)
        self.contexts: dict[int, int] = {}  # graphics context iid -> pid
        self.gpu_descs: dict[int, Any] = {}  # InternedGpuCounterDescriptor by iid
        #: GPU counter descriptor iid -> counter id -> (counter track code, forwards-looking),
        #: made on the descriptor's first use and kept until a clear (as Perfetto's
        #: GpuCounterSequenceState)
        self.gpu_maps: dict[int, dict[int, tuple[int, bool]]] = {}
        self.counters: dict[int, float] = {}  # incremental counter track code -> running value

    def lost(self) -> None:
        """``previous_packet_dropped``: the state is unknown until the next clear, and so is
        the legacy delta base (Perfetto's ``ClearOnPacketLoss``)."""
        self.valid = False
        self.times = None

    def describe_thread(self, t: Any) -> None:
        """A legacy ``ThreadDescriptor``: the thread the sequence's events are on and the
        reference values its delta-encoded times run from."""
        self.thread = (t.pid, t.tid)
        self.times = [t.reference_timestamp_us * 1000, t.reference_thread_time_us * 1000,
                      t.reference_thread_instruction_count]

    def intern(self, d: Any, intern: Callable[[str], int]) -> None:
        """Add an ``InternedData`` message's entries (a later entry with an iid wins)."""
        for e in d.event_names:
            self.names[e.iid] = intern(text(e.name))
        for e in d.event_categories:
            self.cats[e.iid] = intern(text(e.name))
        for e in d.debug_annotation_names:
            self.anames[e.iid] = text(e.name)
        for e in d.debug_annotation_string_values:
            self.values[e.iid] = e.str.decode("utf-8", "replace")
        for e in d.gpu_specifications:
            self.specs[e.iid] = (text(e.name), e.category)
        for e in d.graphics_contexts:
            self.contexts[e.iid] = e.pid
        for e in d.gpu_counter_descriptors:
            self.gpu_descs[e.iid] = e

    def defaults(self, d: Any) -> None:
        """``TracePacketDefaults``: the sequence's default clock and track-event tracks."""
        self.clock = d.timestamp_clock_id
        if d.HasField("track_event_defaults"):
            t = d.track_event_defaults
            self.track = t.track_uuid if t.HasField("track_uuid") else None
            self.extra_counters = list(t.extra_counter_track_uuids)
            self.extra_doubles = list(t.extra_double_counter_track_uuids)
