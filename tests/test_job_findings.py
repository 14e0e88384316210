"""The job report's findings and its inputs, on real multi-rank jobs.

- A straggler whose delay is large but hits only some steps: a real 2-rank DDP job on
  gloo (tests/data/traces/gloo_ddp, ``late``: rank 1 sleeps 50 ms at the start of steps
  3-5) where rank 1 came last at only 7 of 13 collectives (the count rule wants 75%),
  yet rank 0 spent half its window waiting for it. The same job without the sleep
  (``even``) names no straggler.
- Findings of the ranks merged across devices (PARAM's 8-rank DLRM job: each rank's
  GPU is ``/device:GPU:<rank>``), with the worst rank's numbers.
- A directory of ranks with other files in it (a summary written into it, the sweep's
  truth files, a file being written) reads as the ranks; a damaged trace still fails.
- How many ranks failed; ``polyprof sql`` of a directory says to convert it.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.finding import Finding
from polyprof.analyze.frames import column
from polyprof.errors import PolyprofError
from polyprof.ranks.stragglers import chance_p
from rankmaker import make_ranks

DATA = Path(__file__).parent / "data"
DDP = DATA / "traces" / "gloo_ddp"
GLOO = DATA / "traces" / "gloo"
DLRM = DATA / "peers" / "param"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


# ------------------------------------------------------------------ stragglers by cost
def test_a_rank_late_in_some_steps_is_a_straggler_by_the_waiting_it_causes():
    """Before: the straggler table said rank 1 caused 163 ms of rank 0's waiting (49% of
    its 334 ms window; 24% of the job's rank time) against 38.8 ms the other way, and no
    rule fired (count only: last at 7 of 13 collectives, under 75%). Now the finding
    names rank 1, the shares, and the steps the waiting was in (3-5, where it slept)."""
    rep = polyprof.load_ranks(sorted(DDP.glob("late.rank*.pt.trace.json.gz"))).analyze("serial")
    st = rep.tables["stragglers"]
    caused = dict(zip(column(st, "rank").tolist(), column(st, "caused_wait_ns").tolist()))
    assert caused[1] > 3 * caused[0]
    found = [f for f in rep.findings if f.id == "straggler"]
    assert len(found) == 1, [f.title for f in rep.findings]
    f = found[0]
    ev = f.evidence
    assert ev["rank"] == 1 and ev["caused_wait_ns"] == caused[1]
    assert ev["last_count"] < 0.75 * ev["collectives"]  # not the count rule's
    window = {r: rep.overview["per_rank"][r]["analysed_span_ns"] for r in (0, 1)}
    assert ev["wait_share_pct"] == pytest.approx(100 * caused[1] / window[0], abs=0.1)
    assert ev["job_share_pct"] == pytest.approx(100 * caused[1] / (window[0] + window[1]), abs=0.1)
    assert 40 < ev["wait_share_pct"] < 60 and ev["others_window_ns"] == window[0]
    assert ev["next_rank"] == 0 and ev["next_caused_wait_ns"] == caused[0]
    assert ev["steps"] == [3, 4, 5]
    assert "steps 3-5" in f.title and "rank 1" in f.title
    assert {e["step"] for e in f.events} <= {3, 4, 5} and f.events[0]["spread_ns"] > 40_000_000


def test_an_even_job_names_no_straggler():
    """The same DDP job without the sleep: rank 0 came last more often (10 of 14: within
    chance for 2 ranks, 0.09 x 2) and caused 49 ms of rank 1's waiting (25% of its window,
    12% of the job's rank time: noise of two processes on two cores); rank 1 came last at
    4, 3.6% of rank 0's time: no straggler finding, no finding of the job."""
    rep = polyprof.load_ranks(sorted(DDP.glob("even.rank*.pt.trace.json.gz"))).analyze("serial")
    assert not [f for f in rep.findings if f.id in ("straggler", "ranks_not_aligned")], \
        [f.title for f in rep.findings]
    st = rep.tables["stragglers"]
    counts = dict(zip(column(st, "rank").tolist(), column(st, "last_count").tolist()))
    assert counts == {0: 10, 1: 4} and 2 * chance_p(10, 14, 2) > 0.05


