"""polyprof diff's verdict on real traces: stalls against the typical step, the figures
of an untested diff, the note on totals against per-step figures with one rank, steps
recorded as ops, names that differ in the middle, the time of a trace without steps,
and the tables' headers then (tests/data/traces/mlp_cpu: two runs of one program, one
with 4 stalled steps; tests/data/traces/kineto)."""

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
    assert line.endswith(", p=0.14 (t on log times, 2 stall(s) left out); 11 vs 11 steps: no significant change."), line
    assert any(v.startswith(f"B's longest step took {fmt_ns(st['longest_ns_b'])}") and "2 steps of 5x" in v
               for v in d.verdict), d.verdict


def _gapped(stall_step: int | None, factor: float) -> polyprof.Trace:
    """8 steps of 20 ops; each step ``factor`` times longer (in the gaps, not in an op),
    and ``stall_step`` 15 times longer still."""
    from polyprof.trace import TraceBuilder

    rng = np.random.default_rng(5)
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
    for k in range(8):
        o = k * 200_000_000
        step = int(10_000_000 * factor * rng.lognormal(0, 0.01) * (15 if k == stall_step else 1))
        b.event(th, f"ProfilerStep#{k}", o, step, "user_annotation")
        for i in range(20):
            b.event(th, f"aten::op{i}", o + 1000 + i * 300_000, int(200_000 * rng.lognormal(0, 0.01)), "cpu_op")
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
    assert {"ynn_fusion", "wrapped_tanh", "wrapped_multiply"} <= set(names)
    from polyprof.derive import cache

    steps = cache.steps(t)
    rows = t.rows_of_kind(Kind.KERNEL)
    tanh = rows[np.array([t.strings[i] == "wrapped_tanh" for i in t.events["name"][rows]])]
    start = t.events["start_ns"][tanh]
    inside = (start >= steps.start[1]) & (start < steps.end[-1])  # the window: every step but the first
    want = int(t.events["dur_ns"][tanh][inside].sum())
    i = names.index("wrapped_tanh")
    assert column(k, "total_ns_a")[i] == column(k, "total_ns_b")[i] == want > 0
