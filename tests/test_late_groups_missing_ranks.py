"""A job's ranks against what its traces state, ranks late together, and how the job's
report says it (ranks/missing.py, ranks/stragglers.py, ranks/straggler_findings.py),
on real 4-rank gloo jobs recorded with polyprof (tests/data/traces/gloo_late_ranks):

- a rank file not given: every trace says ``world_size: 4``; before, 3 ranks read as the
  job, no warning, no finding, while the missing rank 2 was the one they waited for;
- ranks 2 and 3 sleeping the same 30 ms before each all-reduce of steps 2-7: before, no
  straggler finding (each caused about half the waiting, neither twice the other's) and
  the ties charged to whichever came a hair later;
- the steps of equal delays all named; one line per window of ranks that share it;
  ``--rank-by`` on the commands that read a job; the diff's "ranks apart" not blaming
  a rank by a difference within noise.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import polyprof
from polyprof.analyze.diff_apart import _apart
from polyprof.analyze.frames import column
from polyprof.ranks.report import _windows

DATA = Path(__file__).parent / "data" / "traces" / "gloo_late_ranks"


def _job(kind: str, ranks: tuple[int, ...] = (0, 1, 2, 3)):
    return polyprof.load_ranks([DATA / f"{kind}.rank{r}.polyprof" for r in ranks]).analyze("serial")


def test_a_rank_file_not_given_is_said_with_a_warning_and_a_finding(caplog):
    """Before: "3 ranks ... 3 of 3 on rank 0's clock", no warning, no finding; ranks 0, 1,
    3 at 94-97% communication, waiting (it seemed) 7-10 ms."""
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        rep = _job("one_late", (0, 1, 3))
    found = [f for f in rep.findings if f.id == "ranks_missing"]
    assert len(found) == 1, [f.title for f in rep.findings]
    f = found[0]
    assert f.evidence["missing_ranks"] == [2] and f.evidence["world_size"] == 4
    assert "rank 2 was not given" in f.title and "job of 4 ranks" in f.title
    assert "may be waiting for rank 2" in f.suggestion
    assert rep.overview["missing_ranks"] == [2]
    assert any("rank 2 was not given" in r.getMessage() for r in caplog.records)
    # every rank given: nothing said
    whole = _job("one_late")
    assert not [f for f in whole.findings if f.id == "ranks_missing"] and "missing_ranks" not in whole.overview
    assert [f.evidence["rank"] for f in whole.findings if f.id == "straggler"] == [2]


def test_critical_path_of_a_job_without_a_rank_file_says_so():
    """critical-path read 3 of the 4 ranks without a word, its path's collective waits
    being for the absent rank 2 (an auditor)."""
    files = [str(DATA / f"one_late.rank{r}.polyprof") for r in (0, 1, 3)]
    p = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", *files], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "the traces name a job of 4 ranks; rank 2 not given (found: ranks 0-1, 3)" in p.stderr, p.stderr
    whole = subprocess.run([sys.executable, "-m", "polyprof", "critical-path",
                            *[str(DATA / f"one_late.rank{r}.polyprof") for r in range(4)]],
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0 and "not given" not in whole.stderr, whole.stderr


def test_a_straggler_finding_says_its_waits_may_be_for_a_rank_not_given():
    """Rank 3 of the two late ones given, rank 2 not: the straggler finding names rank 3
    and says the waits may be for rank 2."""
    rep = _job("two_late", (0, 1, 3))
    st = [f for f in rep.findings if f.id == "straggler"]
    assert len(st) == 1 and st[0].evidence["rank"] == 3, [f.title for f in rep.findings]
    assert "the traces name rank 2, not given: the waits may be for it" in st[0].title
    assert st[0].evidence["missing_ranks"] == [2]


def test_two_equally_late_ranks_share_the_charge_and_are_named_together():
    """Before: no straggler finding; rank 3 "caused" 240 ms (last 4 times), rank 2 130 ms
    (last 2); the steps "3-7" or "2, 4-7" of six equal delays."""
    rep = _job("two_late")
    st = rep.tables["stragglers"]
    per = {int(r): (int(n), float(c)) for r, n, c in zip(column(st, "rank"), column(st, "last_count"),
                                                         column(st, "caused_wait_ns"))}
    assert per[2][0] == per[3][0] == 6  # last (together) at the six all-reduces they slept before
    assert abs(per[2][1] - per[3][1]) < 0.1 * per[2][1]  # the same waiting charged to each
    assert per[0][0] == per[1][0] == 0 and max(per[0][1], per[1][1]) < 0.05 * per[2][1]
    sc = rep.tables["straggler_collectives"]
    late = [str(x) for x, s, b in zip(column(sc, "late_ranks"), column(sc, "spread_ns"), column(sc, "bound_ns"))
            if s > 2 * b]
    assert late and set(late) == {"2,3"}, late
    found = [f for f in rep.findings if f.id == "straggler"]
    assert len(found) == 1, [f.title for f in rep.findings]
    f = found[0]
    assert f.title.startswith("ranks 2, 3 are late together") and " for them" in f.title, f.title
    assert f.evidence["ranks"] == [2, 3]
    assert f.evidence["steps"] == [2, 3, 4, 5, 6, 7] and "steps 2-7" in f.title
    assert "ranks 2, 3 do before their collectives" in f.suggestion
    from polyprof.report.html import straggler_ranks  # (the HTML job page marks each of the group)

    assert straggler_ranks(rep.findings) == [2, 3]


def test_equal_steps_are_all_named():
    """Six steps of equal waiting, one a hair lower: the fewest reaching 80% left it out."""
    from polyprof.ranks.straggler_findings import _main_steps  # (made with the fix)

    step = np.array([2, 3, 4, 5, 6, 7])
    wait = np.array([30.1, 31.0, 30.8, 30.6, 30.9, 30.7]) * 1e6
    assert _main_steps(step, wait) == [2, 3, 4, 5, 6, 7]
    # a step clearly apart is still left out
    assert _main_steps(np.array([2, 3, 4]), np.array([50.0, 50.0, 5.0]) * 1e6) == [2, 3]


def test_a_slow_node_and_ranks_at_a_stride_are_named_so():
    from polyprof.ranks.straggler_findings import _as_group, group_names
    from polyprof.analyze.findings import Finding

    assert group_names(list(range(7, 256, 8))) == "ranks 7, 15, ..., 255 (every 8th: 32 ranks)"
    assert group_names(list(range(8, 16))) == "ranks 8-15"
    f = Finding("straggler", "rank 8 is the straggler: the others waited 1 s for it", "high", "", {"rank": 8},
                suggestion="Look at what rank 8 does before its collectives: ... until it arrives.")
    hosts = {r: f"node{r // 8}" for r in range(32)}
    g = _as_group(f, list(range(8, 16)), hosts, [])
    assert g.title.startswith("ranks 8-15 (every rank on host node1: a slow node) are late together"), g.title


def test_ranks_of_the_same_window_are_said_once():
    """Before: each rank's window with its own note (60 of 192 lines for 40 ranks)."""
    def res(w):
        return SimpleNamespace(overview={"window": w})

    note = ("steps 1-5 of 0-5 (first step skipped as a warm-up by default, though it took no longer than the "
            "median step ({} against {}); --skip-first 0 keeps it)")
    results = {r: res(note.format(f"{20 + r} ms", "30 ms")) for r in range(40)}
    results[40] = res("steps 2-5 of 0-5")
    text = _windows(results)
    assert text.startswith("ranks 0-39: steps 1-5 of 0-5 (first step skipped as a warm-up by default, though it "
                           "took no longer than the median step; --skip-first 0 keeps it); rank 40: steps 2-5"), text
    assert text.count("steps 1-5") == 1
    assert _windows({0: res("steps 1-5 of 0-5"), 1: res("steps 1-5 of 0-5")}) == "steps 1-5 of 0-5"