@pytest.mark.parametrize("kind, steps, last, pct", [("even", (3, 7), 6, (10, 25)), ("late", (0, 2), 3, (0.5, 2))])
def test_being_last_at_75_percent_by_chance_names_no_straggler(kind, steps, last, pct):
    """The count rule named the rank last at 75% of the collectives (halfway between 1/2
    and all): ``even`` steps 3-6, rank 0 last at 6 of 8 (its waiting 18% of rank 1's
    time); ``late`` with its warm-up step, steps 0-1, rank 0 last at 3 of 4 (1.1% of rank
    1's time: its 2.7 s warm-up). Neither count is beyond chance for 2 ranks (binomial
    tail 0.14 and 0.31, times 2 ranks), nor is the waiting the 20% of the job's time the
    cost rule wants: no straggler now."""
    from polyprof.analyze.window import Window  # (the steps to analyse)
    from polyprof.ranks.report import COUNT_P

    rep = polyprof.load_ranks(sorted(DDP.glob(f"{kind}.rank*.pt.trace.json.gz"))).analyze(
        "serial", window=Window(*steps), progress=None)
    st = rep.tables["stragglers"]
    sc = rep.tables["straggler_collectives"]
    total = int((np.asarray(column(sc, "spread_ns")) > 2 * np.asarray(column(sc, "bound_ns"))).sum())
    counts = dict(zip(column(st, "rank").tolist(), column(st, "last_count").tolist()))
    assert counts[0] == last and last == 0.75 * total, (counts, total)  # the count rule's old threshold
    share = 100 * int(column(st, "caused_wait_ns")[0]) / rep.overview["per_rank"][1]["analysed_span_ns"]
    assert pct[0] < share < pct[1]
    assert 2 * chance_p(last, total, 2) > COUNT_P
    assert not [f for f in rep.findings if f.id == "straggler"], [f.title for f in rep.findings]


def test_a_rank_last_by_a_hair_at_every_collective_is_no_straggler(tmp_path, traces_dir):
    """A real A100 step on 2 ranks (tests/rankmaker.py: rank 1's NCCL kernels start late):
    100 µs late at each all-reduce of 222 ms steps is last at all 15 all-reduces (far
    beyond chance; the broadcasts' spreads, 7-27 µs, are within twice the clocks' bound
    of 28 µs, now that a broadcast bounds a clock one way only: 18 of 21 with 13 µs
    before) but costs rank 0 0.24% of its time: no straggler (the count rule named it
    before); 400 µs late (0.9%, as tests/test_ranks.py's 4 ranks) still is one."""
    from polyprof.ranks.report import COUNT_WAIT_PCT

    src = traces_dir / "kineto" / "a100_nccl_rank0.json.gz"
    for late, named in ((100.0, False), (400.0, True)):
        files = make_ranks(src, tmp_path / f"late{int(late)}", [0, 3_500_000], {1: late}, jitter_us=20.0 if named else 0.0)
        rep = polyprof.load_ranks(files).analyze("serial", window=None, progress=None)
        st = rep.tables["stragglers"]
        last, caused = int(column(st, "last_count")[1]), int(column(st, "caused_wait_ns")[1])
        share = 100 * caused / rep.overview["per_rank"][0]["analysed_span_ns"]
        assert last >= 15 and 2 * chance_p(last, last, 2) < 1e-4, last
        found = [f for f in rep.findings if f.id == "straggler"]
        if named:
            assert COUNT_WAIT_PCT < share < 1.0 and [f.evidence["rank"] for f in found] == [1]
            assert found[0].evidence["wait_share_pct"] == pytest.approx(share, abs=0.05)
            assert f"({found[0].evidence['wait_share_pct']:.1f}% of their analysed time)" in found[0].title
        else:
            assert 0.1 < share < COUNT_WAIT_PCT and not found, [f.title for f in found]


def test_chance_p_is_the_binomial_tail():
    """Against the exact tail by counting: 15 of 20 with 2 ranks, 10 of 14, 18 of 20 with 4."""
    for c, t, n in [(15, 20, 2), (10, 14, 2), (3, 4, 2), (18, 20, 4), (1, 1, 3), (0, 5, 2), (6, 5, 2)]:
        exact = sum(math.comb(t, k) * (n - 1) ** (t - k) for k in range(c, t + 1)) / n ** t if c <= t else 0.0
        assert chance_p(c, t, n) == pytest.approx(min(exact, 1.0), rel=1e-9), (c, t, n)
    assert chance_p(15, 20, 2) == pytest.approx(0.0207, abs=1e-4)
    assert chance_p(600, 1000, 2) < 1e-9 and chance_p(500, 1000, 2) > 0.5


