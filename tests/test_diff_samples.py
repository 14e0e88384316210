"""What a diff compares where some traces have no steps, and what it says where its test
cannot call a row: on real recordings made here (``python -m polyprof run`` of a loop
of two ``time.sleep`` sections, ``work`` 2 ms and ``io_wait`` 3 ms a step).

An auditor's report: five runs of a 12-step program against four of the same program run
for 24 steps and one run of it without ``polyprof.step()`` read "B is slower: median
trace time +86.9%", "section io_wait 84.3 ms -> 158 ms per step (+87.9%)": the one trace
without steps made every trace one sample, so the diff compared whole runs of 11 and 23
analysed steps, and said "per step" of per-trace figures. Without that trace: "No
significant change", io_wait 7.66 -> 7.09 ms per step. And with ``--test rank`` and 5
runs a side, a change every run showed (p 0.0079, the smallest a 5-vs-5 Mann-Whitney
gives; Holm over 9 rows: 0.071) read "No significant change", "within the noise"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import Runs, diff
from polyprof.analyze.diff_stats import NO_REACH, Samples, compare, smallest_p
from polyprof.analyze.frames import column

PROGRAM = """\
import os, time, polyprof
io = float(os.environ.get("IO_MS", "3")) / 1e3
for _ in range(int(os.environ.get("STEPS", "6"))):
    with polyprof.section("work"):
        time.sleep(0.002)
    with polyprof.section("io_wait"):
        time.sleep(io)
    if not os.environ.get("NO_STEP"):
        polyprof.step()
