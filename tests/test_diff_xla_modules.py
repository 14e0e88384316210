"""polyprof diff keys XLA ops by (module, name): XLA names ops uniquely within a module
only, so ``ynn_fusion`` of ``jit_augment`` and ``ynn_fusion`` of ``jit_train_step`` are two
ops, and ``ynn_fusion.1`` of one module is not ``ynn_fusion`` (XProf's op statistics key
an op by program and name too).

Fixture: tests/data/traces/jax_cpu_two_jits (README.md there), two real JAX CPU runs of
a step calling two jitted functions whose ops share names; the second run makes
``augment`` alone slower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import diff
from polyprof.analyze.frames import column
from polyprof.analyze.names import normalize_name, normalize_op_name
from polyprof.derive import cache
from polyprof.trace.categories import Kind

DATA = Path(__file__).parent / "data" / "traces" / "jax_cpu_two_jits"
FAST, SLOW = DATA / "run_fast.xplane.pb.gz", DATA / "run_slow.xplane.pb.gz"


@pytest.fixture(scope="module")
def runs() -> tuple[polyprof.Trace, polyprof.Trace]:
    return polyprof.load(FAST), polyprof.load(SLOW)


def _own_ns(t: polyprof.Trace) -> Counter:
    """Per (module, op) the own time of the XLA ops that start in steps 1.. (the window
    diff analyses): each event's duration less its direct children's on its thread, a
    stack walk event by event (the test's oracle)."""
    ev = t.events
    steps = cache.steps(t)
    rows = t.rows_of_kind(Kind.KERNEL)
    st = ev["start_ns"][rows]
    rows = rows[(st >= steps.start[1]) & (st < steps.end[-1])]
    mod = t.stats["hlo_module"]
    module = dict(zip(mod.rows.tolist(), mod.values.tolist()))
    own: Counter = Counter()
    for track in sorted(set(ev["track"][rows].tolist())):
        r = rows[ev["track"][rows] == track]
        r = r[np.lexsort((-ev["dur_ns"][r].astype(np.int64), ev["start_ns"][r]))]
        stack: list[tuple[tuple[str, str], int]] = []
        for i in r.tolist():
            s, d = int(ev["start_ns"][i]), int(ev["dur_ns"][i])
            key = (module[i], t.strings[ev["name"][i]])
            while stack and stack[-1][1] <= s:
                stack.pop()
            own[key] += d
            if stack:
                own[stack[-1][0]] -= d
            stack.append((key, s + d))
    return own


def test_the_slower_function_s_op_is_named_with_its_module(runs):
    """Before, the verdict named ``ynn_fusion`` 97.2 µs -> 1.32 ms per step, the sum of
    ``jit_augment``'s ynn_fusion and ``jit_train_step``'s three matmuls, and said that B
    calls ``ynn_fusion`` 7 -> 8 times per step (augment's new ``ynn_fusion.1`` folded
    into it); nothing said "augment". Now the one change is ``jit_augment/ynn_fusion``,
    25.9 µs -> 1.25 ms per step, and no op of ``jit_train_step`` is called changed."""
    a, b = runs
    d = diff(a, b)
    assert [(c["table"], c["name"], c["change"]) for c in d.changes] == [
        ("kernels", "jit_augment/ynn_fusion", "slower")]
    c = d.changes[0]
    assert round(c["step_mean_ns_a"]) == 25_882 and round(c["step_mean_ns_b"]) == 1_248_058
    assert "kernel jit_augment/ynn_fusion 25.9 µs -> 1.25 ms per step" in d.text
    assert "7 -> 8 calls" not in d.text
    k = d.tables["kernels"]
    rows = {n: i for i, n in enumerate(column(k, "name").tolist())}
    i = rows["jit_augment/ynn_fusion"]
    assert column(k, "module")[i] == "jit_augment" and column(k, "kernel")[i] == "ynn_fusion"
    assert (column(k, "count_a")[i], column(k, "count_b")[i]) == (28, 28)  # 7 steps x 4 trips
    train = [j for n, j in rows.items() if n.startswith("jit_train_step/")]
    assert train and all(column(k, "change")[j] == "" for j in train)
    assert set(column(k, "module").tolist()) == {"jit_augment", "jit_train_step"}


def test_each_hlo_instruction_of_a_module_is_a_row(runs):
    """``ynn_fusion``, ``ynn_fusion.1`` and ``ynn_fusion.2`` of ``jit_train_step`` are three
    matmuls: three rows, each with the own time of its events (before: one row with
    ``jit_augment``'s too); augment's ``ynn_fusion.1``, new in the slow run, is new."""
    a, b = runs
    k = diff(a, b).tables["kernels"]
    names = column(k, "name").tolist()
    for side, t in (("a", a), ("b", b)):
        own = _own_ns(t)
        total = column(k, f"total_ns_{side}")
        assert {tuple(n.split("/", 1)) for n, x in zip(names, total) if x} == set(own)
        for n, x in zip(names, total):
            assert x == own[tuple(n.split("/", 1))], n
    got = dict(zip(names, zip(column(k, "count_a").tolist(), column(k, "total_ns_a").tolist())))
    assert [got[f"jit_train_step/ynn_fusion{s}"] for s in ("", ".1", ".2")] == [(7, 80_791), (7, 75_022),
                                                                               (7, 343_530)]
    assert got["jit_augment/ynn_fusion.1"] == (0, 0)
    assert all(v == 1 for v in column(k, "variants").tolist())


def test_raw_names_keep_the_module(runs):
    """``normalize=False`` (``--raw-names``) keys by module and raw name too."""
    a, b = runs
    k = diff(a, b, normalize=False).tables["kernels"]
    names = set(column(k, "name").tolist())
    assert {"jit_augment/ynn_fusion", "jit_train_step/ynn_fusion", "jit_train_step/ynn_fusion.2"} <= names
    assert not [n for n in names if "/" not in n]


def test_instance_numbers_fold_only_without_a_module():
    """The ``.N`` fold stays for op names whose module is unknown (a TPU's XLA Ops line:
    ``copy-done`` ... ``copy-done.5`` one row); within a known module ``.N`` is kept."""
    assert normalize_name("copy-done.3") == "copy-done" and normalize_name("fusion.3.1") == "fusion"
    assert normalize_op_name("copy-done.3") == "copy-done.3" and normalize_op_name("dot.1") == "dot.1"
    assert normalize_op_name("loop_fusion.kd") == "loop_fusion"  # the other rules still apply
    assert normalize_name("jit_f(12190760917235803885)") == "jit_f"


def test_the_command_names_the_module(tmp_path):
    """`polyprof diff` prints the module with the op; --json keeps them apart too."""
    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(FAST), str(SLOW)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "jit_augment/ynn_fusion" in r.stdout and "jit_train_st…/ynn_fusion.2" in r.stdout
    r = subprocess.run([sys.executable, "-m", "polyprof", "diff", str(FAST), str(SLOW), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rec = next(x for x in doc["tables"]["kernels"]["records"] if x["name"] == "jit_augment/ynn_fusion")
    assert (rec["module"], rec["kernel"], rec["change"]) == ("jit_augment", "ynn_fusion", "slower")