# ------------------------------------------------------------------ findings across devices
def test_rank_findings_on_different_gpus_are_merged_with_the_worst_rank():
    """DLRM's 8 ranks, each on its own GPU (``/device:GPU:<rank>``): host-bound and
    exposed communication were told once per rank (20 findings); now once each, naming
    the ranks and devices, with the numbers of the rank where they are worst."""
    rep = polyprof.load_ranks(sorted(DLRM.glob("worker*.pt.trace.json.gz"))).analyze("serial")
    per_rank = {r: {f.id: f for f in res.findings} for r, res in rep.results.items()}
    ids = [f.id for f in rep.findings]
    assert len(ids) == len(set(ids)), ids
    host = next(f for f in rep.findings if f.id == "host_bound")
    holds = sorted(r for r, fs in per_rank.items() if "host_bound" in fs)
    assert host.evidence["ranks"] == holds and len(holds) > 4
    worst = max(holds, key=lambda r: per_rank[r]["host_bound"].evidence["idle_pct"])
    assert host.evidence["rank"] == worst and host.plane == f"/device:GPU:{worst}"
    assert host.evidence["idle_pct"] == per_rank[worst]["host_bound"].evidence["idle_pct"]
    assert host.evidence["planes"] == [per_rank[r]["host_bound"].plane for r in holds]
    assert host.title.startswith(f"ranks {holds[0]}-") and f"rank {worst}'s numbers" in host.title


def test_the_worst_rank_of_a_merged_finding_is_by_severity_then_its_main_number():
    """Among ranks of the same severity the worst is the one with the largest share, not
    the first; a lower MFU is worse; a rank of higher severity wins over a larger number."""
    from types import SimpleNamespace

    from polyprof.ranks.report import _rank_findings

    def idle(r, pct, sev):
        return Finding("host_bound", f"/device:GPU:{r} idle {pct}%", sev, f"/device:GPU:{r}", {"idle_pct": pct})

    def mfu(r, pct):
        return Finding("low_mfu", f"MFU {pct}%", "high", "", {"mfu_pct": pct})

    results = {0: [idle(0, 55.0, "high"), mfu(0, 3.0)], 1: [idle(1, 79.0, "high"), mfu(1, 0.5)],
               2: [idle(2, 90.0, "medium"), mfu(2, 1.0)]}
    merged = _rank_findings({r: SimpleNamespace(findings=fs) for r, fs in results.items()})
    by_id = {f.id: f for f in merged}
    assert len(merged) == 2
    assert set(by_id) == {"host_bound", "low_mfu"}
    assert by_id["host_bound"].evidence["rank"] == 1 and by_id["host_bound"].evidence["idle_pct"] == 79.0
    assert by_id["host_bound"].evidence["ranks"] == [0, 1, 2] and by_id["host_bound"].severity == "high"
    assert by_id["host_bound"].evidence["planes"] == ["/device:GPU:0", "/device:GPU:1", "/device:GPU:2"]
    assert by_id["low_mfu"].evidence["rank"] == 1 and by_id["low_mfu"].evidence["mfu_pct"] == 0.5


