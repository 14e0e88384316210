"""polyprof diff's verdict on real traces: stalls against the typical step, the figures
of an untested diff, the note on totals against per-step figures with one rank, steps
recorded as ops, names that differ in the middle, the time of a trace without steps,
and the tables' headers then (tests/data/traces/mlp_cpu: two runs of one program, one
with 4 stalled steps; tests/data/traces/kineto); and on synthetic steps, how the step
time is called and said (its test against its median, the rows that moved, the machine)
and `-n 0`."""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import diff
from polyprof.analyze.frames import column
from polyprof.analyze.units import fmt_ns

MLP = Path(__file__).parent / "data" / "traces" / "mlp_cpu"


def load(name: str) -> polyprof.Trace:
    return polyprof.load(MLP / f"{name}.pt.trace.json.gz")


def raw(name: str) -> dict:
    with gzip.open(MLP / f"{name}.pt.trace.json.gz", "rt") as f:
        return json.load(f)


def variant(tmp_path: Path, name: str, out: str, edit) -> polyprof.Trace:
    """A variant of a recorded trace, made at run time: ``edit`` changes its events."""
    doc = raw(name)
    doc["traceEvents"] = edit(doc["traceEvents"])
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(doc))
    return polyprof.load(path)


def steps_of(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")),
                  key=lambda e: e["ts"])


def test_stalls_alone_do_not_call_the_step_time():
    """The same program twice; B's 4 stalled steps (13.7, 9.7, 5.6, 5.8 ms against a
    median of 1.68 ms, each in another op) move its mean +155% and the mean of its log
    times (t: p 0.038) while its median step moves +0.4%: the step time is not called
    changed (it was: "B is slower: step time +154.8%"), the verdict gives both figures
    and names the stalls."""
    a, b = raw("base_a"), raw("base_b_stalls")
    ms = {k: np.array([e["dur"] for e in steps_of(d["traceEvents"])[1:]]) / 1000 for k, d in (("a", a), ("b", b))}
    d = diff(load("base_a"), load("base_b_stalls"))
    st = d.step_time
    assert st["steps_a"] == st["steps_b"] == 11
    assert st["mean_ns_b"] / 1e6 == pytest.approx(ms["b"].mean(), rel=1e-6)
    assert st["median_ns_b"] / 1e6 == pytest.approx(np.median(ms["b"]), rel=1e-6)
    assert st["rel_change"] > 1.5 and abs(st["median_rel_change"]) < 0.01, st  # +155% at the mean, +0.4% median
    assert st["change"] == "" and not d.changed, d.verdict
    assert d.verdict[0].startswith("No significant change"), d.verdict
    line = next(v for v in d.verdict if v.startswith("Step time:"))
    assert (f"median {fmt_ns(st['median_ns_a'])} -> {fmt_ns(st['median_ns_b'])} per step (+0.4%); "
            f"mean {fmt_ns(st['mean_ns_a'])} -> {fmt_ns(st['mean_ns_b'])} (+154.8%)") in line, line
    # its 2 steps of 5x the median or more are left out of the test (p 0.038 with them)
    assert line.endswith(", p=0.14 (t on log times, 0 of A's and 2 of B's steps left out as stalls); 11 vs 11 "
                         "steps: no significant change."), line
    assert any(v.startswith(f"B's longest step took {fmt_ns(st['longest_ns_b'])}") and "2 steps of 5x" in v
               for v in d.verdict), d.verdict


def _gapped(stall_step: int | None, factor: float, op0: float = 1.0) -> polyprof.Trace:
    """8 steps of 20 ops; each step ``factor`` times longer (in the gaps, not in an op),
    and ``stall_step`` 15 times longer still; aten::op0 ``op0`` times longer."""
    from polyprof.trace import TraceBuilder

    rng = np.random.default_rng(5)
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
    for k in range(8):
        o = k * 200_000_000
        step = int(10_000_000 * factor * rng.lognormal(0, 0.01) * (15 if k == stall_step else 1))
        b.event(th, f"ProfilerStep#{k}", o, step, "user_annotation")
        for i in range(20):
            b.event(th, f"aten::op{i}", o + 1000 + i * 300_000,
                    int(200_000 * (op0 if i == 0 else 1.0) * rng.lognormal(0, 0.01)), "cpu_op")
    return b.build()


