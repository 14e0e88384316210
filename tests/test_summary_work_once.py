"""A small JAX XSpace's summary does each piece of work once, and only where its output
is used (docs/benchmarks.md, "Twenty-second session: small XSpaces"): the memory peaks
shared by the memory tables and findings, the device's peaks by the efficiency tables
and findings, HLO costs only for the instructions that ran, no FLOP rules for a trace
without input shapes, no name pattern compiled for names it cannot change, a table's
narrowest widths only for a table too wide. Each test counts the cause (calls, imports,
compiled patterns), not time; the tables and texts stay what they were (the summaries'
outputs are compared whole in tests/test_xspace_golden.py and tests/test_textout.py)."""

from __future__ import annotations

import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze import efficiency, memory, peaks
from polyprof.analyze.frames import column
from polyprof.report import grid, names, terminal, textout
from polyprof.report.fit import fit_texts
from polyprof.trace.stats import StatColumn, StatTable

DATA = Path(__file__).resolve().parent / "data"
CONV = DATA / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb"
ATTN = DATA / "peers" / "tracelens" / "jax_te_fused_attn_934987a2fc2f.xplane.pb"
SRC = Path(__file__).resolve().parents[1] / "src"


def _child(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_memory_peaks_found_once_for_the_tables_and_the_findings(monkeypatch):
    """memory_peak, memory_at_peak and both of the findings' peak_holders read the same
    peak and live allocations per series: _live_at runs once a series, not four times."""
    t = polyprof.load(CONV)
    calls = []
    live_at = memory._live_at
    monkeypatch.setattr(memory, "_live_at", lambda *a: calls.append(a[1:]) or live_at(*a))
    pk = memory.memory_peak(t)
    memory.memory_at_peak(t)
    by_section, by_op = memory.peak_holders(t, "section"), memory.peak_holders(t, "op")
    assert len(pk) == 8 and len(calls) == 8 == len(set(calls))
    # the tables are those of each series' own peak: the live bytes the holders share out
    assert sorted(column(pk, "live_at_peak_bytes").tolist()) == sorted(
        int(column(by_op, "bytes")[column(by_op, "device") == d].sum()) for d in column(pk, "device").tolist())
    assert column(by_section, "bytes").sum() == column(by_op, "bytes").sum()


def test_device_peaks_matched_once_per_trace(monkeypatch):
    t = polyprof.load(CONV)
    calls = []
    match = peaks.identify
    monkeypatch.setattr(peaks, "identify", lambda p: calls.append(1) or match(p))
    mfu = efficiency.mfu(t)
    efficiency.op_efficiency(t)
    first = peaks.device_peak(t)
    over = peaks.device_peak(t, "bf16=1e15")
    assert len(calls) == 1  # one model of GPU on its eight planes, matched once for all
    assert first is not None and "MI300X" in first.source and column(mfu, "peak_flops_per_s")[0] > 0
    assert over is not None and over.rates["bf16_tensor"] == 1e15 != first.rates["bf16_tensor"]


def test_hlo_costs_only_the_instructions_that_ran(monkeypatch):
    """Of the attention module's 72 costed instructions, 20 ran: only those are costed,
    each to the figure costing the whole module gives it."""
    from polyprof.analyze.flops import hlo_costs
    from polyprof.formats.xspace import hlo_cost

    t = polyprof.load(ATTN)
    costed = []
    cost = hlo_cost.ModuleCosts.cost
    monkeypatch.setattr(hlo_cost.ModuleCosts, "cost", lambda self, ins: costed.append(ins.name) or cost(self, ins))
    hc = hlo_costs(t)
    ran = set(hc.op_name.tolist())
    assert len(ran) == 20 and sorted(costed) == sorted(ran)
    monkeypatch.setattr(hlo_cost.ModuleCosts, "cost", cost)
    from polyprof.formats.xspace.gpu import hlo_modules

    mods = hlo_modules(t)
    (key,) = [k for k in mods.protos if mods.module(k) is not None and k[0] in set(hc.op_module.tolist())]
    whole = hlo_cost.module_costs(mods.module(key))
    some = hlo_cost.module_costs(mods.module(key), names=ran)
    assert len(whole) == 72 and set(some) == ran
    for name, c in some.items():
        w = whole[name]
        assert (c.bytes, c.precision) == (w.bytes, w.precision) and (c.flops == w.flops or math.isnan(w.flops))


def test_a_trace_without_input_shapes_imports_no_flop_rules():
    """The rules that estimate FLOPs from torch's input shapes (analyze/op_rules.py, ~0.4
    ms to import) are not imported for a trace that has none: a GPU XSpace's ops are costed
    from its HLO. A Kineto trace with shapes still is estimated."""
    code = ("import sys, io, contextlib\nfrom polyprof.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['summary', {str(CONV)!r}]) == 0\n"
            "print('polyprof.analyze.op_rules' in sys.modules)")
    assert _child(code).split() == ["False"]
    kineto = polyprof.load(DATA / "traces" / "kineto" / "mi250_rocm_minitoy.json.gz")
    oe = efficiency.op_efficiency(kineto)
    assert "shapes" in set(column(oe, "flops_source").tolist())


def test_stat_table_may_have_decodes_nothing():
    st = StatTable({"a": StatColumn(np.array([0]), np.array([1]))})
    decoded = []
    st.defer(lambda: decoded.append(1) or {"b": StatColumn(np.array([1]), np.array([2]))}, complete=("c",))
    assert st.may_have("a") and st.may_have("b") and not st.may_have("c") and not decoded
    st.defer(lambda: {}, may_hold="d".__eq__)
    assert st.may_have("d") and not st.may_have("c") and not decoded


def test_hlo_records_are_plain_classes_and_compile_no_pattern_at_import():
    """The HLO decoder's and costs' records define no NamedTuple (each compiles its fields'
    annotations at import) but ``OpCost``, a value compared as a tuple; their patterns
    are compiled on first use."""
    code = ("import typing, re, sys\nfrom polyprof.formats.xspace import hlo, hlo_cost, xla_costs\n"
            "mods = (hlo, hlo_cost, xla_costs)\n"
            "print(sorted(n for m in mods for n, v in vars(m).items() if isinstance(v, type)"
            " and v.__module__ == m.__name__ and issubclass(v, tuple) and n != 'OpCost'))\n"
            "print(sorted(n for m in mods for n, v in vars(m).items() if isinstance(v, re.Pattern)))")
    assert _child(code).split("\n")[:2] == ["[]", "[]"]


def test_hlo_module_names_and_repr_patterns_still_read():
    from polyprof.formats.xspace import hlo

    entries = [{"name": "jit_step(3977)", "stats": {hlo.HLO_PROTO: b"\n\x01x"}},
               {"name": "jit_step(12345678901234567890)", "stats": {hlo.HLO_PROTO: b"y"}},
               {"name": "old(7)", "stats": {hlo.HLO_PROTO: repr(b"it's\n")}}]
    assert hlo.modules(entries) == {("jit_step", 3977): b"\n\x01x", ("old", 7): b"it's\n"}
    assert hlo.kernel_names({"fusion.1": "jit(f)/add", "a-b": ""}) == {"fusion_1": ("fusion.1", "jit(f)/add"),
                                                                      "a_b": ("a-b", "")}


def test_names_compile_no_pattern_for_names_they_cannot_change(monkeypatch):
    """A device, stream or XLA op name has no C++ return type, qualifier after it or
    argument list of types: its ladder tries none of those patterns (compiling the return
    type's costs ~0.2 ms in a fresh process)."""
    seen = []
    compile_ = re.compile
    monkeypatch.setattr(names.re, "compile", lambda p, *a: seen.append(p) or compile_(p, *a))
    for name in ("/device:GPU:0", "Stream #17", "PjRtStreamExecutorLoadedExecutable::Execute", "input_fusion.kd"):
        names._signature(name)
    assert names._RETURN not in seen and names._TRAILING not in seen
    seen.clear()
    assert names.ladder("void at::native::k<float>(int*, float) const")[1:] == (
        "at::native::k<float>", "k<float>", "k")
    assert names._RETURN in seen and names._TRAILING in seen


def test_a_table_that_fits_works_out_no_narrowest_widths(monkeypatch):
    """The narrowest width of a name column (each name shortened, report/names.py) is
    only worked out for a table wider than the terminal."""
    t = polyprof.load(CONV)
    calls = []
    monkeypatch.setattr(grid, "ladder", lambda s: calls.append(s) or names.ladder(s))
    tb = memory.memory_peak(t)
    cols = [("device", "device", None), ("allocator", "allocator", None), ("peak_bytes", "peak", str)]
    wide = grid._table("peaks", tb, cols, 15, 80)
    assert not calls and [w for _, w, _ in wide.columns] == [13, 9, 10]
    narrow = grid._table("peaks", tb, cols, 15, 35)  # (narrower, the peak would be left out instead)
    assert calls and [w for _, w, _ in narrow.columns][0] < 13
    assert narrow.rows[0][0] == "GPU:1"  # shortened as before: the device without "/device:"


def test_a_narrow_table_leaves_blank_columns_first_and_names_what_it_left_out():
    """At 80 columns a column every row of which is "-" (a CPU-only job's device shares)
    leaves before an optional column with values, and the title names the optional
    columns left out (a blank one has nothing to miss)."""
    from polyprof.analyze.frames import frame

    tb = frame({"rank": np.arange(2), "file": np.array(["a_long_file_name.json.gz"] * 2, object),
                "compute": np.full(2, np.nan), "comm": np.array([302e6, 40e6]),
                "events": np.array([2000, 2852])})
    pct = lambda x: "-" if x != x else f"{x:.1f}%"  # noqa: E731
    cols = [("rank", "rank", str), ("file", "file", str, 2), ("compute", "compute", pct),
            ("comm", "communication", str), ("events", "events", str, 1)]
    g = grid._table("Ranks", tb, cols, 15, 60)
    assert g.headers == ["rank", "file", "communication", "events"] and g.title == "Ranks"
    g = grid._table("Ranks", tb, cols, 15, 40)
    assert g.headers == ["rank", "communication", "events"] and g.title == "Ranks  (left out: file)"


def test_cuda_looked_up_once_per_trace():
    from polyprof.analyze import advice

    class Counted(list):
        looked = 0

        def __contains__(self, x):
            Counted.looked += 1
            return super().__contains__(x)

    t = polyprof.load(CONV)
    t.strings = Counted(t.strings)
    texts = {advice.suggestion(t, "host_bound") for _ in range(5)}
    # once for CUDA, once for OpenCL (the framework's, as before): not once a suggestion
    assert len(texts) == 1 and "jax.jit" in texts.pop() and Counted.looked == 2


def test_cell_sizes_and_word_breaks_as_measured_one_by_one():
    rng = random.Random(7)
    alphabet = "ab :<>é… \u3000\t█x"
    for _ in range(3000):
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(8))) for _ in range(rng.randrange(5))]
        assert textout.cell_sizes(texts) == [textout._cells(s) for s in texts]
    assert textout._breaks("ab  cd e", 3) == [4, 7] and textout._breaks("abcdefg", 3) == [3, 6]
    assert textout._breaks("   ", 2) == [] and fit_texts([], 5) == [] and names.fit_names([], 5) == []