# ------------------------------------------------------------------ a directory of ranks
def _job_dir(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(GLOO / f"gloo_rank{r}.json.gz", d / f"gloo_rank{r}.json.gz")
    return d


def test_other_json_files_in_a_job_directory_are_left_out_with_a_warning(tmp_path, caplog):
    """A summary written into the job's directory (``polyprof summary . --json > s.json``:
    the shell makes s.json, empty, before polyprof lists the directory), and the sweep's
    truth files, were ranks: "rank 2 (s.json): empty file", "not a Chrome/Kineto trace".
    Now they are left out, named in one warning; the job is its two ranks."""
    d = _job_dir(tmp_path)
    (d / "truth.rank0.json").write_text('[{"step": 0, "start_ns": 1, "end_ns": 2}]')
    (d / "notes.json").write_text('{"overview": {"ranks": 2}, "findings": [], "tables": {}}')
    p = subprocess.run(f"{sys.executable} -m polyprof summary . --json > s.json", shell=True, cwd=d,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "s.json" in p.stderr and "truth.rank0.json" in p.stderr and "notes.json" in p.stderr
    assert (d / "s.json").stat().st_size > 0
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        ts = polyprof.load_ranks(d)  # s.json now holds the summary: left out too
    assert ts.ranks == [0, 1] and sorted(e.label for e in ts.entries) == ["gloo_rank0.json.gz", "gloo_rank1.json.gz"]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and all(n in warned[0] for n in ("s.json", "truth.rank0.json", "notes.json"))


def test_a_damaged_trace_in_a_job_directory_still_fails_naming_it(tmp_path):
    """A file that is a trace (its head says so) but cut short is a rank that failed, not
    a file to leave out: the command fails and names it."""
    d = _job_dir(tmp_path)
    text = (GLOO / "gloo_rank1.json.gz").read_bytes()
    import gzip

    raw = gzip.decompress(text)
    (d / "gloo_rank1.json.gz").unlink()
    (d / "rank-1.json").write_bytes(raw[: len(raw) // 2])
    p = _cli("summary", str(d))
    assert p.returncode == 1 and "rank-1.json" in p.stderr and "Traceback" not in p.stderr
    (d / "rank-1.json").unlink()
    (d / "rank-1.polyprof").write_bytes(b"PK\x03\x04" + b"\x00" * 40)  # a zip cut short
    p = _cli("summary", str(d))
    assert p.returncode == 1 and "rank-1.polyprof" in p.stderr and "Traceback" not in p.stderr


# ------------------------------------------------------------------ failures counted
def test_every_failed_rank_is_counted_not_only_those_done_by_the_first_failure():
    """The error named the first failure in rank order and counted the failures done by
    then: "(1 more failed)" when all 8 ranks failed (the others still running). Now the
    running ones are waited for (the pool waits for them anyway) and counted."""
    import threading

    from polyprof.ranks.executor import run

    started = threading.Barrier(4)

    def fail(i):
        started.wait(10)  # all four run before the first fails
        time.sleep(0.1 * i)
        raise PolyprofError(f"bad {i}")

    with cf.ThreadPoolExecutor(4) as ex, pytest.raises(PolyprofError) as e:
        list(run(fail, [(i,) for i in range(4)], ex, names=[f"rank {i}" for i in range(4)]))
    assert str(e.value) == "rank 0: bad 0 (3 more failed)"


def test_failed_ranks_not_run_are_counted_apart():
    """Ranks cancelled once one failed are said not run, not counted as failed or left
    out: rank 0 fails, rank 1 is running and fails later, ranks 2-5 never start."""
    import threading

    from polyprof.ranks.executor import run

    class Queued(cf.Executor):
        def submit(self, fn, /, *args, **kwargs):
            f: cf.Future = cf.Future()
            if args[0] == 0:
                f.set_exception(PolyprofError("bad 0"))
            elif args[0] == 1:
                f.set_running_or_notify_cancel()
                threading.Timer(0.2, f.set_exception, [PolyprofError("bad 1")]).start()
            return f  # the others wait in the queue

    with pytest.raises(PolyprofError) as e:
        list(run(str, [(i,) for i in range(6)], Queued(), names=[f"rank {i}" for i in range(6)]))
    assert str(e.value) == "rank 0: bad 0 (1 more failed, 4 not run)"


def test_the_serial_bar_is_drawn_while_the_ranks_run(monkeypatch):
    """In one process the tasks ran as they were submitted, all before the bar was drawn:
    a 54 s convert showed "convert 0/1 0:00:00" and then "1/1" at its end (audit audS).
    Now the bar is open while each runs and moves as each ends; a failure leaves the
    rest not run, and says so."""
    from polyprof.ranks import executor

    seen: list[str] = []

    class Bar:
        def __init__(self, total, what, single=False):
            seen.append(f"bar {what} {total}")

        def __enter__(self):
            seen.append("drawn")
            return self

        def advance(self):
            seen.append("advance")

        def __exit__(self, *exc):
            seen.append("gone")

    monkeypatch.setattr(executor, "TaskBar", Bar)

    def task(i):
        seen.append(f"run {i}")
        return i * 10

    got = list(executor.run(task, [(0,), (1,)], executor.SerialExecutor(), progress="convert"))
    assert got == [(0, 0), (1, 10)]
    assert seen == ["bar convert 2", "drawn", "run 0", "advance", "run 1", "advance", "gone"]

    def fail(i):
        if i == 1:
            raise PolyprofError("bad 1")
        return i

    with pytest.raises(PolyprofError) as e:
        list(executor.run(fail, [(i,) for i in range(4)], executor.SerialExecutor(),
                          names=[f"rank {i}" for i in range(4)]))
    assert str(e.value) == "rank 1: bad 1 (2 not run)"


# ------------------------------------------------------------------ sql of a directory
def test_sql_of_a_job_directory_says_to_convert_it_to_a_store(tmp_path):
    d = _job_dir(tmp_path)
    p = _cli("sql", str(d), "SELECT 1")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert f"polyprof convert {d} -o" in p.stderr and "polyprof sql STORE" in p.stderr, p.stderr


def test_a_cpu_ranks_communication_is_counted_within_its_analysed_span():
    """gloo ``late`` rank 1: its last all-reduce begins inside the window and ends after it.
    Before, the overview counted it whole: 115,587,361 ns (33.96% of the window); within
    the window (an audit's own union of the raw file's collectives) it is 113,170,777 ns."""
    rep = polyprof.load_ranks(sorted(DDP.glob("late.rank*.pt.trace.json.gz"))).analyze("serial")
    ov = rep.tables["rank_overview"]
    comm = dict(zip(column(ov, "rank").tolist(), column(ov, "communication_ns").tolist()))
    pct = dict(zip(column(ov, "rank").tolist(), column(ov, "communication_pct").tolist()))
    assert comm[1] == 113_170_777 and pct[1] == pytest.approx(33.2453, abs=1e-3)
    assert comm[0] == 215_543_515  # every one of rank 0's ends inside its window
