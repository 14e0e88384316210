"""polyprof diff's other lists of rows group nested rows as its changes do
(analyze/diff_nesting.py): the rows that moved within the noise where no row is called,
and "B runs other work" name a wrapper, its op and the op's callee as one item, by the
innermost, with the others around it (they were three items). Real recorded traces
(tests/data/traces/mlp_cpu, mlp_shapes_cpu) and synthetic nested ops (TraceBuilder)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import diff
from polyprof.analyze.frames import column
from polyprof.analyze.units import fmt_ns

TRACES = Path(__file__).resolve().parent / "data" / "traces"
WRAP, OP, CALLEE = "autograd::engine::evaluate_function: ReluBackward0", "ReluBackward0", "aten::threshold_backward"
BWD_WRAP = "autograd::engine::evaluate_function: AddmmBackward0"


def line_of(d, start: str) -> str:
    return next(v for v in d.verdict if v.startswith(start))


def named(line: str, table: str, name: str) -> bool:
    """Whether ``line`` names the row as an item of its own (after ": " or "; ")."""
    return re.search(rf"(: |; ){re.escape(table)} {re.escape(name)} ", line) is not None


def row(d, table: str, name: str) -> tuple[float, float]:
    df = d.tables[table]
    i = column(df, "name").tolist().index(name)
    return float(column(df, "step_mean_ns_a")[i]), float(column(df, "step_mean_ns_b")[i])


def steps(seed: int, *, calls: int = 1, gap: float = 1.0, big: float = 1.0, big_sd: float = 0.01) -> polyprof.Trace:
    """12 steps on one thread (the first left out as the warm-up), each 10 ops of 300 µs,
    then ``calls`` times the autograd wrapper around ReluBackward0 around
    aten::threshold_backward (8 ms x ``big``, lognormal noise ``big_sd``; 5 µs of each
    wrapper's own), then 30 ms outside the ops (x ``gap``)."""
    from polyprof.trace import TraceBuilder  # (as the other diff tests build their traces)

    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=1), "main", "thread", tid=1)
    for k in range(12):
        o = t = k * 500_000_000
        for i in range(10):
            d = int(300_000 * rng.lognormal(0, 0.01))
            b.event(th, f"aten::op{i}", t, d, "cpu_op")
            t += d + 1000
        for _ in range(calls):
            d = int(8_000_000 * big * rng.lognormal(0, big_sd))
            b.event(th, WRAP, t, d + 12_000, "cpu_op")
            b.event(th, OP, t + 1000, d + 7000, "cpu_op")
            b.event(th, CALLEE, t + 2000, d, "cpu_op")
            t += d + 13_000
        end = t + int(30_000_000 * gap * rng.lognormal(0, 0.01))
        b.event(th, f"ProfilerStep#{k}", o, end - o, "user_annotation")
    return b.build()


def test_real_rows_that_moved_within_the_noise_are_grouped():
    """The same program twice, B with 4 stalled steps (tests/data/traces/mlp_cpu): no row
    is called and the mean step moved +155%; "moved most" named aten::mm, aten::linear and
    aten::addmm, the last two one family (aten::linear around aten::addmm, +1.09 ms each).
    It names aten::addmm with aten::linear around it, and a third item in the place
    aten::linear took: AddmmBackward0 with its autograd wrapper around it."""
    d = diff(polyprof.load(TRACES / "mlp_cpu" / "base_a.pt.trace.json.gz"),
             polyprof.load(TRACES / "mlp_cpu" / "base_b_stalls.pt.trace.json.gz"))
    assert not d.changes
    line = line_of(d, "The mean step time moved")
    a, b = row(d, "ops", "aten::addmm")
    assert f"op aten::addmm {fmt_ns(a)} -> {fmt_ns(b)} per step (+{fmt_ns(b - a)}, " in line, line
    assert "within the noise; with op aten::linear around it, which moved with it); " in line, line
    assert not named(line, "op", "aten::linear"), line
    assert named(line, "op", "aten::mm") and named(line, "op", "AddmmBackward0"), line
    assert f"with op {BWD_WRAP} around it, which moved with it)." in line, line
    assert line.count(" per step (") == 3  # three items, five rows


