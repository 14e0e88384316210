"""The summary's fast paths against the general ones they stand in for (issue 17, small
traces): one print of every part against a print per part, the terminal cell count
against rich's, column reads against pandas'. Real traces; no expected text copied from
the code under test."""

from __future__ import annotations

import io
from functools import partial

import numpy as np
import pandas as pd
import pytest
from rich.cells import cell_len
from rich.console import Console

import polyprof
from polyprof.analyze.frames import column
from polyprof.report import grid, terminal
from polyprof.report.tables import build
from polyprof.report.textout import to_rich

SMALL = ("triton_example", "cuda_event_sync_multistream", "mi250_rocm_minitoy", "a100_alexnet_small",
         "cpu_only_rank34", "a100_cupti_counters")


def _console(width: int, color: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    kw = {"force_terminal": True, "color_system": "truecolor"} if color else {"color_system": None}
    return Console(file=buf, width=width, **kw), buf


def _part_by_part(report, top: int, width: int, color: bool) -> str:
    """The summary as it was printed before: one ``console.print`` per part, cropped."""
    console, buf = _console(width, color)
    show = partial(console.print, emoji=False, highlight=False)
    terminal._parts(lambda x: show(to_rich(x)), report, top, console.width)
    return buf.getvalue()


@pytest.mark.parametrize("name", SMALL)
def test_one_print_writes_what_a_print_per_part_wrote(traces_dir, name):
    path = next((traces_dir / "kineto").glob(f"{name}.json*"))
    report = build(polyprof.load(path))
    for width, color, top in ((160, False, 15), (60, False, 15), (40, False, 5), (120, True, 15)):
        console, buf = _console(width, color)
        terminal.render(report, top, console)
        assert buf.getvalue() == _part_by_part(report, top, width, color), (name, width, color)
        if not color:  # printed uncropped: every part must fit by itself
            lines = buf.getvalue().splitlines()
            assert lines and max(cell_len(line) for line in lines) <= width, (name, width)


def test_cell_count_is_richs():
    texts = ["", "plain", "x" * 600, "a…b", "…", "µs Δ ●", "┃ name ┃ 3 ┃", "┃ na… ┃ 3 ┃", "畳み込み…", "tab\there",
             "bell\x07", "emoji 🚀…", "e\u0301", "zero\u200dwidth", "\u00adsoft", "ok…\x00"]
    for t in texts:
        assert terminal._cells(t) == cell_len(t), repr(t)


def test_column_reads_what_pandas_reads():
    df = pd.DataFrame({"i": np.arange(4), "f": [1.5, np.nan, 2.0, 3.0], "o": np.array(["a", None, "b", "c"], object),
                       "s": pd.array(["x", "y", None, "z"], dtype="string"), "n": pd.array([1, None, 3, 4], "Int64"),
                       "c": pd.Categorical(["p", "q", "p", "p"])})
    for c in df.columns:
        got, want = column(df, c), df[c].to_numpy()
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype, c
        assert got.tolist() == want.tolist() or all(
            (a is b) or (a == b) or (a != a and b != b) for a, b in zip(got.tolist(), want.tolist())), c
    dup = pd.DataFrame([[1, 2], [3, 4]], columns=["a", "a"])  # a duplicated label: pandas' frame
    assert column(dup, "a").tolist() == dup["a"].to_numpy().tolist() == [[1, 2], [3, 4]]


def test_one_value_is_nunique_of_one():
    cases = [["a", "a"], ["a", "b"], ["a", None], [None, None], [np.nan, np.nan], ["a"], [1, 1], [1.0, np.nan]]
    for v in cases:
        a = np.array(v, object)
        assert grid._one_value(a) == (pd.Series(a).nunique(dropna=False) == 1), v


@pytest.mark.parametrize("name", ["mi250_rocm_minitoy", "cuda_event_sync_multistream", "a100_alexnet_small",
                                  "sampled_rank0"])
def test_device_rows_reused_from_a_lone_stream_are_what_computing_them_gives(traces_dir, name, monkeypatch):
    from polyprof.analyze import breakdown

    path = next((traces_dir / "kineto").glob(f"{name}.json*"))
    fast = [breakdown.temporal_breakdown(polyprof.load(path)), breakdown.idle_time_breakdown(polyprof.load(path))]
    groups = breakdown._groups
    monkeypatch.setattr(breakdown, "_groups", lambda t: ((p, k, s, False) for p, k, s, _ in groups(t)))
    general = [breakdown.temporal_breakdown(polyprof.load(path)), breakdown.idle_time_breakdown(polyprof.load(path))]
    for a, b in zip(fast, general):
        assert a.equals(b)
    assert (fast[0]["stream"] == breakdown.ALL_STREAMS).any()


def test_quartiles_are_numpys_percentiles():
    from polyprof.analyze.queues import quartiles

    rng = np.random.default_rng(0)
    for n in [*range(1, 40), 101, 1000, 4096, 4097, 5000, 20001]:
        for x in (rng.integers(0, 9, n).astype(float), rng.random(n) * 1e3, rng.random(n) * 1e15,
                  np.where(rng.random(n) < 0.1, np.nan, 1.0)):
            got, want = quartiles(x), np.percentile(x, [25, 50, 75])
            assert np.array_equal(got, want, equal_nan=True), (n, x[:5])


def test_a_fitting_text_prints_as_rich_prints_it():
    from rich.console import Group
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.text import Text

    texts = [Text("short"), Text.assemble(("bold", "bold"), " and plain µs…"), Text("x" * 79), Text("x" * 80),
             Text("y" * 81), Text("trailing   "), Text("tab\there"), Text("two\nlines"), Text("styled", style="red"),
             Text("left", justify="left"), Text("centre", justify="center"), Text("wide 畳み込み層"),
             Text.assemble(("● high", "red"), " ", ("a finding title that is long enough to wrap " * 3, "bold"))]
    for width in (20, 40, 80, 160):
        for color in (False, True):
            for t in texts:
                # as a part of the summary: inside a Group, a Padding, a Panel
                for wrap in (lambda x: Group(x), lambda x: Padding(x, (0, 0, 0, 2)), lambda x: Panel(Group(x))):
                    a, buf_a = _console(width, color)
                    b, buf_b = _console(width, color)
                    a.print(wrap(terminal.Fit(t)))
                    b.print(wrap(t))
                    assert buf_a.getvalue() == buf_b.getvalue(), (width, color, t.plain)
