"""polyprof diff: the auditor's findings on runs of one small torch loop
(tests/data/traces/diff_loop, recorded by `polyprof run` on a loaded machine) and on the
other real traces here: a side recorded without a plugin, or read from a format whose
ops polyprof does not classify, or a program sharing no row with the other (not
compared, not "the program changed"); the caveat of one run a side beside other work;
one stalled step that carried a row past the effect floor; "Unchanged" counting rows
new or gone; the header and notes of runs of different lengths; the other work cut
without saying so; p = 0 from samples without spread; the rank test's step time out of
reach. Where real data cannot make the case (the step counts), synthetic traces built as
the other diff tests build them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.diff import Runs, diff
from polyprof.analyze.diff_stats import NO_REACH
from polyprof.analyze.frames import column

DATA = Path(__file__).resolve().parent / "data" / "traces"
LOOP = DATA / "diff_loop"
JOB = DATA / "jax_cpu_job"


def _rows(d, table: str) -> dict[str, dict]:
    df = d.tables[table]
    cols = ("count_a", "count_b", "p_value", "p_adjusted", "change", "reason", "step_mean_ns_a", "step_mean_ns_b",
            "step_median_ns_a", "step_median_ns_b")
    return {str(n): {c: column(df, c)[i] for c in cols} for i, n in enumerate(column(df, "name").tolist())}


def _text(d) -> str:
    return " ".join(d.verdict)


def test_a_side_recorded_without_the_torch_plugin_is_not_compared():
    """The loop recorded with torch against the same loop recorded with `--plugins host`:
    every framework op read "gone" (aten::mm 344 µs -> 0 ns, p=8.2e-68), under "B is
    faster ... 4 faster" and "B runs other work ... the program changed". B holds no op at
    all and was recorded otherwise: its ops are not compared, and the verdict says why,
    naming both recordings; the sections, which both hold, still are."""
    d = diff(polyprof.load(LOOP / "aa_stall_b.polyprof"), polyprof.load(LOOP / "host_only.polyprof"))
    text = _text(d)
    assert "program changed" not in text and "B runs other work" not in text, d.verdict
    assert set(d.overview["not_compared"]) == {"ops"}, d.overview["not_compared"]
    ops = _rows(d, "ops")
    assert all(r["reason"].startswith("not compared") and not r["change"] and r["p_value"] != r["p_value"]
               for r in ops.values()), ops
    assert not any(c["table"] == "ops" for c in d.changes) and "(gone" not in text
    assert "program changed" not in text and "B runs other work" not in text, d.verdict
    line = next(x for x in d.verdict if x.startswith("Not compared:"))
    assert "B holds no framework ops at all (A 12 rows)" in line and "B by plugins host)" in line, line
    assert "A by plugins host, opencl, torch" in line, line
    assert set(_rows(d, "sections")) == {"load", "compute"} and d.overview["rows_tested"] == 2
    assert any(x.startswith("Unchanged: 2 of 2 sections") for x in d.verdict), d.verdict


def test_jax_own_chrome_trace_against_its_xspace_is_the_same_run():
    """One JAX CPU profile read from its XSpace and from JAX's own Chrome trace written
    beside it. Once every XLA op read "gone" (jit_step/all-reduce.2 24.4 ms -> 0 ns) and "the
    program changed"; later the Chrome trace's ops were in no table and the pair was "not
    compared". formats/kineto/jax_chrome.py now reads that export like its XSpace, so the
    two are one run: every row compared, none changed, the same step times."""
    d = diff(polyprof.load(JOB / "rank0.xplane.pb.gz"), polyprof.load(JOB / "jax_own" / "rank0.trace.json.gz"))
    text = _text(d)
    assert not d.changes and "(gone" not in text and "program changed" not in text, d.verdict
    assert not d.overview["not_compared"] and d.overview["rows_tested"] == 5, d.overview
    assert d.verdict[0].startswith("No significant change"), d.verdict
    assert d.verdict[1].startswith("Step time: median 4.27 ms -> 4.27 ms per step (+0.0%)"), d.verdict
    assert any(x.startswith("Unchanged: 8 of 8 device activities and ops") for x in d.verdict), d.verdict


def test_runs_that_share_no_row_are_not_compared():
    """A torch loop against a JAX job, two programs with no row name in common: an ordinary
    verdict (the auditor's pair: "B is faster ... 7 slower, 7 faster", "Unchanged: 6 of 21",
    six torch ops gone counted unchanged). Now no row is compared: the verdict says the
    sides share no row and compares the step time alone."""
    d = diff(polyprof.load(LOOP / "aa_stall_b.polyprof"), polyprof.load(JOB / "rank0.xplane.pb.gz"))
    assert not d.changes and d.overview["rows_tested"] == 0, d.verdict
    assert set(d.overview["not_compared"]) == {"kernels", "ops", "sections"}
    assert d.verdict[0].startswith("Not compared: A and B share no row (device activity: A 0 rows, B 7 rows, "
                                   "framework ops: A 12 rows, B 1 row, sections: A 2 rows, B 0 rows;"), d.verdict
    assert not d.changes and d.overview["rows_tested"] == 0
    assert d.verdict[1].startswith("Step time: ") and not any(x.startswith(("Unchanged", "B runs other work",
                                                                             "Slower", "Faster")) for x in d.verdict)


def test_one_stalled_step_does_not_carry_a_row_past_the_floor():
    """Two runs of the identical loop: the one row called changed was aten::item, 29.1 µs ->
    2.23 µs per step (-92.3%, p=0.0004), its mean raised by one step of 704 µs (3-8 µs in
    every other), its typical step moving 2.4 µs. A row's floors are now on its typical
    (median) step too, as the step time's are: it is beyond the noise, under the floor.
    The loop without tanh keeps its real change: tanh gone, called faster."""
    a, b = polyprof.load(LOOP / "aa_stall_a.polyprof"), polyprof.load(LOOP / "aa_stall_b.polyprof")
    d = diff(a, b)
    assert "aten::item" not in {c["name"] for c in d.changes}, d.verdict
    item = _rows(d, "ops")["aten::item"]
    assert item["step_mean_ns_a"] > 20_000 and item["step_mean_ns_a"] - item["step_mean_ns_b"] > 20_000, item
    assert abs(item["step_median_ns_a"] - item["step_median_ns_b"]) < 5_000, item
    assert not item["change"] and item["reason"] == "below the effect floor", item
    assert "aten::item" not in {c["name"] for c in d.changes}, d.verdict
    gone = diff(b, polyprof.load(LOOP / "no_tanh.polyprof"))
    tanh = _rows(gone, "ops")["aten::tanh"]
    assert tanh["change"] == "faster" and tanh["count_b"] == 0 and tanh["step_median_ns_a"] > 100_000, tanh


def test_other_work_keeps_the_caveat_of_one_run_a_side():
    """One run a side, B without tanh: "B runs other work: op aten::tanh gone ... the
    program changed" took the place of the caveat of one run a side, beside aten::sum
    14.2 -> 36.4 µs per step (+157%) that runs of the identical loop show too. The dropped
    call proves the program changed, not that those times did: the caveat follows."""
    d = diff(polyprof.load(LOOP / "aa_stall_b.polyprof"), polyprof.load(LOOP / "no_tanh.polyprof"))
    assert any(x.startswith("B runs other work: op aten::tanh gone") for x in d.verdict), d.verdict
    timed = [c for c in d.changes if c["name"] != "aten::tanh"]
    last = d.verdict[-1]
    if timed or d.step_time["change"]:
        assert last.startswith("One run a side: the times called changed (") and "machine" in last, d.verdict
        assert all(c["name"] in last for c in timed[:3]), last
    else:
        assert last.startswith("One run a side: the noise is step-to-step only"), d.verdict


def _run(kernels: dict[str, float], steps: int = 10, seed: int = 0, factor: float = 1.0) -> polyprof.Trace:
    """A trace of ``steps`` steps, each running ``kernels`` (name -> µs, x ``factor``, 2%
    noise) one after the other on one stream."""
    from polyprof.trace import TraceBuilder

    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=100), "main", "thread", tid=1)
    s7 = b.track(b.plane("/device:GPU:0", "device", vendor="nvidia", index=0), "stream 7", "stream", tid=7)
    step_ns = int(sum(kernels.values()) * 1000 * factor * 2) + 100_000
    for k in range(steps):
        o = k * step_ns
        b.event(th, f"ProfilerStep#{k}", o, step_ns, "user_annotation")
        t = o + 1000
        for name, us in kernels.items():
            d = int(us * factor * rng.lognormal(0.0, 0.02) * 1000)
            b.event(s7, name, t, d, "kernel", stream=7, device=0)
            t += d + 500
    return b.build()


BASE = {"gemm": 900.0, "softmax": 300.0, "copy": 120.0}


def test_unchanged_leaves_out_rows_new_or_gone():
    """B drops a 3 µs kernel (under the floor: not other work) and runs the rest alike:
    "Unchanged: 4 of 4" counted it. Now it is counted apart, as new or gone."""
    d = diff(_run({**BASE, "tiny": 3.0}, seed=1), _run(BASE, seed=2))
    line = next(x for x in d.verdict if x.startswith("Unchanged:"))
    assert line.startswith("Unchanged: 3 of 4 device activities; 1 more are new or gone;"), d.verdict


def test_other_work_cut_to_top_says_how_many_more():
    """Three new kernels above the floor with `top=1`: the "B runs other work" list named
    one and said nothing of the other two ("Slower in B" said "(and 2 more)")."""
    d = diff(_run(BASE, seed=1), _run({**BASE, "new_a": 400.0, "new_b": 300.0, "new_c": 200.0}, seed=2), top=1)
    line = next(x for x in d.verdict if x.startswith("B runs other work"))
    assert "kernel new_a new" in line and " (and 2 more). " in line, line


def test_runs_of_different_lengths_name_each_window_and_the_range():
    """Three runs a side, B's of 5, 8 and 12 steps: the header named B's first run's window
    ("steps 1-4 of 0-4") as the side's, and a note read "B 7.33 steps a trace", their mean,
    which no run had. Now each run's steps, and the range."""
    a = Runs([_run(BASE, 12, seed=s) for s in (1, 2, 3)])
    b = Runs([_run(BASE, n, seed=s, factor=1.1) for n, s in ((5, 4), (8, 5), (12, 6))])
    d = diff(a, b)
    win = d.overview["b"]["window"]
    assert win.startswith("steps 1-4 (run 1), 1-7 (run 2), 1-11 (run 3); run 1: steps 1-4 of 0-4"), win
    assert d.overview["b"]["steps_per_trace"] == [4, 11] and len(d.overview["b"]["windows"]) == 3
    assert d.overview["a"]["window"].startswith("steps 1-11 of 0-11"), d.overview["a"]["window"]
    note = next((x for x in d.verdict if "changed one way in total and the other per step" in x), None)
    assert note is not None and "A has 11 steps a trace and B 4 to 11:" in note, d.verdict


