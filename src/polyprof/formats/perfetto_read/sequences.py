"""What a packet sequence carries from packet to packet: its incremental state.

Perfetto's producers write each sequence (``trusted_packet_sequence_id``) in order and
send strings once: ``InternedData`` gives names, categories, annotation names and string
values small ids (iids) that later packets of the same sequence use. A packet flagged
``SEQ_INCREMENTAL_STATE_CLEARED`` (or with ``incremental_state_cleared``) starts the
state afresh; after ``previous_packet_dropped`` the state is unknown until the next
clear, and packets flagged ``SEQ_NEEDS_INCREMENTAL_STATE`` are skipped meanwhile (and
counted), as Perfetto's trace processor does. ``TracePacketDefaults`` (a default clock
and default tracks for track events), a legacy ``ThreadDescriptor`` (the thread a
sequence's events are on, and its microsecond time base) and the running values of
incremental counters (each sequence sums its own deltas, from zero after a clear)
belong to the state too.
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
                 "track", "extra_counters", "extra_doubles", "thread", "last_us", "counters")

    def __init__(self, seq_id: int):
        self.id = seq_id
        self.clock = 0  # TracePacketDefaults.timestamp_clock_id (0: none)
        self.track: int | None = None  # TrackEventDefaults.track_uuid
        self.extra_counters: list[int] = []
        self.extra_doubles: list[int] = []
        self.thread: tuple[int, int] | None = None  # legacy ThreadDescriptor (pid, tid)
        self.last_us = 0  # legacy microsecond timestamps: the last absolute value
        self.reset()

    def reset(self) -> None:
        """A clear: interned data and counter sums start afresh. The defaults and the
        legacy thread stay until a packet sets them again (as in Perfetto's trace
        processor, where a new generation of the state inherits them)."""
        self.valid = True
        self.names: dict[int, int] = {}  # iid -> string id (the builder's table)
        self.cats: dict[int, int] = {}
        self.anames: dict[int, str] = {}
        self.values: dict[int, str] = {}
        self.specs: dict[int, tuple[str, int]] = {}  # GPU render stage / hw queue iid -> (name, category)
        self.contexts: dict[int, int] = {}  # graphics context iid -> pid
        self.counters: dict[int, float] = {}  # incremental counter track code -> running value

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

    def defaults(self, d: Any) -> None:
        """``TracePacketDefaults``: the sequence's default clock and track-event tracks."""
        self.clock = d.timestamp_clock_id
        if d.HasField("track_event_defaults"):
            t = d.track_event_defaults
            self.track = t.track_uuid if t.HasField("track_uuid") else None
            self.extra_counters = list(t.extra_counter_track_uuids)
            self.extra_doubles = list(t.extra_double_counter_track_uuids)
