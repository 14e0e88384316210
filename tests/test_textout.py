"""The summary written without rich (report/textout.py) against rich's Console printing
the same parts: real traces' summaries and hand-made paragraphs, at several widths,
plain, in colour and with NO_COLOR; and the terminal's width and styling as rich's
Console reads them from the environment. rich is the reference; nothing expected is
copied from the code under test."""

from __future__ import annotations

import io
import os

import pytest
from rich.console import Console, Group

import polyprof
from polyprof.report import grid, terminal, textout
from polyprof.report.tables import build
from polyprof.report.textout import Boxed, Para, Terminal, plain_terminal, representable, to_rich

TRACES = ("kineto/mi250_rocm_minitoy.json.gz", "kineto/sampled_rank0.json.gz", "xspace/tpu_inference_2.xplane.pb")
WIDTHS = (20, 23, 41, 80, 121, 200)


def _rich(items, width: int, styled: bool, no_color: bool) -> str:
    buf = io.StringIO()
    kw = {"force_terminal": True, "color_system": "standard"} if styled else {"color_system": None}
    c = Console(file=buf, width=width, no_color=no_color, _environ={}, **kw)
    c.print(Group(*(to_rich(x) for x in items)), emoji=False, highlight=False, crop=False)
    return buf.getvalue()


def _same(items, width: int) -> None:
    assert representable(items)
    for styled, no_color in ((False, False), (True, False), (True, True)):
        got = textout.render(items, Terminal(width, styled, no_color))
        assert got == _rich(items, width, styled, no_color), (width, styled, no_color)


@pytest.mark.parametrize("name", TRACES)
def test_a_summary_prints_as_rich_prints_it(traces_dir, name):
    report = build(polyprof.load(traces_dir / name))
    assert report.findings  # the box is drawn
    for width in WIDTHS:
        items: list = []
        terminal._parts(items.append, report, 15, width)
        _same(items, width)


WORDS = [
    "short", "", " ", "x" * 19, "x" * 20, "y" * 21, "z" * 65, "trailing   ", "   leading", "a  b   c    d",
    "two\nlines", "\n", "ends\n", "\n\nblank lines\n\n", "bell\x07 and cr\r\n", "µs Δ ● … ┃ ⠿ ¥ → — ≤≥ᵀ", "word " * 30,
    "a" * 15 + " " + "b" * 30 + "   " + "c" * 7, "nbsp\xa0joined\xa0words " * 6, "x " * 40 + "y" * 50,
]


def test_paragraphs_wrap_as_rich_wraps_them():
    styles = (None, "bold", "dim", "italic", "red", "green", "yellow", "cyan")
    paras = []
    for i, w in enumerate(WORDS):
        paras.append(Para(((w, styles[i % len(styles)]),), indent=i % 3))
        paras.append(Para(((w[:7], "red"), (" ", None), (w[7:], "bold"), (w, None), (w, "dim"))))
        paras.append(Para(((w[:7], "red"), (" ", None), (w[7:], "bold"), (w, None)), indent=i % 2, hang=1 + i % 3))
    for width in WIDTHS:
        _same(paras, width)
        _same([Boxed("Findings", tuple(paras)), Para((("after", None),))], width)


def test_the_extra_characters_are_one_cell_in_richs_tables():
    from rich.cells import cell_len, chop_cells

    for c in textout.EXTRA_ONE_CELL:
        assert cell_len(c) == 1 and chop_cells("ab" + c * 5 + "cd", 3) == ["ab" + c, c * 3, c + "cd"], repr(c)


def test_cells_are_counted_and_set_as_rich_does():
    from rich.cells import cell_len
    from rich.cells import set_cell_size as rich_set_cell_size

    for t in ["", "plain", "a…b", "…", "µs Δ ●", "→ ≤ ≥ — ᵀ", "┃ na… ┃ 3 ┃", "畳み込み…", "tab\there", "e\u0301", "ok…\x00"]:
        assert textout._cells(t) == cell_len(t), repr(t)
        for n in (-2, 0, 1, 3, 12):
            assert textout.set_cell_size(t, n) == rich_set_cell_size(t, n), (t, n)


def test_what_it_does_not_repeat_goes_to_rich():
    assert not representable([Para((("tab\there", None),))])
    assert not representable([Para((("wide 畳み込み", None),))])
    assert not representable([Boxed("F", (Para((("e\u0301", None),)),))])
    assert not representable([Para((("x", "underline"),))])
    assert representable([grid.Grid("wide 畳み込み", [("h", 3, True)], [["畳"]])])  # a Grid measures itself


class _File(io.StringIO):
    def __init__(self, tty: bool, encoding: str = "utf-8"):
        super().__init__()
        self._tty, self._encoding = tty, encoding

    def isatty(self) -> bool:
        return self._tty

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding


ENVS = [{}, {"COLUMNS": "97"}, {"COLUMNS": "97", "LINES": "10"}, {"COLUMNS": "x"}, {"FORCE_COLOR": "1"},
        {"FORCE_COLOR": ""}, {"TTY_COMPATIBLE": "1"}, {"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"},
        {"NO_COLOR": "1"}, {"TERM": "dumb"}, {"TERM": "dumb", "COLUMNS": "97"},
        {"TERM": "unknown", "COLUMNS": "97", "LINES": "9"}, {"TERM": "xterm-256color", "COLORTERM": "truecolor"}]


@pytest.mark.parametrize("tty", (False, True))
def test_width_and_styling_are_richs(tty):
    for env in ENVS:
        f = _File(tty)
        term = plain_terminal(f, env)
        c = Console(file=f, _environ=env)
        assert term is not None, env
        assert (term.width, term.styled, term.no_color) == (c.width, c.color_system is not None, c.no_color), env
    assert plain_terminal(_File(tty, "ascii"), {}) is None  # rich draws ASCII boxes there
    assert plain_terminal(_File(tty), {"COLUMNS": "19"}) is None


def test_the_command_writes_what_rich_writes(traces_dir, tmp_path, monkeypatch, capsys):
    """``render`` with no console: the text path, as rich's own Console would print it."""
    report = build(polyprof.load(traces_dir / TRACES[0]))
    for env in ({"COLUMNS": "90"}, {"COLUMNS": "64", "FORCE_COLOR": "1"}, {"COLUMNS": "64", "FORCE_COLOR": "1", "NO_COLOR": "1"}):
        for k in ("COLUMNS", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TERM"):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        terminal.render(report)
        got = capsys.readouterr().out
        buf = io.StringIO()
        terminal.render(report, console=Console(file=buf, _environ=dict(os.environ), force_terminal="FORCE_COLOR" in env))
        assert got == buf.getvalue(), env


def test_what_textout_cannot_print_goes_through_rich(traces_dir, monkeypatch, capsys):
    """A summary with text rich measures by its tables (a wide character in a warning),
    or in a notebook: printed by rich's own Console, as before."""
    import builtins

    report = build(polyprof.load(traces_dir / TRACES[0]))
    report.overview["warnings"] = ["畳み込み\tkernel"]
    monkeypatch.setenv("COLUMNS", "70")
    terminal.render(report)
    got = capsys.readouterr().out
    buf = io.StringIO()
    terminal.render(report, console=Console(file=buf, _environ=dict(os.environ)))
    assert got == buf.getvalue() and "畳み込み" in got
    monkeypatch.setattr(builtins, "get_ipython", lambda: None, raising=False)
    assert plain_terminal(io.StringIO(), {}) is None
