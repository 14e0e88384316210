"""Ranks without collectives placed by every reader's wall anchor, and the headline and
finding when the fallback's methods mix.

The ranks' anchors live on their sources (``Source.clock["wall_anchor"]``, the clock
service's place: docs/clock-sync.md); the Perfetto reader puts one there from a clock
snapshot that read CLOCK_REALTIME with the trace's clock, and nowhere else. The Perfetto
rank here is Perfetto's own test trace ``tests/data/perfetto/track_event_tracks.textproto``
(Apache-2.0, ``LICENSE-PERFETTO``) with the clock snapshot traced writes at a trace's
start put in front; the Kineto rank is HTA's real ``mi250_rocm_minitoy`` (MIT,
``tests/data/traces/LICENSE-HTA``), whose times are the wall clock.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

from perfetto_text import pftrace

import polyprof
from polyprof.ranks.result import anchor_of

DATA = Path(__file__).resolve().parent / "data"
KINETO = DATA / "traces" / "kineto" / "mi250_rocm_minitoy.json.gz"
BOOT = 5_000_000_000_000  # BOOTTIME at the snapshot
MONO = BOOT - 1_000  # MONOTONIC read with it (the reader's target clock)
WALL = 1_796_000_000_000_000_000  # REALTIME read with it


def _perfetto(tmp_path: Path, path: Path, realtime: bool = True) -> Path:
    """Perfetto's track-event test trace with a clock snapshot first (its packets' times
    are BOOTTIME, the trace's default clock); ``realtime``: the snapshot read the wall
    clock too."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as P  # the perfetto package's protos

    src = pftrace("track_event_tracks", tmp_path)
    msg = P.Trace.FromString(src.read_bytes())
    snap = P.TracePacket(trusted_packet_sequence_id=99, clock_snapshot=P.ClockSnapshot(clocks=[
        P.ClockSnapshot.Clock(clock_id=6, timestamp=BOOT), P.ClockSnapshot.Clock(clock_id=3, timestamp=MONO),
        *([P.ClockSnapshot.Clock(clock_id=1, timestamp=WALL)] if realtime else [])]))
    out = P.Trace()
    out.packet.extend([snap, *msg.packet])
    path.write_bytes(out.SerializeToString())
    return path


def _alignment(rep) -> dict[int, dict]:
    return {int(r["rank"]): r for r in rep.tables["rank_alignment"].to_pandas().to_dict("records")}


def _summary(path: Path) -> str:
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "COLUMNS": "400"})
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_perfetto_ranks_clock_snapshot_is_its_wall_anchor(tmp_path):
    """The anchor is read from the source, where the Perfetto reader put it (before: only
    the trace's metadata was read, and a Perfetto rank had none)."""
    t = polyprof.load(_perfetto(tmp_path, tmp_path / "a.pftrace"))
    assert t.sources[0].clock["wall_anchor"] == {"mono_ns": MONO, "wall_ns": WALL, "uncertainty_ns": 0}
    assert "wall_anchor" not in t.metadata
    assert anchor_of(t) == ({"mono_ns": MONO, "wall_ns": WALL, "uncertainty_ns": 0}, True)
    assert anchor_of(polyprof.load(_perfetto(tmp_path, tmp_path / "b.pftrace", realtime=False))) == (None, True)


def test_a_kineto_and_a_perfetto_rank_line_up_on_the_wall_clock(tmp_path):
    """Rank 1 (Perfetto) moves onto rank 0's wall clock by its snapshot: its offset is
    REALTIME - MONOTONIC of the snapshot (before: offset 0, method "own clock", and the
    summary said rank 1 had no wall-clock anchor)."""
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(KINETO, job / "rank0.json.gz")
    _perfetto(tmp_path, job / "rank1.pftrace")
    one = _alignment(polyprof.load_ranks(job).analyze("serial"))[1]
    assert one["method"] == "wall anchors" and not one["aligned"] and math.isnan(one["bound_ns"]), one
    assert int(one["offset_ns"]) == WALL - MONO, one
    head = _summary(job).splitlines()[0]
    assert "rank 1 is placed by its wall-clock anchor" in head and "no wall-clock anchor" not in head, head


def test_mixed_fallback_methods_are_each_named_with_their_ranks(tmp_path):
    """A Kineto rank, a Perfetto rank with a wall anchor and one without: the headline
    says which ranks each method placed, the finding's advice covers both, ranks in
    ascending order (before: the headline said "each rank is placed by its wall-clock
    anchor; each rank's times are as it recorded them ... (no wall-clock anchor)", the
    advice was the first rank's method's only)."""
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(KINETO, job / "rank0.json.gz")
    _perfetto(tmp_path, job / "rank1.pftrace")
    _perfetto(tmp_path, job / "rank2.pftrace", realtime=False)
    rep = polyprof.load_ranks(job).analyze("serial")
    al = _alignment(rep)
    assert (al[1]["method"], al[2]["method"]) == ("wall anchors", "own clock"), al
    assert "rank 2 has no wall-clock anchor" in al[2]["message"], al[2]["message"]
    f = next(f for f in rep.findings if f.id == "ranks_not_aligned")
    assert f.evidence["ranks"] == [1, 2] and f.evidence["methods"] == {"wall anchors": [1], "own clock": [2]}
    assert f.evidence["message"] == (  # (was rank 1's message alone: "rank 1 recorded no collective: placed by...")
        "ranks 1-2 recorded no collective; rank 1: placed by the ranks' wall-clock anchors (bound unknown); rank 2: "
        "times kept as recorded, on each rank's own clock (rank 2 has no wall-clock anchor to place it by), so how "
        "the ranks line up in time is unknown"), f.evidence["message"]
    assert f.suggestion == (
        "Cross-rank timing for rank 1 rests on their wall-clock anchors (when each session started, on its "
        "host's clock); Cross-rank timing for rank 2 has nothing to rest on: each rank's times count from its "
        "own start, with no wall-clock anchor to line the ranks up by; ranks 1-2 recorded no collective polyprof "
        "recognises (communication kernels, gloo or MPI ranges, XLA collective ops), so there is nothing to "
        "match."), f.suggestion
    head = _summary(job).splitlines()[0]
    assert head.endswith("not aligned: ranks 1-2 recorded no collective, so rank 1 is placed by its wall-clock "
                         "anchor; rank 2 keeps its times as recorded, on its own clock (no wall-clock anchor)"), head


def test_the_not_aligned_findings_message_names_every_rank_it_holds_for(tmp_path):
    """Two Perfetto ranks with wall anchors beside a Kineto rank: the finding's evidence
    said "rank 1 recorded no collective: placed by ..." for ranks 1 and 2 (the first
    rank's message stood for all); it names both ranks, once, where they share the
    reason and the placement."""
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(KINETO, job / "rank0.json.gz")
    for r in (1, 2):
        _perfetto(tmp_path, job / f"rank{r}.pftrace")
    f = next(f for f in polyprof.load_ranks(job).analyze("serial").findings if f.id == "ranks_not_aligned")
    assert f.evidence["ranks"] == [1, 2], f.evidence
    assert f.evidence["message"] == ("ranks 1-2 recorded no collective: placed by the ranks' wall-clock anchors "
                                     "(bound unknown)"), f.evidence["message"]
