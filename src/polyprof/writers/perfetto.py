"""Perfetto's protobuf trace format (``.perfetto-trace`` / ``.pftrace``), written streamed.

What is written (field numbers from Perfetto's public protos, ``protos/perfetto/trace``;
the subset is encoded here, see :mod:`.perfetto_wire`, so no generated code is needed):

- one process track per plane (``TrackDescriptor.process``: pid, plane name), one thread
  track per host thread (``thread``: pid, tid, name) and one named child track per device
  stream or derived line; events that overlap another on their track without nesting
  (Perfetto's tracks are stacks) go to an extra child track "<track> (overlap k)";
- every event as ``TrackEvent`` packets: ``TYPE_SLICE_BEGIN`` + ``TYPE_SLICE_END`` (or
  ``TYPE_INSTANT`` for zero duration) with interned name and category
  (``InternedData.event_names`` / ``event_categories``), its stats as debug annotations
  (names interned, string values interned; correlation and external ids made unique
  per source, ``formats/export_ids.py``);
- flows: ``flow_ids`` on the source event and ``terminating_flow_ids`` on the
  destination, ids 1..n in the trace's flow order, each flow's category numbered in the
  id's high bits (``device_list.FLOW_CATEGORY_SHIFT``; the names in Chrome metadata);
- counters: one counter track per (plane, name), ``double_counter_value`` samples;
- the device planes' properties (Kineto's ``deviceProperties``: model, SM count, memory...;
  XProf's peaks), which the efficiency tables match the device's peaks by: one
  ``ChromeEventBundle`` packet (``chrome_events``) of ``ChromeMetadata`` entries,
  ``polyprof_planes`` (JSON: plane name, vendor, properties) and, when the trace lists
  them, ``deviceProperties``, ``distributedInfo``, the host the trace was recorded
  on (``host_name``, as Kineto names it) and the trace's warnings and plugin errors
  (``polyprof_warnings``, ``polyprof_plugin_errors``: what a summary tells of data
  lost while recording). Chrome writes its own trace metadata so: Perfetto's trace
  processor keeps the entries (``cr-polyprof_planes``) in its metadata table (from its
  parser's source; not run here), and polyprof's reader puts them back on the planes.

Packets are written in time order, a chunk of ``CHUNK`` packets at a time, each chunk
preceded by the interned strings it first uses: memory beyond the Trace is a few
arrays per event (the order) plus one chunk, whatever the size of the output.
Timestamps are the trace's own nanoseconds (Perfetto's default clock).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import numpy as np

from ..trace.core import Trace
from ..trace.memory import export_counters
from ..trace.native_write import json_default
from ..trace.sorting import unique
from ..formats import perfetto_wire as w
from ..formats.chrome import _pids, _tids, host_name
from ..formats.export_ids import SourceIds
# the overlap lanes, shared with the Chrome export (_SCAN_LANES, _stack_lanes: tests/test_perfetto.py)
from ..formats.slice_lanes import SCAN_LANES as _SCAN_LANES, lane_pairs as _distinct_pairs  # noqa: F401
from ..formats.slice_lanes import lane_name, slice_lanes, stack_lanes as _stack_lanes  # noqa: F401
from ..formats.export_notes import HOST_NAME, PERFETTO_NOTES, notes
from ..formats.device_list import (FLOW_CATEGORY_SHIFT, PERFETTO_DERIVED_COUNTERS, PERFETTO_FLOW_CATEGORIES,
                                   PERFETTO_PLANES, json_value,
                                   plane_properties)
from ..trace import metadata_keys as mkeys

CHUNK = 1 << 16  # packets per write

# TracePacket
_PACKET = 1  # Trace.packet
_TIMESTAMP, _SEQ_ID, _TRACK_EVENT, _INTERNED, _SEQ_FLAGS, _TRACK_DESCRIPTOR = 8, 10, 11, 12, 13, 60
_CHROME_EVENTS, _BUNDLE_METADATA, _CM_NAME, _CM_JSON = 5, 2, 1, 5  # ChromeEventBundle.metadata: ChromeMetadata
_INCREMENTAL_STATE_CLEARED, _NEEDS_INCREMENTAL_STATE = 1, 2
# TrackEvent
_TE_CATEGORY_IIDS, _TE_ANNOTATIONS, _TE_TYPE, _TE_NAME_IID, _TE_TRACK_UUID = 3, 4, 9, 10, 11
_TE_DOUBLE_COUNTER, _TE_FLOW_IDS, _TE_TERMINATING_FLOW_IDS = 44, 47, 48
_SLICE_BEGIN, _SLICE_END, _INSTANT, _COUNTER = 1, 2, 3, 4
# DebugAnnotation
_DA_NAME_IID, _DA_BOOL, _DA_UINT, _DA_INT, _DA_DOUBLE, _DA_STRING_IID = 1, 2, 3, 4, 5, 17
# TrackDescriptor, ProcessDescriptor, ThreadDescriptor
_TD_UUID, _TD_NAME, _TD_PROCESS, _TD_THREAD, _TD_PARENT, _TD_COUNTER = 1, 2, 3, 4, 5, 8
_TD_CHILD_ORDERING, _TD_SIBLING_RANK, _EXPLICIT = 11, 12, 3
_PD_PID, _PD_NAME = 1, 6
_THD_PID, _THD_TID, _THD_NAME = 1, 2, 5
# InternedData and its entries ({iid = 1, name/str = 2})
_ID_CATEGORIES, _ID_NAMES, _ID_ANNOTATION_NAMES, _ID_STRING_VALUES = 1, 2, 3, 29

_EVENTS_SEQ, _COUNTERS_SEQ = 1, 2
_EVENT_SEQ = w.message([(_SEQ_ID, _EVENTS_SEQ), (_SEQ_FLAGS, _NEEDS_INCREMENTAL_STATE)])  # every event packet's
_THREAD_UUID, _LANE_UUID, _COUNTER_UUID = 1 << 32, 2 << 32, 3 << 32


def write(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as a Perfetto protobuf trace."""
    path = Path(path)
    with open(path, "wb") as f:
        write_to(trace, f)
    return path


