"""GPU messages in Perfetto files (``GpuRenderStageEvent``, ``GpuCounterEvent``) named and
kept as Perfetto's trace processor does (``GpuEventParser``, ``GraphicsEventModule``), checked
against the expected tables of Perfetto's diff tests (``parser/graphics/tests_gpu_trace.py``)
and hand-built files (the `perfetto` package's own protos, test-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

import polyprof
from perfetto_text import write_packets
from polyprof.formats.perfetto_read import load, walked

ROOT = Path(__file__).resolve().parents[1]
P = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
D = P.GpuRenderStageEvent.Specifications.Description
SPEC = P.GpuCounterDescriptor.GpuCounterSpec


def _pkt(seq: int = 1, **fields) -> "P.TracePacket":
    return P.TracePacket(trusted_packet_sequence_id=seq, **fields)


def _stage(ts: int, **fields) -> "P.TracePacket":
    return _pkt(timestamp=ts, gpu_render_stage_event=P.GpuRenderStageEvent(event_id=1, duration=5, **fields))


def _specs(gpu: int = 0, queues: tuple = (), stages: tuple = ()) -> "P.TracePacket":
    spec = P.GpuRenderStageEvent.Specifications(hw_queue=[D(name=q) for q in queues],
                                                stage=[D(name=s) for s in stages])
    return _pkt(gpu_render_stage_event=P.GpuRenderStageEvent(gpu_id=gpu, specifications=spec))


def _rows(trace) -> list[tuple]:
    """(ts, plane, track, slice name) of every slice, in time order."""
    tracks = [(trace.planes[t.plane].name, t.name) for t in trace.tracks]
    return sorted((ts, *tracks[t], n) for ts, t, n in zip(trace.events["start_ns"].tolist(),
                                                          trace.events["track"].tolist(), trace.names().tolist()))


def _counters(trace) -> dict[tuple[str, str], list[tuple[int, float]]]:
    got: dict[tuple[str, str], list[tuple[int, float]]] = {}
    c = trace.counters
    for plane, name, ts, v in zip(c["plane"].tolist(), c["name"].tolist(), c["ts_ns"].tolist(), c["value"].tolist()):
        got.setdefault((trace.planes[plane].name, trace.strings[name]), []).append((ts, v))
    return {k: sorted(v) for k, v in got.items()}


def test_render_stages_of_perfettos_trace_are_named_as_its_expected_table():
    """Perfetto's ``gpu_render_stages.py`` trace against ``test_gpu_render_stages``: a
    queue no specification names is ``Unknown GPU Queue <id>`` (the int32 read as
    uint32), a stage ``render stage(<id>)`` (read as uint64); the queue of the slice
    before the specifications is renamed by them, its stage is not. polyprof named them
    ``queue 3``, ``stage 4``, ``queue -1``, ``stage -1`` and the first slice ``stage 1``."""
    trace = polyprof.load(ROOT / "tests/data/peers/perfetto/gpu_render_stages.pftrace")
    got = [(ts, track, name) for ts, _, track, name in _rows(trace)]
    q0 = [(ts, "queue 0", "stage 0") for ts in (50, 60, 70, 90, 100, 110, 120, 130, 150, 160, 170, 180)]
    assert got == sorted([
        (0, "queue 1", "render stage(1)"), (0, "queue 0", "stage 0"), (10, "queue 1", "stage 1"),
        (20, "queue 2", "stage 2"), (30, "queue 0", "stage 3"), (40, "Unknown GPU Queue 3", "render stage(4)"),
        (80, "queue 0", "stage 2"), (140, "Unknown GPU Queue 4294967295", "render stage(18446744073709551615)"),
        *q0])
    assert trace.stats["stage"].values.tolist()[:1] == ["render stage(1)"]


def test_an_unnamed_queue_is_renamed_once_on_the_specifications_gpu(tmp_path):
    """As ``GpuEventParser::InsertTrackForUninternedRenderStage``: the first
    specification naming a queue renames the queue's unnamed track on that message's GPU
    (later slices join it); another GPU's unnamed track keeps the placeholder, and a
    stage given by number before any specification keeps ``render stage(<id>)``. A
    slice whose ``hw_queue_iid`` no interned specification names is dropped."""
    packets = [_stage(10, gpu_id=0, hw_queue_id=2, stage_id=0),
               _stage(20, gpu_id=1, hw_queue_id=2, stage_id=0),
               _specs(gpu=0, queues=("graphics", "compute", "copy"), stages=("draw",)),
               _stage(30, gpu_id=0, hw_queue_id=2, stage_id=0),
               _stage(40, gpu_id=1, hw_queue_id=2, stage_id=0),
               _specs(gpu=1, queues=("a", "b", "later")),
               _stage(50, hw_queue_iid=9, stage_id=0)]
    trace = polyprof.load(write_packets(tmp_path, packets))
    assert _rows(trace) == [(10, "/device:GPU:0", "copy", "render stage(0)"),
                            (20, "/device:GPU:1", "Unknown GPU Queue 2", "render stage(0)"),
                            (30, "/device:GPU:0", "copy", "draw"),
                            (40, "/device:GPU:1", "copy", "draw")]
    assert len({t for t in trace.events["track"].tolist()}) == 3  # GPU 0's "copy" is one track
    assert trace.metadata["warnings"] == [
        "skipped 1 GPU render stages whose hw_queue_iid no interned specification names, as Perfetto drops them"]


def test_a_stage_iid_not_interned_is_named_so(tmp_path):
    """Perfetto leaves such a slice without a name; polyprof names it as it names a track
    event whose name iid is not interned, and counts it (it was ``stage 0``, from the
    unset ``stage_id``)."""
    specs = P.InternedData(gpu_specifications=[P.InternedGpuRenderStageSpecification(iid=1, name="q")])
    packets = [_pkt(timestamp=0, sequence_flags=1, interned_data=specs),
               _pkt(timestamp=10, sequence_flags=2, gpu_render_stage_event=P.GpuRenderStageEvent(
                   event_id=1, duration=5, hw_queue_iid=1, stage_iid=7))]
    trace = polyprof.load(write_packets(tmp_path, packets))
    assert _rows(trace) == [(10, "/device:GPU:0", "q", "<stage iid 7 not interned>")]
    assert trace.metadata["warnings"] == ["skipped 1 GPU render stage names not interned on their sequence (named by iid)"]


def test_gpu_counter_samples_no_descriptor_describes_are_dropped_and_counted(tmp_path):
    """As ``GraphicsEventModule``: legacy descriptors are read before any sample (at
    tokenization), so a sample before its descriptor in the file is the descriptor's
    counter on its GPU; the first descriptor of an id wins; samples of an id no
    descriptor describes are dropped, and polyprof says how many (it kept them as
    ``gpu counter <id>``); a sample without an id, or in a packet without a
    timestamp, is dropped too."""
    fwd = SPEC.VALUE_DIRECTION_FORWARDS_LOOKING

    def desc(gpu: int, *specs) -> "P.TracePacket":
        return _pkt(gpu_counter_event=P.GpuCounterEvent(gpu_id=gpu, counter_descriptor=P.GpuCounterDescriptor(
            specs=list(specs))))

    def sample(ts: int | None, *values: tuple[int | None, float]) -> "P.TracePacket":
        counters = [P.GpuCounterEvent.GpuCounter(double_value=v) if cid is None else
                    P.GpuCounterEvent.GpuCounter(counter_id=cid, double_value=v) for cid, v in values]
        fields = {} if ts is None else {"timestamp": ts}
        return _pkt(gpu_counter_event=P.GpuCounterEvent(counters=counters), **fields)

    packets = [sample(10, (1, 5.0), (7, 1.0), (8, 2.0)),
               desc(1, SPEC(counter_id=1, name="busy", value_direction=fwd)),
               sample(20, (1, 6.0), (7, 3.0), (None, 9.0)),
               desc(0, SPEC(counter_id=1, name="renamed"), SPEC(counter_id=2, name="clock", value_direction=fwd)),
               sample(None, (1, 7.0), (2, 8.0)),
               sample(30, (2, 4.0))]
    trace = polyprof.load(write_packets(tmp_path, packets))
    assert _counters(trace) == {("/device:GPU:1", "busy"): [(10, 5.0), (20, 6.0)],
                                ("/device:GPU:0", "clock"): [(30, 4.0)]}
    assert trace.metadata["warnings"] == [
        "skipped 1 GPU counter events without a timestamp, as Perfetto drops them",
        "skipped 3 GPU counter samples whose counter id no GpuCounterDescriptor describes (7, 8), "
        "as Perfetto drops them"]


@pytest.mark.parametrize("compiled", [True, False])
def test_interned_gpu_counter_descriptors(tmp_path, monkeypatch, compiled):
    """Perfetto's ``test_gpu_counter_interned_descriptor`` (two sequences intern
    descriptor 1 with counter 1 for different counters and GPUs) and its expected table;
    a sample of an id its descriptor lacks and an event naming no interned descriptor
    are dropped, and counted. Before, polyprof read no interned descriptor: both
    sequences' samples were one ``gpu counter 1`` of GPU 0."""
    if compiled and walked.IMPLEMENTATION != "c":
        pytest.skip("the _walk extension is not built")

    def interned(seq: int, gpu: int, name: str) -> "P.TracePacket":
        d = P.InternedGpuCounterDescriptor(iid=1, gpu_id=gpu, counter_descriptor=P.GpuCounterDescriptor(
            specs=[SPEC(counter_id=1, name=name)]))
        return _pkt(seq, sequence_flags=1, interned_data=P.InternedData(gpu_counter_descriptors=[d]))

    def sample(seq: int, ts: int, value: int, cid: int = 1, iid: int = 1) -> "P.TracePacket":
        return _pkt(seq, sequence_flags=2, timestamp=ts, gpu_counter_event=P.GpuCounterEvent(
            counter_descriptor_iid=iid, counters=[P.GpuCounterEvent.GpuCounter(counter_id=cid, int_value=value)]))

    packets = [interned(1, 0, "CounterA"), interned(2, 1, "CounterB"),
               sample(1, 10, 100), sample(2, 10, 200), sample(1, 20, 150), sample(2, 20, 250),
               sample(1, 30, 1, cid=2), sample(2, 30, 1, iid=5)]
    path = write_packets(tmp_path, packets)
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(walked, "_walk", None)
            m.setattr(walked, "IMPLEMENTATION", "python")
        trace = load(path)
    assert _counters(trace) == {("/device:GPU:0", "CounterA"): [(10, 150.0), (20, 0.0)],
                                ("/device:GPU:1", "CounterB"): [(10, 250.0), (20, 0.0)]}
    assert sorted(trace.metadata["warnings"]) == [
        "skipped 1 GPU counter events whose counter_descriptor_iid names no interned descriptor, "
        "as Perfetto drops them",
        "skipped 1 GPU counter samples whose counter id their interned descriptor lacks, as Perfetto drops them"]