def test_a_called_step_time_keeps_its_stall_note_and_says_no_row_holds_it():
    """B's every step 30% longer between its ops, and one 15x its median: the step time
    is called slower, the headline gives the median's change (+30%) beside the mean's,
    the stall that moved the mean further is still named (it was left out whenever the
    step time was called), and with no row called, the verdict says no row holds it."""
    d = diff(_gapped(None, 1.0), _gapped(5, 1.3), window=None)
    st = d.step_time
    assert st["change"] == "slower" and not d.changes, d.verdict
    assert st["median_rel_change"] == pytest.approx(0.3, abs=0.02) and st["rel_change"] > 2.5
    assert re.match(r"B is slower: median step time \+\d\d\.\d% \(mean \+\d{3}\.\d%\); 0 row\(s\) slower, 0 faster\.$",
                    d.verdict[0]), d.verdict[0]
    assert any(v.startswith("No kernel, op or section is called changed: the step time's change is in no row's "
                            "typical step") for v in d.verdict), d.verdict
    stall = next(v for v in d.verdict if v.startswith("B's longest step took"))
    assert "one stall moves its mean, beyond the change of its median step" in stall, stall


def test_an_untested_diff_lists_the_largest_changes_per_step():
    """1 vs 11 steps cannot be tested; the differences listed are per step, as the table's
    (aten::mm +113% per step read +2238% in total: 1 step against 11), and rows that did
    not move are left out."""
    d = diff(load("base_one_step"), load("base_b_stalls"))
    assert d.overview["untestable"] is not None
    ops = d.tables["ops"]
    names = column(ops, "name").tolist()
    i = names.index("aten::mm")
    a, b = column(ops, "step_mean_ns_a")[i], column(ops, "step_mean_ns_b")[i]
    ta, tb = column(ops, "total_ns_a")[i], column(ops, "total_ns_b")[i]
    assert tb / ta > 2 * (b / a)  # 11 steps' total against one step's
    line = next(v for v in d.verdict if v.startswith("Largest differences"))
    assert line.startswith("Largest differences per step (not tested): ")
    assert f"op aten::mm {fmt_ns(a)} -> {fmt_ns(b)} ({100 * (b / a - 1):+.1f}%)" in line, line
    assert fmt_ns(tb) not in line and "+0.0%" not in line


def test_an_untested_diff_of_a_trace_with_itself_lists_no_difference():
    d = diff(load("base_one_step"), load("base_one_step"))
    assert d.overview["untestable"] is not None
    assert not any(v.startswith("Largest differences") for v in d.verdict), d.verdict
    assert "Every row takes the same time per step in A and B." in d.verdict
    assert "+0.0%" not in "\n".join(d.verdict[2:])


def test_totals_against_per_step_figures_are_explained_with_one_rank():
    """One rank, 1 step against 11: rows whose total grew (11 steps) while their time per
    step fell get the note docs/analysis.md promises (it came with several ranks only)."""
    d = diff(load("base_one_step"), load("base_a"))
    ops = d.tables["ops"]
    total, step = column(ops, "delta_total_ns"), column(ops, "step_delta_ns")
    apart = int(((np.sign(total) * np.sign(step)) < 0).sum())
    assert apart > 0
    note = [v for v in d.verdict if "changed one way in total and the other per step" in v]
    assert len(note) == 1 and "A has 1 steps a trace and B 11" in note[0], d.verdict


def test_steps_recorded_as_ops_are_no_op_row(tmp_path):
    """2021's Kineto (tb_plugin's resnet50 traces) recorded ``ProfilerStep#N`` as an
    "Operator": it was an op row, the step time again, in the Holm family. It is left
    out of the ops as it is of the sections; the step time still counts its steps."""
    def as_op(events):
        for e in events:
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                e["cat"] = "Operator"
        return events

    a = variant(tmp_path, "base_a", "a", as_op)
    d = diff(a, a)
    assert d.step_time["steps_a"] == 11
    names = column(d.tables["ops"], "name").tolist() + column(d.tables["sections"], "name").tolist()
    assert not [n for n in names if n.startswith("ProfilerStep")], names
    assert "aten::mm" in names


