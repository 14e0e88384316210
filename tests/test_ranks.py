"""Many ranks of one job: identity, alignment from collectives with a bound, stragglers,
collective statistics, per-rank tables (issue 12). Ranks are made from real traces with
known truth (tests/rankmaker.py: clock offsets and a late rank injected with the stdlib)."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import polyprof
from polyprof.ranks import load_ranks
from rankmaker import make_ranks

OFFSETS = [0, 3_500_000, -2_250_000, 7_000_123]  # ns added to each rank's clock
LATE_RANK, LATE_US = 2, 400.0


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory, traces_dir):
    out = tmp_path_factory.mktemp("ranks")
    return make_ranks(traces_dir / "kineto" / "a100_nccl_rank0.json.gz", out, OFFSETS, {LATE_RANK: LATE_US},
                      jitter_us=20.0)


@pytest.fixture(scope="module")
def summary_json(four_ranks):
    """Every step (the collectives are compared with the whole raw trace)."""
    return _summary(*four_ranks, "--all-steps")


def _summary(*args):
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", *map(str, args), "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _records(doc, name):
    return doc["tables"][name]["records"]


def test_every_offset_recovered_within_its_bound(summary_json):
    rows = {r["rank"]: r for r in _records(summary_json, "rank_alignment")}
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[0]["offset_ns"] == 0 and rows[0]["method"] == "reference"
    for r in (1, 2, 3):
        a = rows[r]
        assert a["method"] == "collectives" and a["aligned"] and a["collectives"] >= 15
        # offset_ns is what was added to the rank's times: minus what we injected
        assert abs(a["offset_ns"] + OFFSETS[r]) <= a["bound_ns"], a
        assert 0 < a["bound_ns"] < 1_000_000


def test_the_late_rank_is_named(summary_json):
    per_rank = {r["rank"]: r for r in _records(summary_json, "stragglers")}
    worst = max(per_rank.values(), key=lambda r: r["late_ns"])
    assert worst["rank"] == LATE_RANK
    assert worst["last_count"] >= 10
    # 400 µs late at every allreduce (15 of them; the short broadcasts less)
    assert 15 * LATE_US * 1000 * 0.9 <= worst["late_ns"]
    others = [r["late_ns"] for k, r in per_rank.items() if k != LATE_RANK]
    assert max(others) < worst["late_ns"] / 10
    found = [f for f in summary_json["findings"] if f["id"] == "straggler"]
    assert len(found) == 1 and found[0]["evidence"]["rank"] == LATE_RANK
    assert f"rank {LATE_RANK}" in found[0]["title"]


def test_per_rank_tables_carry_the_rank(summary_json, four_ranks):
    for name in ("temporal_breakdown", "kernel_breakdown", "step_stats", "op_stats"):
        t = summary_json["tables"][name]
        assert t["columns"][0] == "rank"
        assert {r["rank"] for r in t["records"]} == {0, 1, 2, 3}
    # rank 0's rows are the single-file summary's
    single = _summary(four_ranks[0], "--all-steps")["tables"]["temporal_breakdown"]["records"]
    mine = [{k: v for k, v in r.items() if k != "rank"} for r in _records(summary_json, "temporal_breakdown")
            if r["rank"] == 0]
    assert mine == single


def test_collective_stats_against_the_raw_json(summary_json, traces_dir):
    """Counts and sizes per (op, bytes) from the raw Kineto args, with the stdlib."""
    ev = json.load(gzip.open(traces_dir / "kineto" / "a100_nccl_rank0.json.gz"))["traceEvents"]
    raw = {}
    for e in ev:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            a = e["args"]
            nbytes = max(a["In msg nelems"], a["Out msg nelems"]) * {"Float": 4, "Long": 8, "Int": 4, "Half": 2, "BFloat16": 2}[a["dtype"]]
            key = (a["Collective name"], nbytes)
            raw[key] = raw.get(key, 0) + 1
    got = {(r["op"], r["bytes"]): r for r in _records(summary_json, "collective_stats")}
    assert set(got) == set(raw)
    for key, n in raw.items():
        assert got[key]["count"] == 4 * n and got[key]["ranks"] == 4
    ar = max((r for r in got.values() if r["op"] == "allreduce"), key=lambda r: r["bytes"])
    # 2 ranks in the group (the traces' "Group size"): nccl-tests' bus factor 2(n-1)/n = 1
    assert ar["busbw_gbps"] == pytest.approx(ar["algbw_gbps"])
    assert ar["algbw_gbps"] == pytest.approx(ar["bytes"] / ar["mean_ns"])


def _raw_steps_and_collectives(path):
    """(step number -> (start, end) in µs, start µs of each NCCL kernel), with the stdlib."""
    ev = json.load(gzip.open(path))["traceEvents"]
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")}
    return steps, [e["ts"] for e in ev if e.get("cat") == "kernel" and e["name"].startswith("nccl")]


def test_the_window_reaches_every_rank(four_ranks):
    """--steps picks the same steps on every rank: per-rank tables, stragglers and
    collective statistics count only that window's collectives (alignment uses all)."""
    steps, starts = _raw_steps_and_collectives(four_ranks[0])
    last = max(steps)
    lo, hi = steps[last]
    want = sum(lo <= t < hi for t in starts)
    assert 0 < want < len(starts)
    doc = _summary(*four_ranks, "--steps", f"{last}:{last + 1}")
    assert doc["overview"]["window"].startswith(f"step {last} of")
    over = {r["rank"]: r for r in _records(doc, "rank_overview")}
    assert all(o["steps"] == 1 and o["collectives"] == want for o in over.values())
    assert all(r["collectives"] == want for r in _records(doc, "stragglers"))
    assert sum(r["count"] for r in _records(doc, "collective_stats")) == 4 * want
    assert {r["rank"] for r in _records(doc, "step_stats")} == {0, 1, 2, 3}
    assert {r["step"] for r in _records(doc, "step_stats")} == {last}
    al = {r["rank"]: r for r in _records(doc, "rank_alignment")}
    assert all(al[r]["collectives"] >= len(starts) - 1 for r in (1, 2, 3))  # every collective aligns
    # the default window (warm-up step left out) is said, and holds fewer than every step
    default = _summary(*four_ranks)
    assert "first step skipped" in default["overview"]["window"]
    assert 0 < _records(default, "rank_overview")[0]["collectives"] < len(starts)


