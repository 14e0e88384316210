"""Fitting a table's cells costs as much whatever the length of their texts (report/fit.py,
``bounded``): a 100 MB kernel name took ``summary`` 16 s, its whole text scanned by every
table's fitting (``fit_texts``, ``elide``, ``_tail``). The work is checked by the longest
text fit's helpers are handed, not by a clock."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from polyprof.report import fit

HUGE = 3_000_000
BOUND = 2 * fit.SCAN_CHARS + 1


@pytest.fixture
def longest(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The longest text each helper fit.py calls was given, recorded."""
    seen = [0]

    def spy(f: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(s: Any, *a: Any) -> Any:
            texts = s if isinstance(s, list) else [s]
            seen[0] = max([seen[0], *map(len, texts)])
            return f(s, *a)
        return wrapped

    for name in ("_cells", "one_cell", "set_cell_size", "cell_sizes", "_tail", "_last_cells", "_apart", "_words"):
        monkeypatch.setattr(fit, name, spy(getattr(fit, name)))
    return seen


def test_fit_texts_looks_at_a_bounded_part_of_a_long_name(longest: list[int]) -> None:
    a = "ns::kernel_" + "x" * HUGE + "::run"
    b = "ns::kernel_" + "x" * HUGE + "::stop"
    c = "ns::kernel_" + "y" * HUGE
    out = fit.fit_texts([a, b, c, "short"], 40)
    assert longest[0] <= BOUND, longest[0]
    assert all(len(s) <= 40 for s in out) and out[3] == "short"
    assert len(set(out)) == 4, out  # apart by their ends (a, b) and where they differ (c)
    assert out[0].endswith("::run") and out[1].endswith("::stop")


def test_elide_looks_at_a_bounded_part(longest: list[int]) -> None:
    s = "start_" + "z" * HUGE + "_end"
    assert fit.elide(s, 20, 4) == "start_" + "z" * 9 + "…_end"
    assert longest[0] <= BOUND


def test_short_names_fit_as_before() -> None:
    names = ["aten::mm", "aten::addmm", "autograd::engine::evaluate_function: AddmmBackward0"]
    assert fit.fit_texts(names, 30)[:2] == names[:2]
    assert fit.bounded("x" * BOUND, 10) == "x" * BOUND  # at the bound: whole


def test_summary_of_a_trace_with_a_huge_name_fits_it_boundedly(tmp_path: Path, longest: list[int]) -> None:
    from polyprof.cli import main

    name = "k_" + "x" * HUGE + "_end"
    ev = [{"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 10.0, "dur": 5.0,
           "args": {"device": 0, "stream": 7, "correlation": 1}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5.0, "dur": 2.0,
           "args": {"correlation": 1}}]
    path = tmp_path / "huge.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["summary", str(path)]) in (0, None)
    assert "k_xxxx" in out.getvalue()
    assert 0 < longest[0] <= BOUND, longest[0]
