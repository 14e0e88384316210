"""XLA's collective ops on the CPU backend are collectives: a 2-process JAX job on gloo
(tests/data/traces/jax_cpu_job, recorded with jax.profiler; JAX's own Chrome traces and
the program's timers are the truth). Before, XLA's CPU ops (host events of category
``xla_op``) named ``all-reduce.2`` were neither device communication nor a CPU backend's
range (``gloo:*``): no collective on either rank, so no alignment from collectives, no
straggler and no Collectives table, and the fallback spoke of "the two hosts' wall
clocks" for two processes on one host."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.collectives import collective_table
from polyprof.analyze.inputs import communication
from polyprof.ranks.align import align_ranks
from polyprof.trace.builder import TraceBuilder

DATA = Path(__file__).parent / "data" / "traces" / "jax_cpu_job"
RANKS = [DATA / f"rank{r}.xplane.pb.gz" for r in (0, 1)]
FOUR = DATA / "one_process" / "four_devices.xplane.pb.gz"


def _jax_ops(path: Path, prefix: str = "all-reduce") -> list[tuple[float, float]]:
    """(ts, dur) in µs of the ops JAX's own Chrome trace names ``prefix...``, in time order."""
    d = json.loads(gzip.decompress(path.read_bytes()))
    return sorted((e["ts"], e["dur"]) for e in d["traceEvents"] if e.get("ph") == "X" and e["name"].startswith(prefix))


def _program() -> list[dict]:
    return [json.loads(line) for line in (DATA / "program_output.jsonl").read_text().splitlines()]


def test_each_rank_has_the_all_reduces_jax_recorded():
    """6 ``all-reduce.2`` per rank in JAX's own trace: 6 collectives, numbered 0-5, with
    JAX's durations (rank 0's step-3 one waits ~105 ms for rank 1)."""
    for r in (0, 1):
        ct = collective_table(polyprof.load(RANKS[r]))
        truth = _jax_ops(DATA / "jax_own" / f"rank{r}.trace.json.gz")
        assert len(truth) == 6 and len(ct) == 6, (r, len(ct))
        assert ct["op"].tolist() == ["allreduce"] * 6 and ct["key"].tolist() == ["allreduce"] * 6
        assert np.asarray(ct["seq"]).tolist() == list(range(6)) and np.asarray(ct["host"], bool).all()
        np.testing.assert_allclose(np.asarray(ct["dur_ns"]) / 1e3, [d for _, d in truth], atol=1.0)
        # the HLO's size: the gradient of w (128 x 128 float32) and the loss (float32), combined
        assert np.asarray(ct["bytes"]).tolist() == [128 * 128 * 4 + 4] * 6
    assert max(d for _, d in _jax_ops(DATA / "jax_own" / "rank0.trace.json.gz")) > 100_000


def test_the_ranks_align_from_their_all_reduces():
    """Rank 1 on rank 0's clock from the 6 matched all-reduces; both processes read one
    host's wall clock, so the profiles' start times (the wall anchors) give the true
    offset (672 µs), which must lie within the bound."""
    rep = polyprof.load_ranks(RANKS).analyze()
    al = rep.tables["rank_alignment"]
    i = al["rank"].tolist().index(1)
    assert al["method"][i] == "collectives" and bool(al["aligned"][i]) and int(al["collectives"][i]) == 6
    walls = [polyprof.load(p).metadata["wall_anchor"]["wall_ns"] for p in RANKS]
    truth = walls[1] - walls[0]
    assert truth == 672_249
    offset, bound = int(al["offset_ns"][i]), float(al["bound_ns"][i])
    assert bound < 5e6 and abs(offset - truth) <= bound, (offset, bound, truth)


def test_the_sleeping_rank_is_the_straggler():
    """Rank 1 slept 100 ms in step 3: it is named, in step 3, and the wait it caused is
    what rank 0's own timer saw (its step 3 less its usual step)."""
    rep = polyprof.load_ranks(RANKS).analyze()
    f = next(f for f in rep.findings if f.id == "straggler")
    assert f.evidence["rank"] == 1 and f.evidence["steps"] == [3], f.evidence
    s0 = _program()[0]["step_ms"]
    waited = s0[3] - statistics.median(s0[:3] + s0[4:])
    assert abs(f.evidence["caused_wait_ns"] / 1e6 - waited) < 5.0, (f.evidence["caused_wait_ns"], waited)
    st = rep.tables["stragglers"]
    late = dict(zip(st["rank"].tolist(), np.asarray(st["late_ns"]).tolist()))
    assert late[1] > 90e6 > 5e6 > late[0], late
    cs = rep.tables["collective_stats"]
    assert cs["op"].tolist() == ["allreduce"] and int(cs["count"][0]) == 10  # steps 1-5 on 2 ranks
    assert int(cs["bytes"][0]) == 65540 and float(cs["busbw_gbps"][0]) > 0