def test_the_terminal_summary_computes_no_table_it_does_not_show(monkeypatch, capsys):
    """`polyprof summary` prints neither device_op_breakdown nor kernel_efficiency, and no
    finding reads them: only ``--json`` (and the HTML report) compute them. The findings
    and every table shown are those of the full report."""
    from polyprof.analyze import devops, kernel_roofline
    from polyprof.cli import main
    from polyprof.report.tables import build

    calls = []
    for mod, name in ((devops, "device_op_breakdown"), (kernel_roofline, "kernel_efficiency")):
        fn = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _f=fn, _n=name, **k: calls.append(_n) or _f(*a, **k))
    assert main(["summary", str(CONV)]) == 0
    assert calls == [] and "Top device activity" in capsys.readouterr().out
    assert main(["summary", "--json", str(CONV)]) == 0
    assert calls == ["device_op_breakdown", "kernel_efficiency"] and '"kernel_efficiency"' in capsys.readouterr().out
    full, shown = build(polyprof.load(CONV)), build(polyprof.load(CONV), leave_out=terminal.NOT_SHOWN)
    assert list(shown.tables) == [n for n in full.tables if n not in terminal.NOT_SHOWN]
    assert all(shown.tables[n].equals(full.tables[n]) for n in shown.tables)
    assert [f.to_dict() for f in shown.findings] == [f.to_dict() for f in full.findings]
    assert shown.overview == full.overview


def test_a_lambdas_instance_tells_kernels_apart_once_shortened() -> None:
    """nvcc names a kernel's lambdas ``[lambda(int, int) (instance 2)]``; the shortened
    name emptied every argument list, so CloverLeaf's kernels read alike
    (``par_ranged2d_kernel<PdV_kernel()::[lambda() ()]>`` for instances 1 and 2) and the
    terminal's column cut them where they did not differ (audit audC F5)."""
    from polyprof.report.names import ladder

    name = ("void clover::par_ranged2d_kernel<PdV_kernel(bool, int, double, clover::Buffer2D<double> &)::"
            "[lambda(int, int) (instance 2)]>(clover::Range2d, T1)")
    assert ladder(name)[2] == "par_ranged2d_kernel<PdV_kernel()::[lambda() (instance 2)]>"