def test_the_verdict_keeps_names_that_differ_in_the_middle_apart(traces_dir):
    """Two kernels whose names differ after their 60th character (``..._kernel_cta_...``
    and ``..._kernel_warp_...``) read the same when cut at the end: the verdict cuts them
    in the middle, and wider where that is what keeps them apart."""
    k = traces_dir / "kineto"
    d = diff(polyprof.load(k / "sampled_rank0.json.gz"), polyprof.load(k / "sampled_rank1.json.gz"))
    shown = {}
    for line in d.verdict:
        if not line.startswith(("Slower in B", "Faster in B")):
            continue
        head = line.index(": ") + 2
        for c in d.changes[:40]:
            end = f" {fmt_ns(c['step_mean_ns_a'])} -> {fmt_ns(c['step_mean_ns_b'])} per step ("
            at = line.find(end)
            while at >= 0:
                start = max(line.rfind("; ", 0, at) + 2, head)
                item = line[start:at]
                name = item.split(" ", 1)[1]
                if name == c["name"] or ("…" in name and c["name"].startswith(name.split("…")[0])
                                         and c["name"].endswith(name.split("…")[1])):
                    shown[c["name"]] = name
                at = line.find(end, at + 1)
    long = [n for n in shown if len(n) > 60]
    assert len(long) >= 4, shown
    assert len(set(shown.values())) == len(shown), shown  # no two rows read the same
    assert all("…" in shown[n] and len(shown[n]) < len(n) for n in long)
    cta = [n for n in long if "_kernel_cta" in n]
    assert cta and all("_kernel_c" in shown[n] for n in cta), shown
    other = next(line for line in d.verdict if line.startswith("B runs other work"))  # cut alike
    assert "adagrad_weighted_kernel_c…" in other and "adagrad_weighted_kernel_w…" in other, other


def test_a_trace_without_steps_against_one_with_steps_times_the_analysed_window(tmp_path):
    """A has no steps, so each side's sample is its trace; B's time is that of the steps
    it analyses (its first, the warm-up, left out, as its op totals leave it out), not
    its file's span."""
    a = variant(tmp_path, "base_a", "nosteps", lambda ev: [e for e in ev if not str(e.get("name", "")).startswith(
        "ProfilerStep#")])
    steps = steps_of(raw("base_a")["traceEvents"])[1:]  # 12 recorded, the first left out
    window_ns = (steps[-1]["ts"] + steps[-1]["dur"] - steps[0]["ts"]) * 1000
    d = diff(a, load("base_a"))
    st = d.step_time
    assert st["unit"] == "trace" and st["steps_a"] == st["steps_b"] == 1
    assert st["mean_ns_b"] == pytest.approx(window_ns, abs=2000), (st["mean_ns_b"], window_ns)
    full = polyprof.load(MLP / "base_a.pt.trace.json.gz").span_ns
    assert full[1] - full[0] > window_ns + 1e6  # the warm-up step and the profiler's tail are out


def test_the_tables_of_traces_without_steps_are_labelled_per_trace(tmp_path):
    from polyprof.cli.diff import render
    from rich.console import Console

    a = variant(tmp_path, "base_a", "nosteps", lambda ev: [e for e in ev if not str(e.get("name", "")).startswith(
        "ProfilerStep#")])
    d = diff(a, a)
    buf = io.StringIO()
    render(d, 5, console=Console(file=buf, width=160))
    text = buf.getvalue()
    assert "A/trace" in text and "B/trace" in text and "Δ%/trace" in text, text
    assert "/step" not in text and "per step" not in text.split("Verdict")[-1].split("╰")[-1], text
    with_steps = diff(load("base_a"), load("base_a"))
    buf = io.StringIO()
    render(with_steps, 5, console=Console(file=buf, width=160))
    assert "A/step" in buf.getvalue() and "/trace" not in buf.getvalue()