def write_to(trace: Trace, f: BinaryIO) -> int:
    """Stream the trace's packets into ``f``; returns the bytes written."""
    n = 0
    for blob in packets(trace):
        f.write(blob)
        n += len(blob)
    return n


def packets(trace: Trace) -> Iterator[bytes]:
    """The encoded trace, in pieces (each a run of whole ``Trace.packet`` fields)."""
    plan = _Plan(trace)
    yield plan.header()
    yield from plan.event_chunks()
    yield from plan.counter_chunks()


def _packet(fields: list[tuple[int, Any]]) -> bytes:
    body = w.message(fields)
    return w.tag(_PACKET, 2) + w.varint_bytes(len(body)) + body


def _wrap_packets(batch: w.Batch) -> bytes:
    data, _ = w.field_bytes(_PACKET, batch)
    return data.tobytes()


class _Plan:
    """The order of the packets and the ids of tracks and flows, fixed before writing."""

    def __init__(self, trace: Trace):
        self.t = trace
        self.counters = export_counters(trace)  # with the memory series as counter tracks
        ev = trace.events
        start, dur = ev["start_ns"], ev["dur_ns"]
        self.n = n = trace.n_events
        # rank: events by (start, longest first); BEGIN/INSTANT packets go in this order
        self.by_rank = np.lexsort((np.arange(n), -dur, start)) if n else np.zeros(0, np.int64)
        self.rank = np.empty(n, np.int64)
        self.rank[self.by_rank] = np.arange(n)
        self.lane = slice_lanes(ev["track"], start, start + dur, self.by_rank, "perfetto")
        self.keys = list(trace.stats)
        self.ids = SourceIds(trace)  # correlation and external ids unique per source (formats/export_ids.py)
        self.values: dict[Any, int] = {}  # interned string values -> iid - 1
        self.sent_names = np.zeros(len(trace.strings), bool)
        self.sent_cats = np.zeros(len(trace.strings), bool)
        self.sent_values = 0
        fl = trace.flows
        self.flow_src = self._by_rank(fl["src"])
        self.flow_dst = self._by_rank(fl["dst"])
        self.flow_ids = np.arange(1, len(fl["src"]) + 1, dtype=np.uint64) + flow_category_bits(trace)
        self.stat_order = {k: self._by_rank(trace.stats[k].rows) for k in self.keys}

    def _by_rank(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ranks ascending, index into ``rows``) of event rows."""
        r = self.rank[np.asarray(rows, np.int64)] if len(rows) else np.zeros(0, np.int64)
        order = np.argsort(r, kind="stable")
        return r[order], order

    # ------------------------------------------------------------------ tracks
    def header(self) -> bytes:
        t = self.t
        out = [_packet([(_SEQ_ID, _EVENTS_SEQ), (_SEQ_FLAGS, _INCREMENTAL_STATE_CLEARED),
                        (_INTERNED, w.message([(_ID_ANNOTATION_NAMES, [w.message([(1, i + 1), (2, k)])
                                                                        for i, k in enumerate(self.keys)])]))])]
        pids, tids = _pids(t), _tids(t)
        for p, pid in zip(t.planes, pids):
            out.append(_descriptor([(_TD_UUID, 1 + p.id), (_TD_CHILD_ORDERING, _EXPLICIT),
                                    (_TD_PROCESS, w.message([(_PD_PID, pid), (_PD_NAME, p.name)]))]))
        for tr, tid in zip(t.tracks, tids):
            fields: list[tuple[int, Any]] = [(_TD_UUID, _THREAD_UUID + tr.id), (_TD_PARENT, 1 + tr.plane),
                                             (_TD_SIBLING_RANK, _int32(tr.sort_index))]
            if tr.kind == "thread" and t.planes[tr.plane].kind == "host":
                fields.append((_TD_THREAD, w.message([(_THD_PID, pids[tr.plane]), (_THD_TID, tid),
                                                      (_THD_NAME, tr.name)])))
            else:
                fields.append((_TD_NAME, tr.name))
            out.append(_descriptor(fields))
        if self.n:
            for tr_id, lane in _distinct_pairs(self.t.events["track"], self.lane):
                tr = t.tracks[tr_id]
                out.append(_descriptor([(_TD_UUID, _lane_uuid(tr_id, lane)), (_TD_PARENT, 1 + tr.plane),
                                        (_TD_NAME, lane_name(tr.name, lane)),
                                        (_TD_SIBLING_RANK, _int32(tr.sort_index))]))
        for i, (plane, name) in enumerate(self.counter_tracks()):
            out.append(_descriptor([(_TD_UUID, _COUNTER_UUID + i), (_TD_PARENT, 1 + plane),
                                    (_TD_NAME, t.strings[name]), (_TD_COUNTER, b"")]))
        out.append(_packet([(_SEQ_ID, _COUNTERS_SEQ), (_SEQ_FLAGS, _INCREMENTAL_STATE_CLEARED)]))
        out.append(_device_metadata(t, self.counters))
        return b"".join(out)

    def counter_tracks(self) -> list[tuple[int, int]]:
        c = self.counters
        return list(dict.fromkeys(zip(c["plane"].tolist(), c["name"].tolist())))

    def track_uuids(self, rows: np.ndarray) -> np.ndarray:
        track = self.t.events["track"][rows].astype(np.int64)
        lane = self.lane[rows]
        return np.where(lane == 0, _THREAD_UUID + track, _LANE_UUID + track * 256 + lane)

    # ------------------------------------------------------------------ events
    def event_chunks(self) -> Iterator[bytes]:
        ev = self.t.events
        n = self.n
        if not n:
            return
        start, end = ev["start_ns"], ev["start_ns"] + ev["dur_ns"]
        slices = np.flatnonzero(ev["dur_ns"] > 0)
        # packets: BEGIN or INSTANT (phase 1, in rank order) and END (phase 0, inner first)
        rows = np.concatenate([np.arange(n), slices])
        is_end = np.zeros(len(rows), bool)
        is_end[n:] = True
        ts = np.where(is_end, end[rows], start[rows])
        sub = np.where(is_end, -self.rank[rows], self.rank[rows])
        order = np.lexsort((sub, ~is_end, ts))
        del sub
        for lo in range(0, len(order), CHUNK):
            sel = order[lo:lo + CHUNK]
            yield self._chunk(rows[sel], is_end[sel], ts[sel])

    def _chunk(self, rows: np.ndarray, is_end: np.ndarray, ts: np.ndarray) -> bytes:
        t, m = self.t, len(rows)
        begin = ~is_end
        b_idx = np.flatnonzero(begin)  # packets that carry an event (BEGIN or INSTANT)
        b_rows = rows[b_idx]
        name_ids = t.events["name"][b_rows].astype(np.int64) + 1
        cat_ids = t.events["category"][b_rows].astype(np.int64) + 1
        types = np.where(is_end, _SLICE_END, np.where(t.events["dur_ns"][rows] > 0, _SLICE_BEGIN, _INSTANT))
        # the packets of this chunk that carry ranks r0.. (BEGIN/INSTANT are in rank order)
        ranks = self.rank[b_rows]
        r0, r1 = (int(ranks[0]), int(ranks[-1]) + 1) if len(ranks) else (0, 0)
        if w.IMPLEMENTATION == "c":  # the packets in one compiled pass from these columns
            items = self._annotation_items(r0, r1, b_idx)
            src = self._flow_items(self.flow_src, r0, r1, b_idx)
            dst = self._flow_items(self.flow_dst, r0, r1, b_idx)
            interned = self._interned(b_rows)  # after the annotations: they intern string values
            name, cat = np.zeros(m, np.int64), np.zeros(m, np.int64)
            name[b_idx], cat[b_idx] = name_ids, cat_ids
            return interned + w.track_events(ts, _EVENT_SEQ, types, self.track_uuids(rows), begin, name, cat, None,
                                             items, src, dst)
        extras = [self._annotations(r0, r1, b_idx, m), self._flows(self.flow_src, _TE_FLOW_IDS, r0, r1, b_idx, m),
                  self._flows(self.flow_dst, _TE_TERMINATING_FLOW_IDS, r0, r1, b_idx, m)]
        interned = self._interned(b_rows)  # after the annotations: they intern string values
        te = w.join([w.field_varint(_TE_TYPE, types),
                     w.field_varint(_TE_TRACK_UUID, self.track_uuids(rows)),
                     w.masked(w.field_varint(_TE_NAME_IID, name_ids), begin),
                     w.masked(w.field_varint(_TE_CATEGORY_IIDS, cat_ids), begin), *extras])
        seq = w.const(_EVENT_SEQ, np.ones(m, bool))
        pk = w.join([w.field_varint(_TIMESTAMP, ts), seq, w.field_bytes(_TRACK_EVENT, te)])
        return interned + _wrap_packets(pk)

    def _interned(self, b_rows: np.ndarray) -> bytes:
        """A packet with the names, categories and string values first used by these events."""
        t = self.t
        parts: list[w.Batch] = []
        for field, col, sent in ((_ID_NAMES, "name", self.sent_names), (_ID_CATEGORIES, "category", self.sent_cats)):
            present = np.zeros(len(t.strings), bool)
            present[t.events[col][b_rows]] = True
            new = np.flatnonzero(present & ~sent)
            sent |= present
            if len(new):
                entry = w.join([w.field_varint(1, new + 1), w.field_bytes(2, w.strings([t.strings[i] for i in new]))])
                parts.append(w.field_bytes(field, entry))
        new_values = list(self.values)[self.sent_values:]
        if new_values:
            entry = w.join([w.field_varint(1, np.arange(self.sent_values, len(self.values)) + 1),
                            w.field_bytes(2, w.strings(new_values))])
            parts.append(w.field_bytes(_ID_STRING_VALUES, entry))
            self.sent_values = len(self.values)
        if not parts:
            return b""
        body = b"".join(d.tobytes() for d, _ in parts)
        return _packet([(_SEQ_ID, _EVENTS_SEQ), (_SEQ_FLAGS, _NEEDS_INCREMENTAL_STATE), (_INTERNED, body)])

    def _annotations(self, r0: int, r1: int, b_idx: np.ndarray, m: int) -> w.Batch:
        """``debug_annotations`` of the events of ranks r0..r1 (placed at packets ``b_idx``)."""
        items_at: list[np.ndarray] = []
        items: list[w.Batch] = []
        for k, key in enumerate(self.keys):
            ranks, order = self.stat_order[key]
            lo, hi = np.searchsorted(ranks, [r0, r1])
            if lo == hi:
                continue
            sel = order[lo:hi]
            vals = self.ids.values(key, self.t.stats[key])[sel]
            head = w.field_varint(_DA_NAME_IID, np.full(len(sel), k + 1, np.int64))
            items.append(w.field_bytes(_TE_ANNOTATIONS, w.join([head, self._value(vals)])))
            items_at.append(b_idx[ranks[lo:hi] - r0])
        if not items:
            return w.const(b"", np.zeros(m, bool))
        data = np.concatenate([d for d, _ in items])
        lens = np.concatenate([l for _, l in items])
        return w.group(np.concatenate(items_at), (data, lens), m)

    def _value(self, vals: np.ndarray) -> w.Batch:
        kind = vals.dtype.kind
        if kind == "i":
            return w.field_varint(_DA_INT, vals)
        if kind == "u":
            return w.field_varint(_DA_UINT, vals)
        if kind == "f":
            return w.field_fixed64(_DA_DOUBLE, vals)
        if kind == "b":
            return w.field_varint(_DA_BOOL, vals.astype(np.int64))
        return w.field_varint(_DA_STRING_IID, self._string_iids(vals))

    def _string_iids(self, vals: np.ndarray) -> np.ndarray:
        """The interned ids of string values (new texts numbered in order of appearance)."""
        table = self.values
        return np.array([table.setdefault(_text(v), len(table)) + 1 for v in vals.tolist()], np.int64)

    def _annotation_items(self, r0: int, r1: int, b_idx: np.ndarray) -> w.Items:
        """The ``debug_annotations`` of the events of ranks r0..r1 as columns for
        ``w.track_events``: packet, name iid, value kind, value bits; in packet order,
        each packet's in key order (as :meth:`_annotations` groups them)."""
        parts = []
        for k, key in enumerate(self.keys):
            ranks, order = self.stat_order[key]
            lo, hi = np.searchsorted(ranks, [r0, r1])
            if lo == hi:
                continue
            vals = self.ids.values(key, self.t.stats[key])[order[lo:hi]]
            kind = vals.dtype.kind
            if kind in "iufb":
                code = "iufb".index(kind)
                bits = vals.astype(np.float64).view(np.uint64) if kind == "f" else \
                    vals.astype(np.int64).view(np.uint64) if kind == "i" else vals.astype(np.uint64)
            else:
                code, bits = 4, self._string_iids(vals).view(np.uint64)
            n = hi - lo
            parts.append((b_idx[ranks[lo:hi] - r0], np.full(n, k + 1, np.int64), np.full(n, code, np.uint8), bits))
        if not parts:
            return w.no_items()
        at = np.concatenate([p[0] for p in parts])
        o = np.argsort(at, kind="stable")
        return at[o], np.concatenate([p[1] for p in parts])[o], np.concatenate([p[2] for p in parts])[o], \
            np.concatenate([p[3] for p in parts])[o]

    def _flow_items(self, by_rank: tuple[np.ndarray, np.ndarray], r0: int, r1: int,
                    b_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(packet, flow id) of the flows of the events of ranks r0..r1, in packet order."""
        ranks, order = by_rank
        lo, hi = np.searchsorted(ranks, [r0, r1])
        return b_idx[ranks[lo:hi] - r0], self.flow_ids[order[lo:hi]]

    def _flows(self, by_rank: tuple[np.ndarray, np.ndarray], field: int, r0: int, r1: int,
               b_idx: np.ndarray, m: int) -> w.Batch:
        ranks, order = by_rank
        lo, hi = np.searchsorted(ranks, [r0, r1])
        if lo == hi:
            return w.const(b"", np.zeros(m, bool))
        return w.group(b_idx[ranks[lo:hi] - r0], w.field_fixed64(field, self.flow_ids[order[lo:hi]]), m)

    # ------------------------------------------------------------------ counters
    def counter_chunks(self) -> Iterator[bytes]:
        c = self.counters
        if not len(c["ts_ns"]):
            return
        index = {key: i for i, key in enumerate(self.counter_tracks())}
        uuid = np.array([index[k] for k in zip(c["plane"].tolist(), c["name"].tolist())], np.int64) + _COUNTER_UUID
        order = np.argsort(c["ts_ns"], kind="stable")
        seq = w.message([(_SEQ_ID, _COUNTERS_SEQ)])
        for lo in range(0, len(order), CHUNK):
            sel = order[lo:lo + CHUNK]
            m = len(sel)
            if w.IMPLEMENTATION == "c":
                none = (np.zeros(0, np.int64), np.zeros(0, np.uint64))
                yield w.track_events(c["ts_ns"][sel], seq, np.full(m, _COUNTER), uuid[sel], np.zeros(m, bool), None,
                                     None, c["value"][sel], w.no_items(), none, none)
                continue
            te = w.join([w.field_varint(_TE_TYPE, np.full(m, _COUNTER)), w.field_varint(_TE_TRACK_UUID, uuid[sel]),
                         w.field_fixed64(_TE_DOUBLE_COUNTER, c["value"][sel])])
            pk = w.join([w.field_varint(_TIMESTAMP, c["ts_ns"][sel]), w.const(seq, np.ones(m, bool)),
                         w.field_bytes(_TRACK_EVENT, te)])
            yield _wrap_packets(pk)


def _flow_category_ids(trace: Trace) -> list[int]:
    """The string ids of the trace's flows' categories ("" left out), in their numbering's order."""
    return [c for c in unique(trace.flows["category"]).tolist() if trace.strings[c]]


def flow_category_bits(trace: Trace) -> np.ndarray:
    """Per flow, its category's number (1-based in the metadata's list, 0 for none)
    shifted into the high bits of its Perfetto flow id (``device_list.FLOW_CATEGORY_SHIFT``)."""
    code = np.zeros(max(len(trace.strings), 1), np.uint64)
    for i, c in enumerate(_flow_category_ids(trace), 1):
        code[c] = i
    return code[np.asarray(trace.flows["category"], np.int64)] << np.uint64(FLOW_CATEGORY_SHIFT)


def _device_metadata(trace: Trace, counters: dict[str, np.ndarray]) -> bytes:
    """The ``chrome_events`` packet with the device planes' properties and vendor (by
    plane name), the trace's ``deviceProperties`` list, ``distributedInfo`` and host
    name, its flows' categories, its warnings and plugin errors and the counters made of its memory series
    (``counters``: what the export writes); nothing
    when there are none. A device plane's bytes values (XSpace stats) become hex text, as
    in the Kineto export; a host plane's properties are kept whole where they hold bytes
    (an XSpace's HLO modules), those as ``{"__bytes__": base64}`` (trace/native_write.py)."""
    planes = [{"plane": p.name, "vendor": p.vendor, "properties": plane_properties(p)}
              for p in trace.planes if p.kind == "device" and (p.properties or p.vendor)]
    planes += [{"plane": p.name, "properties": dict(p.properties)}
               for p in trace.planes if p.kind != "device" and _holds_bytes(p.properties)]
    entries: list[tuple[str, Any]] = [(PERFETTO_PLANES, planes)] if planes else []
    derived = _derived_counters(trace, counters)
    if derived:
        entries.append((PERFETTO_DERIVED_COUNTERS, derived))
    listed = trace.metadata.get(mkeys.DEVICE_PROPERTIES)
    if isinstance(listed, list) and listed:
        entries.append((mkeys.DEVICE_PROPERTIES, json_value(listed)))
    info = trace.metadata.get(mkeys.DISTRIBUTED_INFO)
    if isinstance(info, dict) and info:  # (the process groups' sizes: collectives' bus bandwidth)
        entries.append((mkeys.DISTRIBUTED_INFO, json_value(info)))
    host = host_name(trace)
    if host:  # (Perfetto's SystemInfo has no host name: its utsname lacks the nodename)
        entries.append((HOST_NAME, host))
    categories = [trace.strings[c] for c in _flow_category_ids(trace)]
    if categories:
        entries.append((PERFETTO_FLOW_CATEGORIES, categories))
    # the warnings and plugin errors (polyprof_warnings, polyprof_plugin_errors): the reader restores them
    entries += [(PERFETTO_NOTES[k], v) for k, v in notes(trace, 0).items()]  # (and the schedule: times as written)
    if not entries:
        return b""
    meta = [w.message([(_CM_NAME, name), (_CM_JSON, json.dumps(v, default=json_default))])
            for name, v in entries]
    return _packet([(_SEQ_ID, _EVENTS_SEQ), (_CHROME_EVENTS, w.message([(_BUNDLE_METADATA, meta)]))])


def _holds_bytes(v: Any, depth: int = 0) -> bool:
    """Whether a property value holds bytes, at any depth up to 32 (an XSpace's
    ``xspace_event_metadata``: a list of records with the HLO modules)."""
    if isinstance(v, (bytes, bytearray)):
        return True
    if depth >= 32:
        return False
    items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else ()
    return any(_holds_bytes(x, depth + 1) for x in items)


def _derived_counters(trace: Trace, counters: dict[str, np.ndarray]) -> list[list[str]]:
    """[plane name, counter name] of the counters the export adds to the trace's own
    (``trace.memory.export_counters``: its memory series)."""
    own = set(zip(trace.counters["plane"].tolist(), trace.counters["name"].tolist()))
    added = set(zip(counters["plane"].tolist(), counters["name"].tolist())) - own
    return sorted([trace.planes[p].name, trace.strings[n]] for p, n in added)


def _descriptor(fields: list[tuple[int, Any]]) -> bytes:
    return _packet([(_SEQ_ID, _EVENTS_SEQ), (_TRACK_DESCRIPTOR, w.message(fields))])


def _int32(v: int) -> int:
    return max(-(1 << 31), min(int(v), (1 << 31) - 1)) & ((1 << 64) - 1)


def _lane_uuid(track: int, lane: int) -> int:
    return _LANE_UUID + track * 256 + lane


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else str(v)
