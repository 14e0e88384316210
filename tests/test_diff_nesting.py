"""polyprof diff groups the changed rows nested in one another that moved together (one
change of a torch op moves its autograd wrapper and the op it calls: three rows, one
change; analyze/diff_nesting.py), and keeps apart nested rows that changed on their
own: synthetic nested ops (TraceBuilder) and real torch CPU runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import diff
from polyprof.report.diff_html import page_data

WRAP, OP, CALLEE = "autograd::engine::evaluate_function: ReluBackward0", "ReluBackward0", "aten::threshold_backward"

# a span: (name, self time in µs, children, category)
Span = tuple[str, float, list, str]


def op(name: str, self_us: float, *children: Span, category: str = "cpu_op") -> Span:
    return (name, self_us, list(children), category)


def run(tree: list[Span], seed: int, steps: int = 10) -> polyprof.Trace:
    """A trace of ``steps`` steps, each the spans of ``tree`` one after the other on one
    thread, each span's own time drawn with 1% noise, 2 µs between spans."""
    from polyprof.trace import TraceBuilder

    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
    spans: list[tuple[str, int, int, str]] = []  # name, start, duration, category

    def lay(span: Span, t: int) -> int:
        name, self_us, children, category = span
        at = len(spans)
        spans.append((name, t, 0, category))
        end = t + 2000
        for child in children:
            end = lay(child, end) + 2000
        end += int(self_us * 1000 * rng.lognormal(0, 0.01))
        spans[at] = (name, t, end - t, category)  # (its length is known once its children are)
        return end

    for k in range(steps):
        t0 = k * 10_000_000
        at = len(spans)
        spans.append(("", 0, 0, ""))
        t = t0 + 1000
        for span in tree:
            t = lay(span, t) + 2000
        spans[at] = (f"ProfilerStep#{k}", t0, t - t0, "user_annotation")
    for name, start, dur, category in spans:
        b.event(th, name, start, dur, category)
    return b.build()


def relu_backward(callee_us: float) -> list[Span]:
    return [op(WRAP, 5, op(OP, 5, op(CALLEE, callee_us))), op("aten::mm", 400)]


def test_a_slower_callee_and_the_ops_around_it_are_one_change():
    """B's aten::threshold_backward 300 -> 500 µs a step: it, ReluBackward0 and the
    autograd wrapper around that are each called slower (the tables keep three rows), and
    the verdict counts and names one change: the callee, with the two rows around it (it
    read "3 row(s) slower" and listed three)."""
    d = diff(run(relu_backward(300), 1), run(relu_backward(500), 2))
    ops = d.tables["ops"].to_pandas().set_index("name")
    assert list(ops.loc[[WRAP, OP, CALLEE], "change"]) == ["slower"] * 3
    assert ops.loc["aten::mm", "change"] == ""
    assert d.verdict[0].startswith("B is slower") or d.verdict[0].startswith("Changes in B")
    assert "1 change(s) slower, 0 faster, in 3 rows (nested rows that moved together count as one change)" \
        in d.verdict[0], d.verdict
    slower = next(line for line in d.verdict if line.startswith("Slower in B"))
    assert slower.startswith(f"Slower in B (1): op {CALLEE} ")
    assert f"; with op {OP} and op {WRAP} around it, which moved with it)" in slower, slower
    # the changes (the JSON's verdict.changes): one group, the callee its lead, the others around it
    by = {c["name"]: c for c in d.changes}
    assert {c["group"] for c in d.changes} == {0} and [c["lead"] for c in d.changes].count(True) == 1
    assert by[CALLEE]["lead"] and [(r["name"], r["relation"]) for r in by[CALLEE]["nested"]] == \
        [(OP, "around"), (WRAP, "around")]
    assert by[OP]["nested"] == by[WRAP]["nested"] == []
    assert 180_000 < by[CALLEE]["step_delta_ns"] < 220_000
    # the HTML diff's chart says which rows are one change
    chart = {r["name"]: r for r in page_data(d)["chart"]}
    assert chart[CALLEE]["one_change_with"] == [OP, WRAP] and chart[WRAP]["one_change_with"] == [CALLEE, OP]