def test_rank_by_order_on_the_commands_that_read_a_job(tmp_path):
    """docs/ranks.md offers ``--rank-by order``; before, only ``convert`` took it
    ("unrecognized arguments")."""
    for r, name in ((1, "a-7.polyprof"), (3, "b-9.polyprof")):
        shutil.copy(DATA / f"two_late.rank{r}.polyprof", tmp_path / name)
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(tmp_path), "--rank-by", "order", "--json",
                        "-j", "1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [r["rank"] for r in doc["tables"]["rank_overview"]["records"]] == [0, 1]
    p = subprocess.run([sys.executable, "-m", "polyprof", "report", "--help"], capture_output=True, text=True)
    assert "--rank-by" in p.stdout
    p = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(tmp_path), "--rank-by", "order",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert [c["rank"] for c in json.loads(p.stdout)["clocks"]] == [0, 1], p.stdout[:300]


def test_the_diff_does_not_blame_a_rank_by_a_difference_within_noise():
    """A: 2 ranks, rank 1 late (rank 0 waits 34 ms in the all-reduce); B: 4 ranks, rank 2
    late, ranks 0 and 1 each ~31 ms in it, 604 µs apart. Before: "rank 1 waits for rank 0
    in B" (rank 2, only in B, is no stratum)."""
    ma, mb = np.array([37.4e6, 2.96e6]), np.array([30.6e6, 31.2e6])
    assert _apart("gloo:all_reduce", "sections", "slower", ma, mb, [0, 1], (0.05, 20_000), str) is None
    # a real wait in B is still said: rank 1 last there, rank 0 waiting 20 ms more than in A
    got = _apart("gloo:all_reduce", "sections", "slower", np.array([10e6, 9e6]), np.array([30e6, 9.5e6]), [0, 1],
                 (0.05, 20_000), str)
    assert got is not None and "rank 0 waits for rank 1 in B" in got[3]