def test_two_real_sampled_ranks(traces_dir):
    paths = [traces_dir / "kineto" / f"sampled_rank{r}.json.gz" for r in (1, 0)]
    ts = load_ranks(paths)
    assert ts.ranks == [0, 1] and {e.how for e in ts.entries} == {"distributedInfo"}
    rep = ts.analyze("serial")
    tb = rep.tables["kernel_breakdown"]
    for r in (0, 1):
        alone = polyprof.analyze.kernel_breakdown(polyprof.load(paths[1 - r]))
        assert int(tb[tb["rank"] == r]["count"].sum()) == int(alone["count"].sum())
    m = ts.merged("serial")
    assert [s.rank for s in m.sources] == [0, 1]
    gpu = {(p.source, p.name) for p in m.planes if p.kind == "device"}
    assert gpu == {(0, "/device:GPU:0"), (1, "/device:GPU:1")}
    al = {r["rank"]: r for r in rep.tables["rank_alignment"].to_pandas().to_dict("records")}
    assert al[1]["method"] in ("collectives", "recorded clock")
    if not al[1]["aligned"]:
        assert math.isnan(al[1]["bound_ns"]) and al[1]["message"]


def test_rank_from_file_name_then_order(tmp_path, traces_dir):
    doc = json.load(gzip.open(traces_dir / "kineto" / "a100_alexnet_small.json.gz"))
    doc.pop("distributedInfo", None)
    for name in ("trace_rank7.json.gz", "trace_rank3.json.gz"):
        with gzip.open(tmp_path / name, "wt") as f:
            json.dump(doc, f)
    ts = load_ranks(tmp_path)
    assert ts.ranks == [3, 7] and {e.how for e in ts.entries} == {"file name"}
    assert [e.label for e in ts.entries] == ["trace_rank3.json.gz", "trace_rank7.json.gz"]
    other = tmp_path / "other"
    other.mkdir()
    for name in ("b.json.gz", "a.json.gz"):
        with gzip.open(other / name, "wt") as f:
            json.dump(doc, f)
    ts = load_ranks([other / "b.json.gz", other / "a.json.gz"])
    assert ts.ranks == [0, 1] and ts.entry(0).label == "b.json.gz" and ts.entry(0).how == "order"
    # a bare last number is a rank only when the names count the files from 0: XProf
    # names its files after the host ("34.83.195.179_6003", "chi-mi300x-013...")
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    for name in ("chi-mi300x-013.json.gz", "chi-mi300x-007.json.gz"):
        with gzip.open(hosts / name, "wt") as f:
            json.dump(doc, f)
    ts = load_ranks(hosts)
    assert ts.ranks == [0, 1] and {e.how for e in ts.entries} == {"order"}
    ts = load_ranks([hosts / "chi-mi300x-013.json.gz"])
    assert ts.ranks == [0]
    (hosts / "chi-mi300x-013.json.gz").rename(hosts / "part_1.json.gz")
    (hosts / "chi-mi300x-007.json.gz").rename(hosts / "part_0.json.gz")
    ts = load_ranks(hosts)
    assert ts.ranks == [0, 1] and {e.how for e in ts.entries} == {"file name"}


