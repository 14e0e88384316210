"""Sources in the trace layer: ranks and processes stay apart when traces merge, and the
clock service's one-sided fits and retiming (trace/clock.py)."""

from __future__ import annotations

import gzip
import json

import numpy as np

import polyprof
from polyprof.derive.correlate import correlate
from polyprof.trace import clock
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.merge import merge


def _raw_counts(path):
    """Per-file counts from the raw JSON with the stdlib: complete events and kernels."""
    ev = json.load(gzip.open(path))["traceEvents"]
    return sum(1 for e in ev if e.get("ph") == "X"), sum(1 for e in ev if e.get("cat") == "kernel")


def test_two_real_ranks_load_as_two_sources_with_their_own_planes(traces_dir):
    p0, p1 = (traces_dir / "kineto" / f"sampled_rank{r}.json.gz" for r in (0, 1))
    t0, t1 = polyprof.load(p0), polyprof.load(p1)
    assert [s.rank for s in t0.sources] == [0] and t0.sources[0].label == p0.name
    m = merge([t0, t1])
    assert [(s.rank, s.label) for s in m.sources] == [(0, p0.name), (1, p1.name)]
    # each rank keeps its own metadata (the merged top level keeps only the first)
    assert [s.metadata["distributedInfo"]["rank"] for s in m.sources] == [0, 1]
    # planes: rank 0's and rank 1's host planes are both /host:CPU, and stay two
    by_source = {s.id: sorted(p.name for p in m.planes if p.source == s.id) for s in m.sources}
    assert by_source[0] == sorted(p.name for p in t0.planes)
    assert by_source[1] == sorted(p.name for p in t1.planes)
    assert sum(p.name == "/host:CPU" for p in m.planes) == 2
    # every event stays with its rank: the same counts per source as per file
    es = m.event_sources()
    for sid, path in ((0, p0), (1, p1)):
        n_x, n_kernels = _raw_counts(path)
        assert (es == sid).sum() == polyprof.load(path).n_events
        kernels = (m.categories() == "kernel") & (es == sid)
        assert kernels.sum() == n_kernels
    # no device activity of one rank is attributed to a launch or op of the other
    c = correlate(m)
    ok = c.launch >= 0
    assert ok.sum() > 0
    assert (es[c.device_rows[ok]] == es[c.launch[ok]]).all()
    has_op = c.op >= 0
    assert (es[c.device_rows[has_op]] == es[c.op[has_op]]).all()
    # and the merged trace matches exactly as many as the two files alone
    alone = correlate(t0).counts["matched_by_correlation_id"] + correlate(t1).counts["matched_by_correlation_id"]
    assert c.counts["matched_by_correlation_id"] == alone


def test_same_device_name_on_two_ranks_is_two_planes_and_ids_do_not_cross(traces_dir):
    """The same file as two ranks: identical correlation ids on both sides must still
    pair each kernel with its own rank's launch."""
    path = traces_dir / "kineto" / "a100_alexnet_small.json.gz"
    t0, t1 = polyprof.load(path), polyprof.load(path)
    t1.sources[0].rank, t1.sources[0].label = 1, "copy"
    m = merge([t0, t1])
    gpu = [p for p in m.planes if p.name.startswith("/device:GPU")]
    assert len(gpu) == 2 * sum(p.name.startswith("/device:GPU") for p in t0.planes)
    c = correlate(m)
    es = m.event_sources()
    ok = c.launch >= 0
    assert ok.sum() == 2 * (correlate(t0).launch >= 0).sum()
    assert (es[c.device_rows[ok]] == es[c.launch[ok]]).all()


def test_plugin_parts_of_one_session_stay_one_source():
    parts = []
    for name in ("a", "b"):
        b = TraceBuilder()
        tr = b.track(b.plane("/host:CPU"), "main", tid=1)
        b.event(tr, name, 10, 5)
        parts.append(b.build())
    m = merge(parts)
    assert len(m.sources) == 1 and [p.name for p in m.planes] == ["/host:CPU"]


