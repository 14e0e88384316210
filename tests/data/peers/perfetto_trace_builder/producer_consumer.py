"""A producer/consumer program that records itself with perfetto's TraceProtoBuilder.
Writes OUT.pftrace and OUT.expect.json (the slices it recorded: name, count, total ns per track)."""

import sys
import time
import threading
import queue
import math
import json
from collections import defaultdict
from perfetto.trace_builder.proto_builder import TraceProtoBuilder
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    TrackEvent,
    CounterDescriptor,
    TracePacket,
)

out = sys.argv[1]
PID = 4242
builder = TraceProtoBuilder()
lock = threading.Lock()
expect = defaultdict(lambda: [0, 0])
seq_ids = {}


def pkt(seq):
    p = builder.add_packet()
    p.trusted_packet_sequence_id = seq
    return p


# process + tracks (sequence 1 owns descriptors)
p = pkt(1)
p.track_descriptor.uuid = 1
p.track_descriptor.process.pid = PID
p.track_descriptor.process.process_name = "pf_prog"
THREADS = {"main": (10, 2, PID), "producer": (11, 3, PID + 1), "consumer": (12, 4, PID + 2)}
for name, (uuid, _seq, tid) in THREADS.items():
    p = pkt(1)
    d = p.track_descriptor
    d.uuid = uuid
    d.parent_uuid = 1
    d.thread.pid = PID
    d.thread.tid = tid
    d.thread.thread_name = name
# async track for requests, a counter track for queue depth, one for rss
p = pkt(1)
d = p.track_descriptor
d.uuid = 20
d.parent_uuid = 1
d.name = "requests"
p = pkt(1)
d = p.track_descriptor
d.uuid = 30
d.parent_uuid = 1
d.name = "queue depth"
d.counter.unit = CounterDescriptor.UNIT_COUNT
interned = {}  # per sequence: name -> iid


def begin(thread, name, ts, flows=(), term=(), ann=None):
    uuid, seq, _ = THREADS[thread]
    with lock:
        p = pkt(seq)
        p.timestamp = ts
        first = seq not in interned
        if first:
            interned[seq] = {}
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        iids = interned[seq]
        if name not in iids:
            iids[name] = len(iids) + 1
            en = p.interned_data.event_names.add()
            en.iid = iids[name]
            en.name = name
        if not first:
            p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        te = p.track_event
        te.type = TrackEvent.TYPE_SLICE_BEGIN
        te.track_uuid = uuid
        te.name_iid = iids[name]
        te.categories.append("work")
        te.flow_ids.extend(flows)
        te.terminating_flow_ids.extend(term)
        if ann:
            for k, v in ann.items():
                da = te.debug_annotations.add()
                da.name = k
                da.int_value = v


def end(thread, ts):
    uuid, seq, _ = THREADS[thread]
    with lock:
        p = pkt(seq)
        p.timestamp = ts
        p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        te = p.track_event
        te.type = TrackEvent.TYPE_SLICE_END
        te.track_uuid = uuid


class span:
    def __init__(self, thread, name, **kw):
        self.t, self.n, self.kw = thread, name, kw

    def __enter__(self):
        self.t0 = time.monotonic_ns()
        begin(self.t, self.n, self.t0, **self.kw)

    def __exit__(self, *a):
        t1 = time.monotonic_ns()
        end(self.t, t1)
        with lock:
            e = expect[f"{self.t}/{self.n}"]
            e[0] += 1
            e[1] += t1 - self.t0


def counter(uuid, ts, v):
    with lock:
        p = pkt(1)
        p.timestamp = ts
        te = p.track_event
        te.type = TrackEvent.TYPE_COUNTER
        te.track_uuid = uuid
        te.counter_value = v


def work(n):
    s = 0.0
    for i in range(n):
        s += math.sqrt(i)
    return s


q = queue.Queue()


def producer():
    for i in range(20):
        with span("producer", "produce", ann={"item": i}):
            work(3000)
        t = time.monotonic_ns()
        with span("producer", "enqueue", flows=[1000 + i]):
            q.put((i, t))
            counter(30, time.monotonic_ns(), q.qsize())
    q.put(None)


def consumer():
    while True:
        with span("consumer", "wait"):
            item = q.get()
        if item is None:
            break
        i, t = item
        with span("consumer", "consume", term=[1000 + i]):
            with span("consumer", "parse"):
                work(1000)
            with span("consumer", "store"):
                time.sleep(0.001)
        with lock:  # async request: from enqueue to consumed, on the "requests" track
            now = time.monotonic_ns()
            p = pkt(5)
            p.timestamp = t
            te = p.track_event
            te.type = TrackEvent.TYPE_SLICE_BEGIN
            te.track_uuid = 20
            te.name = "request"
            p = pkt(5)
            p.timestamp = now
            te = p.track_event
            te.type = TrackEvent.TYPE_SLICE_END
            te.track_uuid = 20
            e = expect["requests/request"]
            e[0] += 1
            e[1] += now - t


with span("main", "run"):
    ts = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    with span("main", "instant_parent"):
        with lock:
            p = pkt(2)
            p.timestamp = time.monotonic_ns()
            p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            te = p.track_event
            te.type = TrackEvent.TYPE_INSTANT
            te.track_uuid = 10
            te.name = "done"
# packets must be in timestamp order per sequence; they are (each sequence written under one lock in time order)
open(out + ".pftrace", "wb").write(builder.serialize())
json.dump(expect, open(out + ".expect.json", "w"), indent=0)
print(len(builder.trace.packet), "packets")