def test_one_process_with_four_devices_has_a_collectives_table():
    """One process, 4 CPU devices: JAX's 20 ``all-reduce`` (4 per step) are the trace's
    collectives, and the summary has its Collectives table."""
    t = polyprof.load(FOUR)
    assert len(_jax_ops(DATA / "one_process" / "four_devices.trace.json.gz")) == 20
    assert communication(t) and len(collective_table(t)) == 20
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(FOUR), "--skip-first", "0"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    text = p.stdout
    assert "Collectives" in text, text
    row = next(line for line in text[text.index("Collectives"):].splitlines() if "allreduce" in line)
    assert [c.strip() for c in row.strip("│").split("│")][2] == "20", row


def test_async_halves_are_one_collective_and_passes_are_none():
    """An async op's ``-start`` and ``-done`` are one collective (start's start to done's
    end); a ``-done`` whose start was before the recording, XLA's pass names and the ops'
    ``end:`` marks are none."""
    from polyprof.trace.vocabulary import XLA_COLLECTIVE_OP  # new with the fix: the other tests run without it

    assert re.match(XLA_COLLECTIVE_OP, "all-gather-start.1") and re.match(XLA_COLLECTIVE_OP, "collective-permute")
    for name in ("all-reduce-combiner", "end: all-reduce.2", "cpu-all-reduce-combiner", "all-reduce-promotion"):
        assert not re.match(XLA_COLLECTIVE_OP, name), name
    b = TraceBuilder()
    tr = b.track(b.plane("/host:CPU", "host"), "tf_XLAEigen", "thread", tid=1)
    other = b.track(b.plane("/host:CPU", "host"), "tf_XLAEigen/2", "thread", tid=2)
    b.event(tr, "all-gather-done.1", 1_000, 500, "xla_op")  # its start not recorded
    b.event(tr, "all-gather-start.1", 10_000, 1_000, "xla_op")
    b.event(tr, "all-reduce.3", 20_000, 5_000, "xla_op")
    b.event(tr, "end: all-reduce.3", 25_000, 0, "xla_op_end")
    b.event(tr, "all-reduce-combiner", 26_000, 100, "traceme")
    b.event(other, "all-gather-done.1", 40_000, 10_000, "xla_op")
    ct = collective_table(b.build())
    assert ct["name"].tolist() == ["all-gather-start.1", "all-reduce.3"], ct["name"].tolist()
    assert ct["op"].tolist() == ["allgather", "allreduce"]
    assert np.asarray(ct["start_ns"]).tolist() == [10_000, 20_000]
    assert np.asarray(ct["end_ns"]).tolist() == [50_000, 25_000]


def _empty():
    return collective_table(TraceBuilder().build())


def test_ranks_on_one_host_are_not_said_to_be_on_two():
    """No collective on either rank: the fallback says so, and names the one host both
    read (before: "no collective matched the reference rank's: placed by the two hosts'
    wall clocks")."""
    anchors = {r: {"mono_ns": 0, "wall_ns": 10**18 + r, "uncertainty_ns": 0, "host": "vm"} for r in (0, 1)}
    msg = align_ranks({0: _empty(), 1: _empty()}, anchors, {0: True, 1: True})[1].message
    assert "two hosts" not in msg and "vm" in msg and "rank 1 recorded no collective" in msg, msg
    anchors[1]["host"] = "other"
    msg = align_ranks({0: _empty(), 1: _empty()}, anchors, {0: True, 1: True})[1].message
    assert "the two hosts' wall clocks" in msg, msg


def test_a_job_on_one_host_says_so(tmp_path):
    """End to end: two recordings of one host without collectives (a single-process JAX
    profile, twice) name that host rather than two NTP-synchronised ones."""
    src = Path(__file__).parent / "data" / "traces" / "xspace" / "jax_cpu_mlp_scan.xplane.pb"
    for r in (0, 1):
        shutil.copy(src, tmp_path / f"rank{r}.xplane.pb")
    host = polyprof.load(src).sources[0].host
    al = polyprof.load_ranks([tmp_path / f"rank{r}.xplane.pb" for r in (0, 1)]).analyze().tables["rank_alignment"]
    msg = str(al["message"][al["rank"].tolist().index(1)])
    assert host and f"one host, {host}" in msg and "NTP" not in msg, msg


def test_ranks_without_collectives_are_not_told_to_record_the_same_steps(tmp_path):
    """Two ranks that recorded no collective polyprof recognises: the not-aligned finding
    said to record the same steps on every rank, which cannot help; it says there is
    nothing to match."""
    from polyprof.ranks.traceset import load_ranks

    kineto = Path(__file__).resolve().parent / "data" / "traces" / "kineto"
    shutil.copy(kineto / "triton_example.json.gz", tmp_path / "r0.json.gz")
    shutil.copy(kineto / "cuda_event_sync_multistream.json.gz", tmp_path / "r1.json.gz")
    found = [f for f in load_ranks(str(tmp_path)).analyze(jobs=1).findings if f.id == "ranks_not_aligned"]
    assert len(found) == 1 and "recorded no collective" in found[0].evidence["message"]
    assert "nothing to match" in found[0].suggestion and "same steps" not in found[0].suggestion