"""

#: name -> (runs, environment): 6 steps (5 analysed), 12 (11 analysed), 24 without steps, io_wait 12 ms
RECORDINGS = {"short": (3, {"STEPS": "6"}), "long": (3, {"STEPS": "12"}), "nostep": (3, {"STEPS": "24", "NO_STEP": "1"}),
              "slow": (3, {"STEPS": "6", "IO_MS": "12"})}
#: recordings made at a time (a loaded machine stretches sleeps: fewer at once, less of that)
AT_ONCE = 2


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, list[Path]]:
    """Each recording's files, made by ``python -m polyprof run`` (:data:`AT_ONCE` at a time)."""
    d = tmp_path_factory.mktemp("sleep_runs")
    (d / "loop.py").write_text(PROGRAM)
    out: dict[str, list[Path]] = {}
    jobs = []
    for name, (n, env) in RECORDINGS.items():
        for i in range(n):
            path = d / f"{name}{i}.polyprof"
            out.setdefault(name, []).append(path)
            jobs.append((path, env))
    for k in range(0, len(jobs), AT_ONCE):
        procs = [(p, subprocess.Popen([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(p),
                                       str(d / "loop.py")], cwd=d, env={**os.environ, **env},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                 for p, env in jobs[k:k + AT_ONCE]]
        for p, proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and p.exists(), err
    return out


def _load(paths: list[Path]) -> list[polyprof.Trace]:
    return [polyprof.load(p) for p in paths]


def _row(d, table: str, name: str) -> dict:
    df = d.tables[table]
    i = column(df, "name").tolist().index(name)
    return {c: column(df, c)[i] for c in ("step_mean_ns_a", "step_mean_ns_b", "rel_change", "change", "reason",
                                          "count_a", "count_b")}


def test_a_trace_without_steps_is_left_out_and_named(runs):
    """Three runs of 6 steps against three of 12 and one without steps (the auditor's
    case): compared per step over the traces with steps, the one without named and left
    out, its calls in no count. Before, every trace was one sample: io_wait "slower,
    +100% per step" (its per-trace time: 11 steps against 5)."""
    b = [*_load(runs["long"]), polyprof.load(runs["nostep"][0])]
    d = diff(Runs([[t] for t in _load(runs["short"])]), Runs([[t] for t in b]))
    assert d.overview["samples"] == "steps" and d.step_time["unit"] == "step"
    left = d.overview["b"]["left_out"]
    assert [(x["run"], x["why"]) for x in left] == [(3, "no steps")] and not d.overview["a"].get("left_out")
    assert d.overview["b"]["runs"] == 3 and d.overview["b"]["traces"] == 3 and d.overview["b"]["steps"] == 33
    io = _row(d, "sections", "io_wait")
    assert not io["change"], io  # about 3.1 ms a step on each side (a loaded machine stretches some)
    assert io["count_b"] == 11  # the mean over B's three runs with steps: the fourth's calls are not in it
    note = next(line for line in d.verdict if line.startswith("Note: left out:"))
    assert "B's run 4" in note and "A 5 steps a trace; B 11 steps a trace" in note, note
    assert "per trace" not in d.text and "B is slower" not in d.text, d.text


def test_a_left_out_trace_is_named_by_its_file(runs, tmp_path):
    """On the command line the note names the file; the header says how many were left out."""
    files = [*map(str, runs["short"]), "--", *map(str, runs["long"]), str(runs["nostep"][0])]
    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", *files, "-n", "0"], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    assert "(1 more left out: no steps)" in r.stdout, r.stdout
    assert f"B's run 4 ({runs['nostep'][0]})" in r.stdout, r.stdout


def test_whole_traces_say_per_trace_and_why(runs):
    """Runs with steps against runs without any: each trace is one sample, and the
    verdict says "per trace" of its rows (it said "per step" of per-trace figures), the
    floors per trace, and that A's traces hold 5 analysed steps, B's none, so that a
    trace's time is as long as its run."""
    d = diff(Runs([[t] for t in _load(runs["short"])]), Runs([[t] for t in _load(runs["nostep"])]))
    assert d.overview["samples"] != "steps" and d.step_time["unit"] == "trace"
    io = _row(d, "sections", "io_wait")
    assert io["change"] == "slower" and io["step_mean_ns_b"] > 3 * io["step_mean_ns_a"], io  # 24 calls vs 5
    slower = next(line for line in d.verdict if line.startswith("Slower in B"))
    assert "section io_wait" in slower and "per trace" in slower and "per step" not in slower, slower
    assert not [line for line in d.verdict if "per step" in line and not line.startswith("Note:")], d.text
    note = next(line for line in d.verdict if line.startswith("Note: the diff compares whole traces"))
    assert "as B's have no steps" in note and "A's traces hold 5 analysed steps each" in note, note


def test_the_rank_test_says_when_it_cannot_reach_alpha(runs):
    """io_wait 3 ms against 12 ms a step, three runs a side: every B run above every A
    run, and with ``test="rank"`` the smallest p a 3-vs-3 Mann-Whitney can give is 0.1,
    above alpha before any correction. The verdict says no row could be called and what
    would (5 runs a side), the rows' reason says the same, and the p-values are as
    they were; the t test calls the change. Before: "No significant change", "within
    the noise"."""
    a = Runs([[t] for t in _load(runs["short"])])
    b = Runs([[t] for t in _load(runs["slow"])])
    d = diff(a, b, test="rank")
    reach = d.overview["reach"]
    assert reach["smallest_p"] == pytest.approx(0.1) and reach["needed_a_side"] == 5 and reach["unit"] == "runs"
    assert reach["smallest_adjusted_p"] >= 0.05 and reach["rows_tested"] == d.overview["rows_tested"]
    io = _row(d, "sections", "io_wait")
    assert io["reason"] == NO_REACH and not io["change"], io
    assert column(d.tables["sections"], "p_value")[column(d.tables["sections"], "name").tolist().index("io_wait")] \
        == pytest.approx(0.1)  # the statistics as they were: the bound itself, every run apart
    assert d.verdict[0].startswith("No row can be called changed: with 3 runs a side the rank test"), d.verdict[0]
    assert "smallest p it can give is 0.1" in d.verdict[0] and "(5 a side can reach it) or --test t" in d.verdict[0]
    assert "No significant change" not in d.text and "within the noise" not in d.text, d.text
    t = diff(a, b)
    assert t.overview["reach"] is None and _row(t, "sections", "io_wait")["change"] == "slower"
    assert "No row can be called" not in t.text


def test_the_smallest_p_is_what_the_test_gives_runs_wholly_apart():
    """``smallest_p`` is the p of runs every one of which is apart from every other
    side's, on one rank and on two (the ranks combined as ``compare`` does)."""
    rng = np.random.default_rng(3)
    for ranks in (1, 2):
        run = np.repeat(np.arange(5), 4 * ranks)
        rank = np.tile(np.repeat(np.arange(ranks), 4), 5)
        a = Samples(1e6 + rng.random((1, len(run))) * 1e3, run, rank)
        b = Samples(2e6 + rng.random((1, len(run))) * 1e3, run, rank)
        c = compare(a, b, "rank")
        assert c.min_p == pytest.approx(float(c.p[0])), ranks
        assert c.sizes == [(5, 5, True)] * ranks
    assert smallest_p([(5, 5, True)], 1, "rank") == pytest.approx(2 / 252)
    assert smallest_p([(5, 5, True)], 1, "t") == 0.0