def test_the_html_diff_of_traces_without_steps_says_per_trace(tmp_path):
    """The HTML page's tables, chart and distributions of a diff of traces without steps
    read "per trace" as the terminal's do (they read "per step")."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from analysis import browser

    from polyprof.report.diff_html import write

    if browser.chromium() is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    a = variant(tmp_path, "base_a", "nosteps", lambda ev: [e for e in ev if not str(e.get("name", "")).startswith(
        "ProfilerStep#")])
    html = tmp_path / "d.html"
    write(diff(a, a), str(html))
    dom, log = browser.dump_dom(html)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-rendered="1"' in root and "data-js-errors" not in root, root
    body = dom.split('id="data"', 1)[0]  # what the scripts drew, before the data
    ops = body.split('id="ops-table"', 1)[1].split("</table>", 1)[0]
    assert ops.count(">per trace<") == 2 and "Δ per trace" in ops, ops[:2000]
    assert "per step" not in body and "Per-step" not in body
    assert "Changes per trace, B against A" in body and "Per-trace distributions" in body


def test_xla_cpu_ops_are_compared_as_kernels():
    """A JAX CPU program's compiled work is XLA ops on /host:CPU threads: they are the
    kernels a diff compares (before, its kernels table was empty and a wider model read
    as one op PjitFunction +3320%), each total equal to the trace's own sum."""
    from polyprof.trace.categories import Kind

    p = Path(__file__).parent / "data" / "jax_cpu" / "jax_cpu_steps.xplane.pb"
    t = polyprof.load(p)
    d = diff(t, polyprof.load(p))
    k = d.tables["kernels"]
    names = list(column(k, "name"))
    # (each op a row of its module: XLA names ops uniquely within one only)
    assert {"jit_step/ynn_fusion", "jit_step/wrapped_tanh", "jit_step/wrapped_multiply"} <= set(names)
    from polyprof.derive import cache

    steps = cache.steps(t)
    rows = t.rows_of_kind(Kind.KERNEL)
    tanh = rows[np.array([t.strings[i] == "wrapped_tanh" for i in t.events["name"][rows]])]
    start = t.events["start_ns"][tanh]
    inside = (start >= steps.start[1]) & (start < steps.end[-1])  # the window: every step but the first
    want = int(t.events["dur_ns"][tanh][inside].sum())
    i = names.index("jit_step/wrapped_tanh")
    assert column(k, "total_ns_a")[i] == column(k, "total_ns_b")[i] == want > 0


def _steps(seed: int, *, gap: float = 1.0, gap_sd: float = 0.01, big: float = 1.0, big_sd: float = 0.01,
           typical: float = 1.0, spikes: tuple[int, ...] = (), spike_ns: int = 0) -> polyprof.Trace:
    """12 steps (the first is left out as the warm-up), each 10 ops of 300 µs and
    ``aten::big`` of 8 ms (x ``big``, lognormal noise ``big_sd``), then 30 ms outside the
    ops (x ``gap``, noise ``gap_sd``), all x ``typical``; aten::big ``spike_ns`` longer
    in the steps in ``spikes``."""
    from polyprof.trace import TraceBuilder

    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
    for k in range(12):
        o = t = k * 500_000_000
        for i in range(10):
            d = int(300_000 * typical * rng.lognormal(0, 0.01))
            b.event(th, f"aten::op{i}", t, d, "cpu_op")
            t += d + 1000
        d = int(8_000_000 * big * typical * rng.lognormal(0, big_sd)) + (spike_ns if k in spikes else 0)
        b.event(th, "aten::big", t, d, "cpu_op")
        end = t + d + int(30_000_000 * gap * typical * rng.lognormal(0, gap_sd))
        b.event(th, f"ProfilerStep#{k}", o, end - o, "user_annotation")
    return b.build()


def test_the_step_time_is_not_called_against_the_way_its_test_found():
    """B's typical step 7% shorter, 5 of its 11 steps 3x longer: the test (t on the log
    step times) finds B longer (p 0.02) while its median step is shorter. The verdict read
    "B is faster: median step time -7.0% (mean +83%)"; the step time is now called only
    where the test and the median step move the same way, and says they did not."""
    from polyprof.analyze.diff_verdict import APART

    spiky = _steps(2, typical=0.93, spikes=(2, 4, 6, 8, 10), spike_ns=80_000_000)
    d = diff(_steps(1), spiky)
    st = d.step_time
    assert st["p_value"] < 0.05 and st["median_rel_change"] < -0.05 and st["rel_change"] > 0.5, st
    assert st["test_way"] == 1.0 and st["change"] == "" and st["significant"] is False and st["reason"] == APART
    assert not any(v.startswith(("B is faster", "B is slower")) for v in d.verdict), d.verdict
    med, mean = f"{100 * st['median_rel_change']:+.1f}%", f"{100 * st['rel_change']:+.1f}%"
    assert d.verdict[0].endswith(f"; step time not called either way (typical step {med}, mean {mean})."), d.verdict
    line = next(v for v in d.verdict if v.startswith("Step time:"))
    assert line.endswith(f"11 vs 11 steps: not called either way: the typical step is shorter ({med}) but the mean "
                         "of the log times is longer (some steps much slower)."), line
    # Mann-Whitney finds B's steps shorter (6 of 11 under every step of A's), as its median step is
    rank = diff(_steps(1), spiky, test="rank").step_time
    assert rank["test_way"] == -1.0 and rank["reason"] != APART


