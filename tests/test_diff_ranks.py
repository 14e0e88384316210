"""polyprof diff of multi-rank jobs: the per-step columns are the mean over the ranks, so
they agree with the totals; the rank a row's test stands on is named in the row and in
the verdict; a collective whose time moved apart between the ranks (one rank waits for a
straggler) is said so.

The jobs are 2-rank DDP-like jobs on gloo, built with TraceBuilder (a real torchrun job
takes seconds to start; /tmp/ranks5's jobB and jobE, made by a sweep, are real ones of
the same shape): per step, on each rank, the main thread's ``ProfilerStep#k`` with its
ops, and the gloo thread's ``gloo:all_reduce``, which lasts until the last rank arrives.
In job B rank 1 sleeps 20 ms at the start of every step: rank 0 waits for it in the
all-reduce (its time in it 8 -> 28 ms per step, noisy, as waits are), and rank 1, the last
to arrive, waits less than before (8 -> 4 ms, steady)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from polyprof.analyze.diff import diff
from polyprof.analyze.frames import column

STEPS = 9  # the first, the warm-up, is left out: 8 analysed


def _rank_trace(rng: np.random.Generator, rank: int, straggler: bool, steps: int = STEPS, longer: float = 1.0):
    from polyprof.trace import TraceBuilder

    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=100 + rank)
    main = b.track(host, "MainThread", "thread", tid=1)
    gloo = b.track(host, "thread 2 (pt_gloo_runloop)", "thread", tid=2)
    for k in range(steps):
        o = k * 60_000_000
        sleep = 20_000_000 if straggler and rank == 1 else 0
        mm = int(6_000_000 * rng.lognormal(0, 0.02))
        if not straggler:
            wait = 8_000_000 * longer * rng.lognormal(0, 0.03)
        elif rank == 0:  # waits for rank 1: its time in the collective grows, and varies
            wait = 28_000_000 * rng.lognormal(0, 0.25)
        else:  # the last to arrive waits least
            wait = 4_000_000 * rng.lognormal(0, 0.02)
        step = sleep + mm + int(wait) + 2_000_000
        b.event(main, f"ProfilerStep#{k}", o, step, "user_annotation")
        b.event(main, "aten::mm", o + sleep + 500_000, mm, "cpu_op")
        b.event(gloo, "gloo:all_reduce", o + sleep + mm + 1_000_000, int(wait), "user_annotation")
    tr = b.build()
    tr.metadata["rank"] = rank
    return tr


def _job(seed: int, straggler: bool, steps: int = STEPS, longer: float = 1.0) -> list:
    rng = np.random.default_rng(seed)
    return [_rank_trace(rng, r, straggler, steps, longer) for r in (0, 1)]


def _row(d, table: str, name: str) -> dict:
    df = d.tables[table]
    i = column(df, "name").tolist().index(name)
    return {c: column(df, c)[i] for c in ("total_ns_a", "total_ns_b", "delta_total_ns", "step_mean_ns_a",
                                          "step_mean_ns_b", "step_delta_ns", "rel_change", "change",
                                          "rank_decided", "significant")}


def test_a_straggler_s_wait_is_called_on_the_rank_that_waits():
    d = diff(_job(1, False), _job(2, True))
    assert d.overview["ranks"] == [0, 1]
    r = _row(d, "sections", "gloo:all_reduce")
    # the per-step columns agree with the totals: the mean over the ranks, per step
    assert r["delta_total_ns"] > 0 and r["step_delta_ns"] > 0 and r["rel_change"] > 0
    assert abs(r["step_mean_ns_a"] * 2 * (STEPS - 1) - r["total_ns_a"]) < 1
    assert abs(r["step_mean_ns_b"] * 2 * (STEPS - 1) - r["total_ns_b"]) < 1
    # called slower, on rank 0, the rank whose time in it grew (rank 1's fell)
    assert r["significant"] is True and r["change"] == "slower" and r["rank_decided"] == 0
    c = next(c for c in d.changes if c["name"] == "gloo:all_reduce")
    assert c["rank_decided"] == 0 and 15e6 < c["rank_step_mean_ns_b"] - c["rank_step_mean_ns_a"] < 25e6
    text = "\n".join(d.verdict)
    assert "section gloo:all_reduce" in text and "rank 0:" in text, text
    # the ranks moved apart in the collective: rank 0 waits for rank 1
    line = next(line for line in d.verdict if line.startswith("Ranks apart"))
    assert "gloo:all_reduce" in line and "rank 0" in line and "rank 0 waits for rank 1 in B (" in line, line
    # every row of every table: the total and the per-step change have one sign (equal step counts)
    for t, df in d.tables.items():
        total, step = column(df, "delta_total_ns"), column(df, "step_delta_ns")
        both = (total != 0) & (step != 0)
        assert (np.sign(total[both]) == np.sign(step[both])).all(), t


def test_the_terminal_names_the_rank_of_a_row():
    from rich.console import Console

    from polyprof.cli.diff import render

    d = diff(_job(1, False), _job(2, True))
    buf = io.StringIO()
    render(d, 10, wide=True, console=Console(file=buf, width=100, no_color=True))
    lines = buf.getvalue().splitlines()
    head = next(line for line in lines if "Δ%/step" in line and "name" in line)
    cells = [c.strip() for c in head.strip("┃").split("┃")]
    assert cells[-4:] == ["rank", "rank Δ/step", "p", "change"], cells
    row = next(line for line in lines if "gloo:all_reduce" in line and line.count("│") > 5)
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[-4] == "r0" and cells[-3].startswith("+") and cells[-1] == "slower", cells
    assert any("mean over the 2 ranks" in line for line in lines)


def test_an_a_a_job_pair_names_no_rank():
    """Two jobs of one program: nothing is called, and no rank is said to wait."""
    d = diff(_job(3, False), _job(4, False))
    assert not d.changes and d.verdict[0].startswith("No significant change"), d.verdict
    assert not any(line.startswith("Ranks apart") for line in d.verdict)


def test_a_real_gloo_job_with_a_straggler(traces_dir):
    """The recorded 2-rank DDP jobs of tests/data/traces/gloo_ddp (torchrun, gloo, polyprof
    run): in `late` rank 1 sleeps 50 ms in steps 3-5. Before, the per-step columns of a row
    were the most-changed rank's, whichever way it went: DistributedDataParallel.forward
    read 5.6 -> 4.0 ms per step (rank 1's) while its total grew by 9.8 ms."""
    import polyprof

    d = traces_dir / "gloo_ddp"
    even = [polyprof.load(d / f"even.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    late = [polyprof.load(d / f"late.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    out = diff(even, late)
    assert out.step_time["change"] == "slower"
    for t, df in out.tables.items():
        total, step = column(df, "delta_total_ns"), column(df, "step_delta_ns")
        both = (total != 0) & (step != 0)
        wrong = column(df, "name")[both & (np.sign(total) != np.sign(step))].tolist()
        assert not wrong, (t, wrong)
    for t, df in out.tables.items():
        step, rank = column(df, "step_delta_ns"), column(df, "rank_step_delta_ns")
        one = (column(df, "rank_decided") >= 0) & (step != 0)  # the rank named moved the way the row did
        assert (np.sign(rank[one]) == np.sign(step[one])).all(), t
    r = _row(out, "sections", "gloo:all_reduce")
    # a rank's time in it is the union of its two gloo threads' ranges (DDP's buckets overlap): rank 0's grew
    # 8.98 -> 30.7 ms per step, rank 1's 13.4 -> 15.6 ms, so both ranks' tests combined decide the row (-1);
    # the sum of the overlapping ranges had rank 1's fall (24.7 -> 22.4 ms) and rank 0 decide it
    assert r["rank_decided"] == -1 and r["step_delta_ns"] > 0
    df = out.tables["sections"]
    assert column(df, "count_a")[column(df, "name").tolist().index("gloo:all_reduce")] == 2 * 2 * 7  # every call
    assert r["step_mean_ns_a"] == pytest.approx((8.977e6 + 13.426e6) / 2, rel=1e-3)  # the traces' unions
    line = next(line for line in out.verdict if line.startswith("Ranks apart"))
    assert "gloo:all_reduce" in line and "rank 0 waits for rank 1 in B (" in line, line


def test_totals_and_per_step_figures_apart_are_explained():
    """B runs 5 steps where A ran 9, its all-reduce 20% longer per step: the total fell,
    the time per step grew, and the verdict says why they differ."""
    d = diff(_job(5, False), _job(6, False, steps=5, longer=1.2))
    r = _row(d, "sections", "gloo:all_reduce")
    assert r["delta_total_ns"] < 0 < r["step_delta_ns"] and r["change"] == "slower"
    note = next(line for line in d.verdict if "one way in total and the other per step" in line)
    assert "section gloo:all_reduce" in note and "A has 8 steps a trace and B 4" in note, note


def test_evidence_the_other_way_does_not_call_a_row():
    """Rank 0's time grew a lot but noisily, rank 1's fell a little and steadily: the mean
    grew. Rank 1's clear fall (and the Stouffer sum it drives) is no evidence that the row
    grew; the row's p is at least rank 0's, Bonferroni-corrected (before, rank 1's fall
    decided the row, p 4e-15, and its per-step columns read -10%)."""
    from polyprof.analyze.diff_stats import Samples, compare

    rng = np.random.default_rng(7)
    n = 10
    a0, b0 = 10e6 * rng.lognormal(0, 0.05, n), 14e6 * rng.lognormal(0, 0.8, n)
    a1, b1 = 10e6 * rng.lognormal(0, 0.01, n), 9e6 * rng.lognormal(0, 0.01, n)
    rank = np.repeat([0, 1], n)
    a = Samples(np.concatenate([a0, a1])[None, :], np.zeros(2 * n, np.int64), rank)
    b = Samples(np.concatenate([b0, b1])[None, :], np.zeros(2 * n, np.int64), rank)
    c = compare(a, b)
    assert c.p_ranks[0, 1] < 1e-10 and c.p_ranks[0, 0] > 0.01  # rank 1's fall is the clearer
    assert c.mean_b[0] > c.mean_a[0]  # the mean over the ranks grew
    assert c.rank_decided[0] != 1 and c.p[0] >= min(1.0, 4 * c.p_ranks[0, 0]) and c.p[0] > 0.05


def test_the_html_diff_shows_the_deciding_ranks_change(traces_dir):
    """The page's tables carry the deciding rank and its own change per step beside the
    ranks' mean, as the terminal's `rank` and `rank Δ/step` columns."""
    import polyprof
    from polyprof.report.diff_html import page_data, render

    d = traces_dir / "gloo_ddp"
    even = [polyprof.load(d / f"even.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    late = [polyprof.load(d / f"late.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    out = diff(even, late)
    sections = page_data(out)["tables"]["sections"]
    cols = sections["columns"]
    # (gloo:all_reduce, named here before, is decided by both ranks combined since a rank's time in it is the
    # union of its overlapping ranges: test_a_real_gloo_job_with_a_straggler)
    row = next(r for r in sections["rows"] if r[cols.index("name")] == "DistributedDataParallel.forward")
    df = out.tables["sections"]
    want = column(df, "rank_step_delta_ns")[column(df, "name").tolist().index("DistributedDataParallel.forward")]
    assert row[cols.index("rank_decided")] == 0
    assert row[cols.index("rank_step_delta_ns")] == want > 0
    assert 'rank_step_delta_ns: "rank Δ/" + UNIT' in render(out)  # "step", or "trace" without steps


def test_why_untested_names_each_reason_once_with_its_ranks():
    """A job of one step a rank cannot be tested; the reason is told once with the ranks
    as ranges. Before, every rank repeated it ("rank 0: 1 vs 1 samples (the t test
    needs 2 a side); rank 1: ...", 128 times in the verdict of a 128-rank job)."""
    from polyprof.analyze.diff_stats import Samples, compare

    rank = np.array([0, 1, 2, 3, 5, 7])
    one = Samples(np.full((2, 6), 1e6), np.zeros(6, np.int64), rank)
    c = compare(one, Samples(np.full((2, 6), 2e6), np.zeros(6, np.int64), rank))
    assert c.untestable == "ranks 0-3, 5, 7: 1 vs 1 samples (the t test needs 2 a side)", c.untestable
    two = Samples(np.full((1, 3), 1e6), np.zeros(3, np.int64), np.array([0, 0, 4]))
    c = compare(two, Samples(np.full((1, 3), 1e6), np.zeros(3, np.int64), np.array([0, 4, 4])))
    want = "rank 0: 2 vs 1 samples (the t test needs 2 a side); rank 4: 1 vs 2 samples (the t test needs 2 a side)"
    assert c.untestable == want, c.untestable  # two reasons, each with its rank


def test_two_ranks_at_80_columns_keep_the_times_per_step(traces_dir, tmp_path):
    """`COLUMNS=80 polyprof diff` of two 2-rank jobs: the tables keep A/step and B/step
    (the rank columns go first); before, only "+1260.7%" was left of a row's time."""
    import os
    import shutil
    import subprocess
    import sys

    for side in ("even", "late"):
        (tmp_path / side).mkdir()
        for r in (0, 1):
            name = f"{side}.rank{r}.pt.trace.json.gz"
            shutil.copy(traces_dir / "gloo_ddp" / name, tmp_path / side / name)
    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(tmp_path / "even"), str(tmp_path / "late")],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    heads = [line for line in r.stdout.splitlines() if "┃ name" in line]
    assert heads and all("A/step" in h and "B/step" in h and "p" in h and "change" in h for h in heads), heads
    assert max(map(len, r.stdout.splitlines())) <= 80