@pytest.mark.parametrize("b_add, counts", [(280, "2 row(s) slower, 1 faster"), (550, "3 row(s) slower, 0 faster")])
def test_children_that_changed_on_their_own_stay_apart(b_add, counts):
    """aten::linear around aten::mm (400 -> 600 µs) and aten::add (400 -> 280 µs, or ->
    550 µs): the op moved by +80 µs (or +350 µs), neither child's change is its change
    (+200 against +80; +200 against +350): three changes."""
    a = run([op("aten::linear", 10, op("aten::mm", 400), op("aten::add", 400))], 3)
    b = run([op("aten::linear", 10, op("aten::mm", 600), op("aten::add", b_add))], 4)
    d = diff(a, b)
    assert sorted(c["name"] for c in d.changes) == ["aten::add", "aten::linear", "aten::mm"], d.verdict
    assert sorted(c["group"] for c in d.changes) == [0, 1, 2] and all(c["lead"] for c in d.changes)
    assert f"Changes in B: {counts}" in d.verdict[0] or f"; {counts}." in d.verdict[0], d.verdict
    assert "moved with it" not in d.text


def test_a_row_called_in_two_places_goes_with_the_place_of_its_change():
    """aten::linear called once in section "block" and once at the top of each step; the
    one in the block 300 -> 500 µs: the section and the op are one change (half the op's
    calls, all of its change, are in the block). aten::mm once in AddmmBackward0 and once
    at the top, the top one 300 -> 500 µs while AddmmBackward0's own time grew as much:
    both changed by +200 µs, but the op's change is not inside the other, two changes."""
    def tree(block_us: float, top_mm_us: float, own_us: float) -> list[Span]:
        return [op("block", 5, op("aten::linear", block_us), category="user_annotation"), op("aten::linear", 300),
                op("AddmmBackward0", own_us, op("aten::mm", 300)), op("aten::mm", top_mm_us)]

    d = diff(run(tree(300, 300, 100), 5), run(tree(500, 500, 300), 6))
    by = {c["name"]: c for c in d.changes}
    assert set(by) == {"block", "aten::linear", "AddmmBackward0", "aten::mm"}, d.verdict
    assert by["aten::linear"]["lead"] and by["aten::linear"]["nested"] == [
        {"table": "sections", "name": "block", "step_delta_ns": by["block"]["step_delta_ns"], "relation": "around"}]
    assert by["block"]["group"] == by["aten::linear"]["group"] and not by["block"]["lead"]
    assert by["aten::mm"]["group"] != by["AddmmBackward0"]["group"] and by["aten::mm"]["nested"] == []
    assert "3 change(s) slower, 0 faster, in 4 rows" in d.verdict[0], d.verdict
    slower = next(line for line in d.verdict if line.startswith("Slower in B"))
    assert "op aten::linear " in slower and "with section block around it, which moved with it" in slower


NESTING = Path(__file__).resolve().parent / "data" / "traces" / "mlp_nesting"


