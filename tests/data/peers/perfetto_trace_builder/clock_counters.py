"""Less common TrackEvent features, written by perfetto's TraceProtoBuilder from a real (timed) loop:
a sequence-scoped clock in microseconds (ClockSnapshot + TracePacketDefaults), interned categories and
debug-annotation names, double counters, extra_counter_values, child tracks of a thread, two processes
whose threads share a tid, an incremental counter. Writes OUT.pftrace and OUT.expect.json."""

import sys
import time
import json
import math
from collections import defaultdict
from perfetto.trace_builder.proto_builder import TraceProtoBuilder
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent, TracePacket, CounterDescriptor, BuiltinClock

out = sys.argv[1]
b = TraceProtoBuilder()
expect = defaultdict(lambda: [0, 0])
counters = defaultdict(list)


def pkt(seq):
    p = b.add_packet()
    p.trusted_packet_sequence_id = seq
    return p


MYCLK = 64  # sequence-scoped clock, µs since the program's start
t0 = time.monotonic_ns()
p = pkt(1)
cs = p.clock_snapshot
c = cs.clocks.add()
c.clock_id = BuiltinClock.BUILTIN_CLOCK_MONOTONIC
c.timestamp = t0
c = cs.clocks.add()
c.clock_id = MYCLK
c.timestamp = 0
c.unit_multiplier_ns = 1000
p = pkt(1)
p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
p.trace_packet_defaults.timestamp_clock_id = MYCLK
p.trace_packet_defaults.track_event_defaults.track_uuid = 11
p.trace_packet_defaults.track_event_defaults.extra_counter_track_uuids.append(40)
ic = p.interned_data.event_categories.add()
ic.iid = 1
ic.name = "compute"
ia = p.interned_data.debug_annotation_names.add()
ia.iid = 1
ia.name = "n"
for pid, name in ((100, "alpha"), (200, "beta")):
    p = pkt(1)
    d = p.track_descriptor
    d.uuid = pid
    d.process.pid = pid
    d.process.process_name = name
    p = pkt(1)
    d = p.track_descriptor
    d.uuid = pid // 100 + 10
    d.parent_uuid = pid
    d.thread.pid = pid
    d.thread.tid = 7
    d.thread.thread_name = "worker"
p = pkt(1)
d = p.track_descriptor
d.uuid = 13
d.parent_uuid = 11
d.name = "io lane"  # child of alpha's thread
p = pkt(1)
d = p.track_descriptor
d.uuid = 40
d.parent_uuid = 100
d.name = "ops done"
d.counter.is_incremental = True
p = pkt(1)
d = p.track_descriptor
d.uuid = 41
d.parent_uuid = 200
d.name = "load"
d.counter.unit = CounterDescriptor.UNIT_COUNT


def us():
    return (time.monotonic_ns() - t0) // 1000


def slice_(uuid, name, fn, n, track_default=False):
    s = us()
    p = pkt(1)
    p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    p.timestamp = s
    te = p.track_event
    te.type = TrackEvent.TYPE_SLICE_BEGIN
    te.name = name
    te.category_iids.append(1)
    if not track_default:
        te.track_uuid = uuid
    da = te.debug_annotations.add()
    da.name_iid = 1
    da.int_value = n
    fn(n)
    e = us()
    p = pkt(1)
    p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    p.timestamp = e
    te = p.track_event
    te.type = TrackEvent.TYPE_SLICE_END
    if not track_default:
        te.track_uuid = uuid
    if track_default:
        te.extra_counter_values.append(1)
        counters["ops done"].append(1)
    k = expect[f"{uuid}/{name}"]
    k[0] += 1
    k[1] += (e - s) * 1000


work = lambda n: sum(math.sqrt(i) for i in range(n))
for i in range(15):
    slice_(11, "alpha_step", work, 2000 + 100 * i, track_default=True)
    slice_(12, "beta_step", work, 1500)
    slice_(13, "io", lambda n: time.sleep(n / 1e6), 300)
    p = pkt(1)
    p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    p.timestamp = us()
    te = p.track_event
    te.type = TrackEvent.TYPE_COUNTER
    te.track_uuid = 41
    te.double_counter_value = i * 0.5
    counters["load"].append(i * 0.5)
open(out + ".pftrace", "wb").write(b.serialize())
json.dump({"slices": expect, "counters": counters}, open(out + ".expect.json", "w"))