def test_rows_that_moved_within_the_noise_are_named_where_only_the_step_time_is_called():
    """B's time between the ops 20% longer and its aten::big +90% (two thirds of the step
    time's change), but so noisy from step to step that its test says nothing (p 0.14):
    the verdict said the step time's change was "in no row's typical step" (as of a JAX CPU
    pair, beside a kernel +90% at p 1); it names the row that moved, within the noise."""
    d = diff(_steps(1, big_sd=1.0), _steps(2, gap=1.2, big=1.9, big_sd=1.0))
    st = d.step_time
    assert st["change"] == "slower" and not d.changes, d.verdict
    ops = d.tables["ops"]
    i = column(ops, "name").tolist().index("aten::big")
    a, b, p = column(ops, "step_mean_ns_a")[i], column(ops, "step_mean_ns_b")[i], column(ops, "p_adjusted")[i]
    assert b - a > 0.25 * st["delta_ns"] and p > 0.05 and column(ops, "reason")[i] == "within the noise"
    line = next(v for v in d.verdict if v.startswith("No kernel, op or section is called changed"))
    assert line == (f"No kernel, op or section is called changed, though some moved by 25% of the step time's "
                    f"change or more: op aten::big {fmt_ns(a)} -> {fmt_ns(b)} per step (+{fmt_ns(b - a)}, "
                    f"{100 * (b / a - 1):+.1f}%, p={p:.2g}, within the noise)."), line


def test_a_step_time_called_with_one_run_a_side_names_the_machine():
    """One run a side, the step time called slower with no row (its time between the ops)
    or with one row slower too: the verdict said only "One run a side: the noise is
    step-to-step only" (its note on the machine came with three changed rows or more); two
    runs of one program were called +74% at p 7.8e-07 with two rows."""
    tail = ("a change of the machine or of its load between the runs (another node, other work beside it) does "
            "that as much as a change of the program; runs taking turns (A, B, A, B) and three or more runs a side "
            "tell them apart (polyprof diff A1 A2 A3 -- B1 B2 B3).")
    d = diff(_gapped(None, 1.0), _gapped(None, 1.3), window=None)
    assert d.step_time["change"] == "slower" and not d.changes, d.verdict
    assert d.verdict[-1] == "The step time is called slower with one run a side: " + tail, d.verdict
    d = diff(_gapped(None, 1.0), _gapped(None, 1.3, op0=1.5), window=None)
    assert d.step_time["change"] == "slower" and [c["name"] for c in d.changes] == ["aten::op0"], d.verdict
    assert d.verdict[-1] == "The step time and every changed row moved together (slower): " + tail, d.verdict
    d = diff(_gapped(None, 1.0), _gapped(None, 1.0, op0=1.5), window=None)  # a row alone: the step time did not move
    assert not d.step_time["change"] and d.verdict[-1].startswith("One run a side: the noise is step-to-step only")


def test_a_step_time_that_moved_but_is_not_called_is_not_said_unchanged():
    """B's median step +46%, its steps so noisy that the test says nothing (p 0.42), and a
    row called slower: the headline read "step time unchanged"; "unchanged" is now kept
    for a step time that moved less than the floors."""
    d = diff(_steps(5, gap_sd=1.0), _steps(6, gap=1.3, gap_sd=1.0, big=1.5))
    st = d.step_time
    assert not st["change"] and st["p_value"] > 0.05 and st["median_rel_change"] > 0.3, st
    assert [c["name"] for c in d.changes] == ["aten::big"], d.verdict
    assert d.verdict[0] == (f"Changes in B: 1 row(s) slower, 0 faster; step time not called changed (median "
                            f"{100 * st['median_rel_change']:+.1f}%, p={st['p_value']:.2g})."), d.verdict
    d = diff(_steps(1), _steps(2, big=1.1, gap=0.97))  # aten::big +800 µs, the time between the ops -900 µs
    assert abs(d.step_time["median_rel_change"]) < 0.05, d.step_time
    assert d.verdict[0] == "Changes in B: 1 row(s) slower, 0 faster; step time unchanged.", d.verdict