def test_executor_is_pluggable_and_results_agree(four_ranks):
    ts = load_ranks(four_ranks[:2])
    fn = polyprof.analyze.kernel_breakdown
    serial = ts.table(fn, "serial")
    with ThreadPoolExecutor(2) as ex:
        threaded = ts.table(fn, ex)
    pooled = ts.table(fn)  # the default: a process pool
    assert list(serial.columns)[0] == "rank" and set(serial["rank"]) == {0, 1}
    for other in (threaded, pooled):
        assert other.equals(serial)


def test_a_rank_without_matching_collectives_is_reported_unaligned(tmp_path, four_ranks, traces_dir):
    cpu = traces_dir / "kineto" / "mi250_rocm_minitoy.json.gz"  # no collectives at all
    rep = load_ranks([four_ranks[0], cpu]).analyze("serial")
    al = rep.tables["rank_alignment"].to_pandas().set_index("rank")
    other = [r for r in al.index if r != al.index.min()][0]
    assert not al.loc[other, "aligned"] and math.isnan(al.loc[other, "bound_ns"])
    assert "no collective" in al.loc[other, "message"]
    assert any(f.id == "ranks_not_aligned" for f in rep.findings)


def test_bad_file_among_ranks_names_the_rank(tmp_path, four_ranks):
    bad = tmp_path / "rank-9.json.gz"
    bad.write_bytes(gzip.compress(b"{not json"))
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(four_ranks[0]), str(bad)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "rank-9.json.gz" in p.stderr


def test_several_failing_ranks_name_the_first_in_rank_order(tmp_path, four_ranks):
    """With two bad ranks, which one the error named changed from run to run (the order
    they finished in); it is the first in rank order, and the others are counted (in one
    process, "not run": the tasks after a failure are not run, ranks/executor._one_by_one)."""
    bad = []
    for r in (7, 5):
        bad.append(tmp_path / f"rank-{r}.json.gz")
        bad[-1].write_bytes(gzip.compress(b"{not json"))
    seen = set()
    for _ in range(3):
        p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(four_ranks[0]), *map(str, bad), "-j", "1"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 1 and "Traceback" not in p.stderr
        seen.add(p.stderr.strip().splitlines()[-1])
    (line,) = seen
    # rank 0 names itself (distributedInfo); the unreadable files are numbered after it, in order;
    # in one process (-j 1) the ranks after a failure are not run, as a pool's not started
    assert "rank 1 (rank-7.json.gz)" in line and "rank-5" not in line and line.endswith("(1 not run)"), line