def test_real_other_work_is_grouped():
    """Eager against torch.compile'd MLP (tests/data/traces/mlp_shapes_cpu): "B runs other
    work" listed AddmmBackward0 and its autograd wrapper, and CompiledFunctionBackward, its
    wrapper and the graph section it calls, as five items. They are two: each named by its
    innermost row, with the rows around it."""
    d = diff(polyprof.load(TRACES / "mlp_shapes_cpu" / "eager_mlp_cpu.json.gz"),
             polyprof.load(TRACES / "mlp_shapes_cpu" / "compiled_mlp_cpu.json.gz"))
    line = line_of(d, "B runs other work: ")
    a, _ = row(d, "ops", "AddmmBackward0")
    assert line.startswith(f"B runs other work: op AddmmBackward0 gone ({fmt_ns(a)} per step; with op {BWD_WRAP} "
                           "around it, which went with it); section ## Call CompiledFxGraph "), line
    assert re.search(r"section ## Call CompiledFxGraph \S+ ## new \([^;]+ per step; with op CompiledFunctionBackward "
                     r"and op autograd::engine::evaluate_function\S*CompiledFunctionBackward around it, which came "
                     r"with it\)", line), line
    for name in (BWD_WRAP, "CompiledFunctionBackward"):
        assert not named(line, "op", name), line
    # the changes group the same rows alike
    by = {c["name"]: c for c in d.changes}
    assert [r["name"] for r in by["AddmmBackward0"]["nested"]] == [BWD_WRAP]


def test_rows_that_moved_within_the_noise_are_one_item_per_family():
    """B's time between the ops 20% longer and aten::threshold_backward +90%, so noisy that
    no test calls it, nor ReluBackward0 and the autograd wrapper around it: the step time
    is called slower and no row; the verdict named the three rows as three that moved
    within the noise. It names the callee, with the two around it."""
    d = diff(steps(1, big_sd=1.0), steps(2, gap=1.2, big=1.9, big_sd=1.0))
    assert d.step_time["change"] == "slower" and not d.changes, d.verdict
    line = line_of(d, "No kernel, op or section is called changed, though some moved by 25%")
    a, b = row(d, "ops", CALLEE)
    assert f": op {CALLEE} {fmt_ns(a)} -> {fmt_ns(b)} per step (+{fmt_ns(b - a)}, " in line, line
    assert line.endswith(f"within the noise; with op {OP} and op {WRAP} around it, which moved with it)."), line
    assert not named(line, "op", OP) and not named(line, "op", WRAP), line


@pytest.mark.parametrize("calls_a, calls_b, said", [
    (0, 1, "new ({} per step; with op {} and op {} around it, which came with it)"),
    (1, 2, "1 -> 2 calls per step (with op {1} and op {2} around it, which are called more often with it)"),
    (2, 1, "2 -> 1 calls per step (with op {1} and op {2} around it, which are called less often with it)")])
def test_other_work_is_one_item_per_family(calls_a, calls_b, said):
    """B adds the autograd wrapper around ReluBackward0 around aten::threshold_backward to
    every step, or calls it twice a step instead of once, or once instead of twice: "B
    runs other work" named three rows; it names the callee, with the two around it."""
    d = diff(steps(3, calls=calls_a), steps(4, calls=calls_b))
    line = line_of(d, "B runs other work: ")
    _, b = row(d, "ops", CALLEE)
    assert line.startswith(f"B runs other work: op {CALLEE} " + said.format(fmt_ns(b), OP, WRAP) + ". "), line
    assert not named(line, "op", OP) and not named(line, "op", WRAP), line


def test_without_the_nesting_each_row_is_an_item():
    """verdict_lines without the nesting (a caller that has none) lists each row."""
    from polyprof.analyze.diff_verdict import _other_work

    d = diff(steps(3, calls=0), steps(4, calls=1))
    other, rows = _other_work(d.tables, d.step_time, d.overview["abs_floor_ns"], fmt_ns)
    assert [o.split(" new ")[0] for o in other] == [f"op {WRAP}", f"op {OP}", f"op {CALLEE}"], other
    assert rows == {("ops", WRAP), ("ops", OP), ("ops", CALLEE)}, rows