def test_the_verdict_names_its_rows_with_no_table_rows(tmp_path, capsys):
    """`polyprof diff A B -n 0` printed "Slower in B (1):  (and 1 more)." and empty
    tables: -n 0 is the verdict alone, which still names the rows."""
    from polyprof.cli import main

    def slow_mm(events):
        for e in events:
            if e.get("name") == "aten::mm" and e.get("ph") == "X":
                e["dur"] = e["dur"] * 1.5
        return events

    variant(tmp_path, "base_a", "slow_mm", slow_mm)
    a, b = MLP / "base_a.pt.trace.json.gz", tmp_path / "slow_mm.json"
    assert main(["diff", str(a), str(b), "-n", "0"]) == 0
    out = " ".join(capsys.readouterr().out.split()).replace("│ │", "").replace(" │ ", " ")
    assert "Slower in B (1): op aten::mm " in out and "(and 1 more)" not in out, out
    assert "Framework ops (host)" not in out and "┏" not in out, out


def test_a_change_in_a_few_steps_is_said_though_not_called():
    """aten::big 40 ms longer in 3 of B's 11 steps: the mean step +27%, the typical step
    +0.3%; no test over 11 steps calls it (the step time's p 0.063, the row's 0.69), and
    the verdict said only "No significant change". It now says some steps were much
    longer and names the row that moved most; a pair with no such steps says nothing."""
    d = diff(_steps(1), _steps(2, spikes=(3, 6, 9), spike_ns=40_000_000))
    line = next((v for v in d.verdict if v.startswith("The mean step time moved")), None)
    assert line is not None and "+27.1%" in line and "some steps much longer" in line, d.verdict
    assert "op aten::big 7.99 ms -> 18.9 ms per step" in line and "within the noise" in line, line
    assert not any(v.startswith("The mean step time moved") for v in diff(_steps(1), _steps(2)).verdict)


def test_one_trace_given_twice_a_side_is_refused(tmp_path, capsys):
    """A path repeated (by a glob, a script) or a byte copy of a run, as two runs of a side:
    their spread is none, and one run a side read as a replicated verdict (p=1.2e-08)."""
    import shutil

    from polyprof.cli import main

    src = Path(__file__).parent / "data" / "traces" / "kineto"
    a, b = src / "sampled_rank0.json.gz", src / "sampled_rank1.json.gz"
    copy = shutil.copy(a, tmp_path / "copy.json.gz")
    for twice, said in (([str(a), str(a)], "(the same file)"), ([str(a), str(copy)], "(byte copies)")):
        assert main(["diff", *twice, "--", str(b)]) == 1
        err = capsys.readouterr().err
        assert f"in A are one trace {said}: give each run once" in err, err


def test_rows_new_in_b_or_gone_from_it_are_counted_apart_from_faster_and_slower():
    """XLA re-fusing around an added op: its old fusion gone, new ones come. The headline
    counted a gone row as "faster" and a new one as "slower" (a JAX CPU program with one
    added op read "3 row(s) slower, 2 faster")."""
    from polyprof.trace import TraceBuilder

    def run(names: tuple[str, ...]) -> polyprof.Trace:
        rng = np.random.default_rng(len(names[-1]))
        b = TraceBuilder()
        th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
        for k in range(12):
            o = t = k * 100_000_000
            for n in names:
                d = int(2_000_000 * rng.lognormal(0, 0.01))
                b.event(th, n, t, d, "cpu_op")
                t += d + 1000
            b.event(th, f"ProfilerStep#{k}", o, t + 1_000_000 - o, "user_annotation")
        return b.build()

    d = diff(run(("aten::mm", "aten::old_fusion")), run(("aten::mm", "aten::new_fusion_one")))
    head = d.verdict[0]
    assert "0 row(s) slower, 0 faster, 1 new, 1 gone" in head, d.verdict