def test_terminal_summary_of_ranks(four_ranks):
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", *map(str, four_ranks), "-j", "1"],
                       capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "COLUMNS": "160"})
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "4 ranks" in out and "Clock alignment" in out and "Stragglers" in out
    assert "analysed window: steps" in out and "first step skipped" in out
    assert f"rank {LATE_RANK} is the straggler" in out


def test_trace_format_error_crosses_processes():
    import pickle

    from polyprof.errors import TraceFormatError

    e = pickle.loads(pickle.dumps(TraceFormatError("/x/rank-3.json.gz", "invalid JSON")))
    assert isinstance(e, TraceFormatError) and str(e) == "/x/rank-3.json.gz: invalid JSON" and e.path == "/x/rank-3.json.gz"


def test_analyze_only_some_tables(four_ranks):
    rep = load_ranks(four_ranks[:2]).analyze("serial", tables=["kernel_breakdown"])
    assert "kernel_breakdown" in rep.tables and "op_stats" not in rep.tables
    assert rep.tables["rank_alignment"]["aligned"].all()  # alignment always runs
    with pytest.raises(polyprof.PolyprofError, match="unknown analyses"):
        load_ranks(four_ranks[:1]).analyze("serial", tables=["nope"])


def test_a_store_of_the_ranks_is_the_same_job(tmp_path, four_ranks, summary_json):
    """`polyprof convert` then `summary STORE --json`: the very document of the rank
    files (every table, column and value, findings, overview), window included; the
    terminal summary and the HTML report of both are the same too."""
    store = tmp_path / "job.store"
    p = subprocess.run([sys.executable, "-m", "polyprof", "convert", *map(str, four_ranks), "-o", str(store)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert _summary(store, "--all-steps") == summary_json
    steps, _ = _raw_steps_and_collectives(four_ranks[0])
    last = max(steps)
    for args in (["--json", "--steps", f"{last}:{last + 1}"], []):
        env = {**__import__("os").environ, "COLUMNS": "160"}
        x, y = (subprocess.run([sys.executable, "-m", "polyprof", "summary", *map(str, src), *args],
                               capture_output=True, text=True, timeout=600, env=env)
                for src in (four_ranks, [store]))
        assert x.returncode == 0 and y.returncode == 0, (x.stderr, y.stderr)
        assert x.stdout == y.stdout, args
    assert "Clock alignment" in y.stdout and f"rank {LATE_RANK} is the straggler" in y.stdout
    pages = []
    for src, out in ((four_ranks, "files.html"), ([store], "store.html")):
        p = subprocess.run([sys.executable, "-m", "polyprof", "report", *map(str, src), "--rank", "2",
                            "-o", str(tmp_path / out)], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        pages.append((tmp_path / out).read_bytes())
    assert pages[0] == pages[1] and b"4 ranks (rank 2 in detail)" in pages[0]


def test_rank_sources_of_every_kind(tmp_path, four_ranks, traces_dir):
    """Traces in memory and a capture's log directory are ranks of a job like files: the
    same rule numbers them, and the job's report of Traces equals that of their files."""
    import shutil

    files = four_ranks[:2]
    traces = [polyprof.load(p) for p in files]
    mem = load_ranks(traces)
    assert [(e.rank, e.how) for e in mem.entries] == [(0, "distributedInfo"), (1, "distributedInfo")]
    a = load_ranks(files).analyze("serial", tables=["kernel_breakdown"])
    b = mem.analyze("serial", tables=["kernel_breakdown"])
    from polyprof.analyze.frames import column, labels

    for name in ("kernel_breakdown", "rank_alignment", "stragglers"):
        x, y = a.tables[name], b.tables[name]
        assert labels(x) == labels(y) and all(np.array_equal(column(x, c), column(y, c), equal_nan=x[c].dtype.kind == "f")
                                              for c in labels(x)), name
    run = tmp_path / "logdir" / "plugins" / "profile" / "2026_11_28"
    run.mkdir(parents=True)
    for r in (1, 0):
        shutil.copy(traces_dir / "xspace" / "tpu_inference_2.xplane.pb", run / f"host-4{r}-rank{r}.xplane.pb")
    cap = load_ranks(tmp_path / "logdir")
    assert [(e.rank, e.how, e.label) for e in cap.entries] == [(0, "file name", "host-40-rank0.xplane.pb"),
                                                                (1, "file name", "host-41-rank1.xplane.pb")]
    assert cap.load(1).sources[0].rank == 1
    # a capture's results in memory (what polyprof.capture.client.capture returns)
    from polyprof.capture.client import Captured

    data = (traces_dir / "xspace" / "tpu_inference_2.xplane.pb").read_bytes()
    got = load_ranks([Captured("10.0.0.7:6009", data=data), Captured("10.0.0.8:6009", data=data)])
    assert [(e.rank, e.how, e.label) for e in got.entries] == [(0, "order", "10.0.0.7:6009"),
                                                                (1, "order", "10.0.0.8:6009")]
    assert got.load(0).n_events == cap.load(0).n_events
    with pytest.raises(polyprof.PolyprofError, match="capture of 10.0.0.9:1 failed: refused"):
        load_ranks([Captured("10.0.0.9:1", error="refused")])
    with pytest.raises(polyprof.PolyprofError, match="not a rank of a job"):
        load_ranks([object()])


def test_default_pool_forks_only_without_threads(four_ranks):
    """Forking a process with threads is unsafe: then the workers come from a fork server."""
    import threading

    from polyprof.ranks.executor import LocalPool

    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        ex = LocalPool(2)
        try:
            assert ex.start_method == "forkserver"
            assert ex.submit(len, "abc").result(timeout=120) == 3
        finally:
            ex.shutdown()
    finally:
        stop.set()
        t.join()
    if threading.active_count() == 1:
        ex = LocalPool(2)
        try:
            assert ex.start_method == "fork"
            rep = load_ranks(four_ranks[:2]).analyze(ex, tables=["kernel_breakdown"])
            assert set(rep.tables["kernel_breakdown"]["rank"]) == {0, 1}
        finally:
            ex.shutdown()


def test_subpackages_are_attributes_in_a_fresh_interpreter():
    """`polyprof.analyze.kernel_breakdown` as the docs write it, with nothing imported first."""
    p = subprocess.run([sys.executable, "-c", "import polyprof; print(polyprof.analyze.kernel_breakdown.__name__)"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "kernel_breakdown", p.stderr


def test_recorded_sequence_numbers_match_across_a_missing_collective(tmp_path, traces_dir):
    """With PyTorch's ``Seq`` on the collectives, a collective missing from one rank's
    trace in the middle does not shift the matching of the ones after it (ordered by
    position, every later one would pair with its neighbour's)."""
    paths = make_ranks(traces_dir / "kineto" / "a100_nccl_rank0.json.gz", tmp_path, OFFSETS[:3],
                       {LATE_RANK: LATE_US}, jitter_us=20.0)
    dropped = None
    for r, p in enumerate(paths):
        doc = json.load(gzip.open(p))
        ev = doc["traceEvents"]
        coll = sorted((e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                      key=lambda e: e["ts"])
        for seq, e in enumerate(coll):  # one counter per process group, as torch numbers them
            e["args"]["Seq"] = seq
        if r == 1:
            dropped = coll[8]
            ev.remove(dropped)
        with gzip.open(p, "wt") as f:
            json.dump(doc, f)
    rep = load_ranks(paths).analyze("serial", window=None)
    al = rep.tables["rank_alignment"].to_pandas().set_index("rank")
    for r in (1, 2):
        assert al.loc[r, "aligned"] and "Seq" in al.loc[r, "message"]
        assert abs(al.loc[r, "offset_ns"] + OFFSETS[r]) <= al.loc[r, "bound_ns"] < 1_000_000
    assert al.loc[1, "collectives"] == len(coll) - 1 and al.loc[2, "collectives"] == len(coll)
    per_coll = rep.tables["straggler_collectives"]
    gap = per_coll.take(per_coll["seq"] == 8)
    assert len(gap) == 1 and gap["ranks"][0] == 2  # the dropped one: ranks 0 and 2 only
    worst = rep.tables["stragglers"].to_pandas().sort_values("late_ns").iloc[-1]
    assert worst["rank"] == LATE_RANK and worst["last_count"] >= 10


def test_a_collective_missing_mid_trace_without_seq(tmp_path, traces_dir):
    """Ordered by position only, a collective missing in the middle of one rank's trace
    moves every later pairing by one: the pairs are taken where the ends agree instead."""
    paths = make_ranks(traces_dir / "kineto" / "a100_nccl_rank0.json.gz", tmp_path, OFFSETS[:3],
                       {LATE_RANK: LATE_US}, jitter_us=20.0)
    doc = json.load(gzip.open(paths[1]))
    coll = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                  key=lambda e: e["ts"])
    doc["traceEvents"].remove(coll[8])
    with gzip.open(paths[1], "wt") as f:
        json.dump(doc, f)
    rep = load_ranks(paths).analyze("serial", window=None)
    al = rep.tables["rank_alignment"].to_pandas().set_index("rank")
    for r in (1, 2):
        assert al.loc[r, "aligned"]
        assert abs(al.loc[r, "offset_ns"] + OFFSETS[r]) <= al.loc[r, "bound_ns"] < 1_000_000
    assert al.loc[1, "collectives"] == len(coll) - 1 and "1 collective(s) without a match" in al.loc[1, "message"]
    assert al.loc[2, "collectives"] == len(coll) and al.loc[2, "message"] == ""
    per_rank = rep.tables["stragglers"].to_pandas().set_index("rank")
    assert per_rank["late_ns"].idxmax() == LATE_RANK and per_rank.loc[LATE_RANK, "last_count"] >= 10
    assert per_rank.loc[1, "collectives"] == len(coll) - 1  # every later one with its own, not its neighbour
    assert per_rank.loc[1, "late_ns"] < per_rank.loc[LATE_RANK, "late_ns"] / 10


def test_per_event_tables_stay_with_their_rank(summary_json, four_ranks):
    """The job gathers summaries: launch_stats (a row per device activity) is left with
    the rank and named; its summary is gathered; asked for, it comes with a rank column."""
    from polyprof.analyze.registry import PER_EVENT

    assert PER_EVENT == ("launch_stats", "critical_path", "cupti_counters")
    assert "launch_stats" not in summary_json["tables"]
    assert summary_json["overview"]["per_event_tables_left_with_ranks"] == ["launch_stats", "critical_path", "cupti_counters"]
    assert {r["rank"] for r in _records(summary_json, "launch_summary")} == {0, 1, 2, 3}
    rep = load_ranks(four_ranks[:2]).analyze("serial", tables=["launch_stats"], window=None)
    single = polyprof.analyze.launch_stats(polyprof.load(four_ranks[1]))
    got = rep.tables["launch_stats"]
    assert list(got.columns) == ["rank", *single.columns]
    assert (got["rank"] == 1).sum() == len(single) > 1000


def _freeze_count(trace) -> int:
    import gc

    return gc.get_freeze_count()


def test_fork_workers_start_with_a_frozen_heap_and_the_parent_does_not_keep_it(four_ranks):
    """Workers forked by the default pool (two ranks of ~1.5 MB: a small job, so two
    workers asked for) never walk the inherited heap in their collections (gc.freeze
    before fork); the calling process gets its heap back."""
    import gc
    import threading

    if threading.active_count() > 1:
        pytest.skip("this process has threads: the pool uses a fork server")
    assert gc.get_freeze_count() == 0
    counts = load_ranks(four_ranks[:2]).map(_freeze_count, jobs=2)
    assert all(c > 10_000 for c in counts.values()), counts
    assert gc.get_freeze_count() == 0


def _pid(trace) -> int:
    import os

    return os.getpid()


def test_a_small_job_runs_in_this_process_and_a_larger_one_on_the_pool(four_ranks, monkeypatch):
    """By default the ranks of a job too small for a pool to pay for its fork
    (``small_job``: under ``POOL_COST_BYTES / (1 - 1/workers)`` of files) are worked on
    here, with no reader ahead and no pool (forking them cost a 2-rank summary of 0.12 MB
    files 40% more CPU and more wall time); above it, or with ``jobs`` given, the pool's
    workers do the work. More workers save more, so the limit falls with them."""
    import os

    from polyprof.ranks import executor

    paths = four_ranks[:2]
    total = sum(p.stat().st_size for p in paths)
    monkeypatch.setattr(executor, "POOL_COST_BYTES", total // 2 + 1)  # two workers: under 2x that is small
    assert executor.small_job(paths, 2) and executor.small_job(paths, 1)
    assert not executor.small_job([*paths, paths[0], paths[1]], 4)  # four workers: the limit is 4/3 of it
    assert not executor.small_job([*paths, None], 2)  # a rank not read from a file
    if executor.cores() > 1:
        assert not executor.worth_reading_ahead(paths)
        assert set(load_ranks(paths).map(_pid).values()) == {os.getpid()}
    assert os.getpid() not in load_ranks(paths).map(_pid, jobs=2).values()
    monkeypatch.setattr(executor, "POOL_COST_BYTES", total // 2)
    assert not executor.small_job(paths, 2)
    if executor.cores() > 1:  # the default pool: one worker per core
        assert os.getpid() not in load_ranks(paths).map(_pid).values()


def test_one_worker_per_core_the_process_may_run_on(four_ranks):
    """The default pool's "one worker per core" counts the cores the process is pinned to
    (a container's cpuset, ``taskset``), not the machine's: pinned to one core, a job of
    four ranks, however large, runs in the process itself."""
    code = ("import os\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "from pathlib import Path\nfrom polyprof.ranks import executor\n"
            "executor.POOL_COST_BYTES = 1\n"
            f"paths = [Path(p) for p in {[str(p) for p in four_ranks]!r}]\n"
            "print(executor.cores(), executor.small_job(paths), type(executor.local_pool(None, 4)).__name__)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "True", "SerialExecutor"]


def test_summary_of_ranks_imports_no_store_writer_and_no_bar_off_a_terminal(four_ranks):
    """Telling trace files from a store must not import pyarrow.parquet (~10-60 ms), nor
    a progress bar nobody sees rich (~30 ms): stderr is a pipe here."""
    code = ("import sys\nfrom polyprof.cli import main\n"
            f"rc = main(['summary', {str(four_ranks[0])!r}, {str(four_ranks[1])!r}, '--json', '-j', '2'])\n"
            "print(rc, 'pyarrow.parquet' in sys.modules, 'rich.progress' in sys.modules, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
    assert p.stderr.decode().split()[-3:] == ["0", "False", "False"], p.stderr
    assert json.loads(p.stdout)["overview"]["ranks"] == 2


def test_seq_on_record_param_comms_alone_reaches_its_kernel(tmp_path, traces_dir):
    """PyTorch may write ``Seq`` only on the ``record_param_comms`` op that launched the
    kernel: the kernel's collective takes it from there, and matching across a missing
    collective then works as with ``Seq`` on the kernels."""
    paths = make_ranks(traces_dir / "kineto" / "a100_nccl_rank0.json.gz", tmp_path, OFFSETS[:3],
                       {LATE_RANK: LATE_US}, jitter_us=20.0)
    for r, p in enumerate(paths):
        doc = json.load(gzip.open(p))
        ev = doc["traceEvents"]
        ops = sorted((e for e in ev if e.get("name") == "record_param_comms"), key=lambda e: e["ts"])
        for seq, e in enumerate(ops):
            e["args"]["Seq"] = 100 + 2 * seq  # torch's numbers need not start at 0 or be dense
        assert not any("Seq" in e.get("args", {}) for e in ev if e.get("cat") == "kernel")
        if r == 1:  # drop the 9th collective kernel of rank 1 (its op stays)
            coll = sorted((e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                          key=lambda e: e["ts"])
            ev.remove(coll[8])
        with gzip.open(p, "wt") as f:
            json.dump(doc, f)
    from polyprof.ranks.collectives import collective_table

    t0 = collective_table(polyprof.load(paths[0]))
    assert (t0["seq_from"] == "Seq").all() and len(t0) == 21
    assert t0["seq"].tolist() == sorted(t0["seq"].tolist()) and t0["seq"].min() >= 100
    rep = load_ranks(paths).analyze("serial", window=None)
    al = rep.tables["rank_alignment"].to_pandas().set_index("rank")
    for r in (1, 2):
        assert al.loc[r, "aligned"] and "Seq" in al.loc[r, "message"]
        assert abs(al.loc[r, "offset_ns"] + OFFSETS[r]) <= al.loc[r, "bound_ns"] < 1_000_000
    assert al.loc[1, "collectives"] == 20 and al.loc[2, "collectives"] == 21


@pytest.mark.parametrize("gz", [True, False])
def test_rank_peeked_across_read_steps(tmp_path, gz):
    """distributedInfo found wherever it lies in the first megabyte, whole: a rank number
    cut by a read step is not taken for its first digits; beyond the first megabyte it
    is not looked for (the file name or the order decides)."""
    from polyprof.ranks.identity import PEEK_BYTES, PEEK_STEP, rank_in_file

    def write(name, pad):
        text = (b'{"schemaVersion": 1, "pad": "' + b"x" * pad + b'", "distributedInfo": '
                b'{"backend": "nccl", "rank": 1234, "world_size": 2048}, "traceEvents": []}')
        p = tmp_path / (name + (".json.gz" if gz else ".json"))
        p.write_bytes(gzip.compress(text) if gz else text)
        return p, text

    p, text = write("cut", 0)
    cut = text.index(b"1234") + 2  # the step ends between "12" and "34"
    p, text = write("cut", PEEK_STEP - cut)
    assert text[PEEK_STEP - 2:PEEK_STEP + 2] == b"1234"
    assert rank_in_file(p) == 1234
    p, _ = write("deep", 5 * PEEK_STEP + 17)
    assert rank_in_file(p) == 1234
    p, _ = write("beyond", PEEK_BYTES + 10)
    assert rank_in_file(p) is None


def test_at_80_columns_the_ranks_table_keeps_idle_and_communication_and_says_what_is_not_aligned():
    """Issue 33/28: in an 80-column terminal the ranks' table drops the file and step
    count, never the shares and times; the headline says plainly when no rank could be
    aligned from collectives (the sampled pair's collectives, SendRecv kernels inside
    all-to-all, all-reduce and all-gather ops, match no pairing of the two ranks)."""
    import os
    from pathlib import Path

    data = Path(__file__).parent / "data" / "traces" / "kineto"
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(data / "sampled_rank0.json.gz"),
                        str(data / "sampled_rank1.json.gz")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Ranks side by side"))
    table = next(ln for ln in lines[start:] if ln.startswith("┃"))  # the header row (after the title, wrapped)
    assert "idle" in table and "communication" in table and "compute" in table
    assert all(len(ln) <= 80 for ln in lines)
    head = " ".join(ln.strip() for ln in lines[:4])
    assert ("not aligned: no collective matched the reference rank's, so rank 1 keeps its times as recorded "
            "(wall clock)") in head
    assert "bound at most 0 ns" not in r.stdout
