"""What the sweep over peers' Perfetto data found wrong in the Perfetto reader and the
exports (formats/perfetto_read/, writers/perfetto.py, formats/chrome.py):

- legacy TrackEvent times (``timestamp_delta_us`` / ``timestamp_absolute_us``) were put on
  the sequence's clock (BOOTTIME) instead of CLOCK_MONOTONIC, and an absolute time reset
  the delta base; Perfetto's track_event_tokenizer.cc does neither;
- a trace of nothing but a clock snapshot was refused as "not an XSpace profile";
- the Perfetto and Chrome exports lost the devices' properties, so MFU, rooflines and
  occupancy were empty after a round trip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from perfetto_text import pftrace, write_packets
from polyprof.formats.detect import detect
from polyprof.writers import perfetto

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests/data/perfetto"
P = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
TE = P.TrackEvent






def _starts(trace) -> dict[str, int]:
    return dict(zip(trace.names().tolist(), trace.events["start_ns"].tolist()))


def _warnings(trace) -> str:
    return " ".join(trace.metadata.get("warnings", []))


# ----------------------------------------------------------------------------- legacy times
def test_legacy_microsecond_times_are_on_monotonic_and_absolute_times_are_one_offs(tmp_path):
    """The sweep's repro: a snapshot reads BOOTTIME 5 s and MONOTONIC 1 s; a slice at
    BOOTTIME 5.001 s and a legacy one at MONOTONIC 1.003 s. polyprof put the legacy slice
    at -2.997 s (its µs read as BOOTTIME); Perfetto puts it 2 ms after the other."""
    snap = P.ClockSnapshot(clocks=[P.ClockSnapshot.Clock(clock_id=6, timestamp=5_000_000_000),  # BOOTTIME
                                   P.ClockSnapshot.Clock(clock_id=3, timestamp=1_000_000_000)])  # MONOTONIC
    thread = P.ThreadDescriptor(pid=1, tid=2, thread_name="main", reference_timestamp_us=1_002_000,
                                reference_thread_time_us=10)
    cleared = P.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    packets = [
        P.TracePacket(timestamp=0, clock_snapshot=snap),
        P.TracePacket(trusted_packet_sequence_id=1, track_descriptor=P.TrackDescriptor(
            uuid=9, thread=P.ThreadDescriptor(pid=1, tid=3, thread_name="boot"))),
        P.TracePacket(trusted_packet_sequence_id=1, timestamp=5_001_000_000,  # BOOTTIME, the default
                      track_event=TE(type=TE.TYPE_SLICE_BEGIN, track_uuid=9, name="boottime_slice")),
        P.TracePacket(trusted_packet_sequence_id=1, timestamp=5_002_000_000,
                      track_event=TE(type=TE.TYPE_SLICE_END, track_uuid=9)),
        P.TracePacket(trusted_packet_sequence_id=2, sequence_flags=cleared, thread_descriptor=thread),
        P.TracePacket(trusted_packet_sequence_id=2, track_event=TE(
            type=TE.TYPE_SLICE_BEGIN, name="legacy_us_slice", timestamp_delta_us=1000, thread_time_delta_us=5)),
        # a one-off absolute time (and thread time): the deltas still run from 1.003 s (and 15 µs)
        P.TracePacket(trusted_packet_sequence_id=2, track_event=TE(
            type=TE.TYPE_INSTANT, name="absolute", timestamp_absolute_us=1_003_500, thread_time_absolute_us=100)),
        # the legacy field wins over the packet's timestamp, as in Perfetto's tokenizer
        P.TracePacket(trusted_packet_sequence_id=2, timestamp=7, track_event=TE(
            type=TE.TYPE_SLICE_END, timestamp_delta_us=1000, thread_time_delta_us=1)),
    ]
    trace = polyprof.load(write_packets(tmp_path, packets))
    assert _starts(trace) == {"boottime_slice": 1_001_000_000, "legacy_us_slice": 1_003_000_000,
                              "absolute": 1_003_500_000}
    dur = dict(zip(trace.names().tolist(), trace.events["dur_ns"].tolist()))
    assert dur["legacy_us_slice"] == 1_000_000
    c = trace.counters
    assert c["value"].tolist() == [15_000.0, 100_000.0, 16_000.0]  # thread time, ns
    assert "clock" not in _warnings(trace)


def test_delta_times_need_a_thread_descriptor_since_the_last_clear_or_loss(tmp_path):
    """As Perfetto's TrackEventSequenceState: the delta base is set by a thread descriptor
    and lost with a clear or a dropped packet; a thread descriptor that comes while the
    state is lost is not taken; events timed by deltas meanwhile are skipped (counted)."""
    ev = dict(type=TE.TYPE_INSTANT, timestamp_delta_us=10)
    thread = P.ThreadDescriptor(pid=1, tid=2, reference_timestamp_us=100)
    packets = [
        P.TracePacket(trusted_packet_sequence_id=1, track_event=TE(name="no base yet", **ev)),
        P.TracePacket(trusted_packet_sequence_id=1, thread_descriptor=thread),
        P.TracePacket(trusted_packet_sequence_id=1, track_event=TE(name="a", **ev)),
        P.TracePacket(trusted_packet_sequence_id=1, incremental_state_cleared=True),
        P.TracePacket(trusted_packet_sequence_id=1, track_event=TE(name="after a clear", **ev)),
        P.TracePacket(trusted_packet_sequence_id=1, thread_descriptor=thread),
        P.TracePacket(trusted_packet_sequence_id=1, track_event=TE(name="b", **ev)),
        P.TracePacket(trusted_packet_sequence_id=1, previous_packet_dropped=1, track_event=TE(name="lost", **ev)),
        P.TracePacket(trusted_packet_sequence_id=1, thread_descriptor=thread),  # state unknown: not taken
        P.TracePacket(trusted_packet_sequence_id=1, track_event=TE(name="still lost", **ev)),
        P.TracePacket(trusted_packet_sequence_id=1, track_event=TE(name="absolute", type=TE.TYPE_INSTANT,
                                                                  timestamp_absolute_us=7)),
    ]
    trace = polyprof.load(write_packets(tmp_path, packets))
    assert _starts(trace) == {"a": 110_000, "b": 110_000, "absolute": 7_000}
    w = _warnings(trace)
    assert "skipped 4 track events with delta times and no thread descriptor" in w
    assert "skipped 1 thread descriptors while incremental state was lost" in w


@pytest.mark.parametrize("name, want", [
    # Perfetto: "good" at 999999 and 1000001, on the snapshots' primary clock MONOTONIC_RAW;
    # polyprof's reference clock is CLOCK_MONOTONIC, which the same snapshots put 1 ns away
    ("track_event_absolute_timestamp_us_overflow", 1_000_000),
    ("streaming_profile_timestamp_delta_overflow", 1_000_000),
    ("track_event_delta_timestamp_addition_overflow", 1_000_000),  # no snapshot: as Perfetto
])
def test_perfettos_legacy_time_overflow_traces_give_one_good_slice(name, want, tmp_path):
    """Perfetto's diff tests (parser/track_event/tests.py): one slice, ``good``; the
    sentinel whose time is negative (an absolute time near INT64_MIN, a delta base run
    below zero by stack samples' deltas or by a negative delta) is dropped. polyprof
    warned "clock 6 is in no clock snapshot" (legacy times read on BOOTTIME) and kept
    the streaming-profile sentinel at 0."""
    trace = polyprof.load(pftrace(name, tmp_path))
    assert _starts(trace) == {"good": want}
    w = _warnings(trace)
    assert "skipped 1 track events with a negative time" in w
    assert "clock" not in w


# ----------------------------------------------------------------------------- sniffing
def test_a_trace_of_only_a_clock_snapshot_is_perfetto(tmp_path):
    """Perfetto's tables test_clock_snapshot_table_multiplier: one packet, a clock
    snapshot and nothing else (18 bytes). polyprof refused it: "protobuf whose planes have
    no names: not an XSpace profile"; it is a Perfetto trace with nothing polyprof reads."""
    snap = P.ClockSnapshot(clocks=[P.ClockSnapshot.Clock(clock_id=1, timestamp=42, unit_multiplier_ns=10),
                                   P.ClockSnapshot.Clock(clock_id=6, timestamp=0)])
    f = write_packets(tmp_path, [P.TracePacket(clock_snapshot=snap)], "trace.bin")
    assert f.stat().st_size == 18
    assert detect(f) == "perfetto"
    t = polyprof.load(f)
    said = [w for w in t.metadata["warnings"] if w.startswith("nothing polyprof reads")]
    assert t.n_events == 0 and said
    # the snapshot is all it holds: the warning does not say it holds ftrace or power data
    assert "hold other data" not in said[0] and "does not read system data" in said[0], said
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(f)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "nothing polyprof reads" in p.stdout


def test_an_xspace_plane_of_only_stats_is_not_a_clock_snapshot(tmp_path):
    """XPlane's field 6 is ``stats`` (TracePacket's is the snapshot): an XStat's field 1
    (metadata id) is a varint, a snapshot's (its clocks) length-delimited."""
    from polyprof.formats import xplane_pb2 as X

    for stats in ([X.XStat(metadata_id=1, str_value="x")], [X.XStat(str_value="only a string")],
                  [X.XStat(metadata_id=2, uint64_value=7), X.XStat(metadata_id=3, double_value=0.5)]):
        f = tmp_path / "plane.xplane.pb"
        f.write_bytes(X.XSpace(planes=[X.XPlane(stats=stats)]).SerializeToString())
        assert detect(f) != "perfetto"


# ----------------------------------------------------------------------------- device properties
MI250 = ROOT / "tests/data/traces/kineto/mi250_rocm_minitoy.json.gz"


def _summary(path: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(path)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _mfu(doc: dict) -> list[tuple]:
    return [(r["device"], r["peak_flops_per_s"]) for r in doc["tables"]["mfu"]["records"]]


@pytest.mark.parametrize("fmt, name", [("perfetto", "mi250.pftrace"), ("chrome", "mi250.json")])
def test_exports_keep_the_devices_properties(fmt, name, tmp_path):
    """HTA's MI250 trace exported and read back: the GPU's properties (model, CUs as
    numSms...) are on its plane again, so MFU keeps its device and peak and the findings
    that need them (low_mfu, fusable_chain) stay; before, mfu.device was '' and
    peak_flops_per_s null after the round trip."""
    trace = polyprof.load(MI250)
    out = polyprof.formats.registry.write(trace, tmp_path / name, format=fmt)
    back = polyprof.load(out)
    gpu = {p.name: p for p in trace.planes if p.kind == "device"}
    got = {p.name: p for p in back.planes if p.kind == "device"}
    assert list(got) == list(gpu) == ["/device:GPU:2"]
    for k in ("name", "numSms", "totalGlobalMem", "warpSize", "maxThreadsPerMultiprocessor"):
        assert got["/device:GPU:2"].properties[k] == gpu["/device:GPU:2"].properties[k], k
    assert got["/device:GPU:2"].vendor == "AMD"
    a, b = _summary(MI250), _summary(out)
    assert _mfu(b) == _mfu(a) and _mfu(a)[0][0].startswith("AMD Instinct MI250")
    ids = sorted(f["id"] for f in a["findings"])
    assert {"low_mfu", "fusable_chain"} <= set(ids)
    assert sorted(f["id"] for f in b["findings"]) == ids


def test_the_perfetto_exports_device_metadata_is_perfettos_chrome_metadata(tmp_path):
    """What Perfetto's tools read: one ``chrome_events`` packet whose ``ChromeMetadata``
    entries (Perfetto's trace processor shows them as ``cr-<name>`` metadata) hold JSON."""
    trace = polyprof.load(MI250)
    msg = P.Trace.FromString(perfetto.write(trace, tmp_path / "t.pftrace").read_bytes())
    bundles = [p.chrome_events for p in msg.packet if p.HasField("chrome_events")]
    assert len(bundles) == 1
    entries = {m.name: json.loads(m.json_value) for m in bundles[0].metadata}
    assert list(entries) == ["polyprof_planes", "deviceProperties", "polyprof_flow_categories"]
    assert sorted(entries["polyprof_flow_categories"]) == ["ac2g", "fwdbwd"]  # Kineto's, numbered in the ids
    (plane,) = entries["polyprof_planes"]
    assert (plane["plane"], plane["vendor"], plane["properties"]["numSms"]) == ("/device:GPU:2", "AMD", 104)
    assert entries["deviceProperties"] == trace.metadata["deviceProperties"]  # the 4 GPUs Kineto listed
    assert polyprof.load(tmp_path / "t.pftrace").metadata["deviceProperties"] == trace.metadata["deviceProperties"]
    # a trace without devices or flow categories writes its process groups alone
    cpu = polyprof.load(ROOT / "tests/data/traces/kineto/cpu_only_rank34.json.gz")
    assert not len(cpu.flows["src"])
    msg = P.Trace.FromString(perfetto.write(cpu, tmp_path / "c.pftrace").read_bytes())
    (bundle,) = [p.chrome_events for p in msg.packet if p.HasField("chrome_events")]
    assert [m.name for m in bundle.metadata] == ["distributedInfo"]
    assert polyprof.load(tmp_path / "c.pftrace").metadata["distributedInfo"] == cpu.metadata["distributedInfo"]