def test_real_torch_wider_linear_is_one_change_per_op():
    """Two real torch CPU runs (tests/data/traces/mlp_nesting, recorded here: run at test
    time they were called otherwise when the machine was busy), B's hidden layer 1024
    wide instead of 256: the backward matmul (aten::mm) is called slower with
    AddmmBackward0 and its autograd wrapper around it, one change; the forward
    aten::addmm with aten::linear and the section "block" around it, one change (mm +1.05
    ms a step, its wrappers +1.06 and +1.08 ms; addmm +0.62 ms, linear +0.63, block
    +0.64 ms): 3 changes in 9 rows. (4 in 11 before the floors looked at the typical step
    too: aten::relu with aten::clamp_min inside it, 10.6 -> 86.6 µs per step at the mean,
    +17.5 µs at the median, B's relu 20-30 µs a step but twice 236-241 µs.)"""
    d = diff(polyprof.load(NESTING / "narrow.json.gz"), polyprof.load(NESTING / "wide.json.gz"))
    by = {c["name"]: c for c in d.changes}
    wrap = "autograd::engine::evaluate_function: AddmmBackward0"
    assert {"aten::mm", "AddmmBackward0", wrap, "aten::addmm", "aten::linear", "block"} <= set(by), d.verdict
    assert by["aten::mm"]["lead"] and [r["name"] for r in by["aten::mm"]["nested"]] == ["AddmmBackward0", wrap]
    assert by["aten::addmm"]["lead"] and [r["name"] for r in by["aten::addmm"]["nested"]] == ["aten::linear", "block"]
    assert "3 change(s) slower, 0 faster, in 9 rows (nested rows" in d.verdict[0], d.verdict
    assert "aten::relu" not in by and d.tables["ops"].to_pandas().set_index("name").loc[
        "aten::relu", "reason"] == "below the effect floor"
    slower = next(line for line in d.verdict if line.startswith("Slower in B"))
    assert "op aten::mm " in slower and f"with op AddmmBackward0 and op {wrap} around it" in slower, slower


def test_a_chain_of_wrappers_groups_only_what_moved_as_the_lead():
    """aten::mm +200 µs inside W1 (+250: its own time +50) inside W2 (+310): each moved
    within 80% of its neighbour, but W2 moved 1.55x the lead's change; its own 110 µs
    would be hidden in "one change". mm and W1 are one change, W2 another."""
    def tree(mm: float, w1: float, w2: float) -> list[Span]:
        return [op("W2", w2, op("W1", w1, op("aten::mm", mm))), op("aten::add", 400)]

    d = diff(run(tree(300, 100, 100), 1), run(tree(500, 150, 160), 2))
    by = {c["name"]: c for c in d.changes}
    assert by["aten::mm"]["lead"] and [r["name"] for r in by["aten::mm"]["nested"]] == ["W1"], d.verdict
    assert by["W2"]["lead"] and by["W2"]["group"] != by["aten::mm"]["group"]
    assert "2 change(s) slower, 0 faster, in 3 rows" in d.verdict[0], d.verdict


def test_a_new_wrapper_around_a_slightly_slower_op_is_its_own_change():
    """B wraps aten::mm (1 -> 1.15 ms) in a new section: all of the op's change is inside
    the section, but the section's change (new, +1.15 ms) is not the op's: two changes."""
    a = run([op("aten::mm", 1000), op("aten::add", 300)], 1)
    b = run([op("mm_block", 2, op("aten::mm", 1150), category="user_annotation"), op("aten::add", 300)], 2)
    d = diff(a, b)
    assert all(c["lead"] and not c["nested"] for c in d.changes) and len(d.changes) == 2, d.verdict


def test_the_html_diff_counts_one_change(tmp_path):
    """The page of the callee's diff, drawn by headless Chromium without a script error:
    the verdict counts one change, the note under the chart three rows and one change,
    and each bar's title names the rows of its change."""
    import re
    import sys
    from pathlib import Path

    from polyprof.report import diff_html

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from analysis import browser

    if browser.chromium() is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    d = diff(run(relu_backward(300), 1), run(relu_backward(500), 2))
    dom, log = browser.dump_dom(diff_html.write(d, tmp_path / "diff.html"))
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-rendered="1"' in root and "data-js-errors" not in root, root
    assert not [line for line in log.splitlines() if "Uncaught" in line]
    assert "1 change(s) slower, 0 faster, in 3 rows" in dom
    assert "3 row(s) called changed (1 change(s): nested rows that moved together count as one)" in dom
    chart = dom.split('id="changes-svg"', 1)[1].split("</svg>", 1)[0]
    assert chart.count('class="bar slower"') == 3
    assert f"one change with {OP}, {WRAP}</title>" in chart and f"one change with {CALLEE}, {OP}</title>" in chart