def test_p_is_never_zero_where_samples_have_no_spread():
    """Two steps a side of whole-µs Kineto times: fb::fast_gather took 87 µs in both of A's
    steps and is absent from B's; the pooled variance was 0 and its p 0 (and so in
    --json). The variance is now at least that of rounding to the µs: p is small, not 0,
    and the row is still called gone."""
    k = DATA / "kineto"
    d = diff(polyprof.load(k / "sampled_rank0.json.gz"), polyprof.load(k / "sampled_rank1.json.gz"))
    for t, df in d.tables.items():
        p = column(df, "p_value").astype(np.float64)
        assert not (p == 0).any() and not (column(df, "p_adjusted").astype(np.float64) == 0).any(), t
    row = _rows(d, "ops")["fb::fast_gather"]
    assert 0 < row["p_value"] < 1e-5 and row["change"] == "faster", row


def test_rank_test_step_time_out_of_reach_says_so():
    """Three runs a side, every B step 2x: with the rank test no p under 0.1 exists at 3
    vs 3 runs; the rows said so, the step time read "no significant change". It now says
    it cannot be called."""
    a = Runs([_run(BASE, 6, seed=s) for s in (1, 2, 3)])
    b = Runs([_run(BASE, 6, seed=s, factor=2.0) for s in (4, 5, 6)])
    d = diff(a, b, test="rank")
    assert d.step_time["reason"] == NO_REACH and not d.step_time["change"], d.step_time
    line = next(x for x in d.verdict if x.startswith("Step time:"))
    assert line.endswith("cannot be called: the rank test's smallest p with 3 vs 3 runs is 0.1."), line