def test_native_file_keeps_sources(tmp_path, traces_dir):
    t0 = polyprof.load(traces_dir / "kineto" / "sampled_rank0.json.gz")
    t1 = polyprof.load(traces_dir / "kineto" / "sampled_rank1.json.gz")
    m = merge([t0, t1])
    back = polyprof.load(m.save(tmp_path / "two.polyprof"))
    assert [(s.rank, s.label) for s in back.sources] == [(s.rank, s.label) for s in m.sources]
    assert [p.source for p in back.planes] == [p.source for p in m.planes]


def test_live_session_names_its_source(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    with polyprof.profile(plugins=["host"]) as prof:
        with polyprof.section("x"):
            pass
    s = prof.trace.sources[0]
    assert s.rank == 3 and s.pid > 0 and s.host and "wall_anchor" in s.clock


# ----------------------------------------------------------------------------- clock service
def test_fit_bounds_recovers_an_offset_from_overlapping_intervals():
    """Intervals seen on two clocks that must overlap (a collective on two ranks): the
    true offset lies in the feasible set, and the estimate is within the bound of it."""
    rng = np.random.default_rng(1)
    truth = 3_217_000  # other + truth = host
    s_host = np.sort(rng.integers(0, 10**9, 40))
    dur_host = rng.integers(5_000, 200_000, 40)
    late = rng.integers(0, 4_000, 40)  # the other side arrives late, ends together
    s_other = s_host + late - truth
    e_other = s_host + dur_host - truth
    f = clock.fit_bounds(e_other, s_host, s_other, s_host + dur_host, max_drift_ppm=100,
                         method="collectives", prefer_offset_ns=int(np.median((s_host + dur_host) - e_other)))
    assert f.consistent and f.method == "collectives"
    assert abs(f.offset_ns - truth) <= f.bound_ns
    assert f.offset_ns == truth  # ends together: the preferred line is exact here
    # with drift allowed (up to 100 ppm over the second they span) the bound is wider
    # than the narrowest interval, and still a guarantee; without drift it is that interval
    assert 0 < f.bound_ns < 100_000
    f0 = clock.fit_bounds(e_other, s_host, s_other, s_host + dur_host, max_drift_ppm=0,
                          prefer_offset_ns=truth)
    assert f0.offset_ns == truth and f0.bound_ns <= dur_host.min() + 2  # +2: rounding


def test_fit_bounds_without_a_common_line_says_so():
    f = clock.fit_bounds([0], [100], [0], [50])  # must map after 100 and before 50
    assert not f.consistent and "no common line" in f.message


def test_retime_moves_one_source_only_and_records_the_fit():
    parts = []
    for r in (0, 1):
        b = TraceBuilder()
        b.source(rank=r, label=f"r{r}")
        tr = b.track(b.plane("/host:CPU", source=0), "main", tid=1)
        b.event(tr, "step", 1_000, 10)
        b.counter(0, "loss", [1_000], [1.0])
        parts.append(b.build())
    m = merge(parts)
    clock.retime(m, clock.constant(500, 20, "test"), source=1)
    assert m.start_ns.tolist() == [1_000, 1_500]
    assert sorted(m.counters["ts_ns"].tolist()) == [1_000, 1_500]
    assert m.sources[1].clock["alignment"]["offset_ns"] == 500 and "alignment" not in m.sources[0].clock


def test_from_anchors_maps_monotonic_clocks_through_wall_time():
    a = {"mono_ns": 1_000, "wall_ns": 10**18 + 5_000, "uncertainty_ns": 3}
    b = {"mono_ns": 7_000, "wall_ns": 10**18 + 5_000, "uncertainty_ns": 4}
    f = clock.from_anchors(a, b)
    assert f.to_host(np.array([1_000]))[0] == 7_000 and f.bound_ns == 7
