"""The terminal summary written as text without importing rich: what rich's Console
prints for polyprof's few kinds of output, character for character.

Importing rich's console costs a fresh process about as much CPU as a small trace's
analyses (docs/benchmarks.md, issue 35), and a summary prints only three kinds of
thing: paragraphs of styled pieces (word-wrapped as rich wraps a ``Text``), the boxed
findings (rich's ``Panel`` of paragraphs), and ``report.grid.Grid`` tables, which
draw their own lines. This module writes those as rich would to the same output: the
same width (``COLUMNS``, else the terminal's, else 80), the same wrapping and the same
SGR escape codes when the output is a terminal (``FORCE_COLOR``, ``TTY_COMPATIBLE``,
``NO_COLOR`` and dumb terminals as rich reads them).

Where rich would do something this module does not (Jupyter, IDLE, Windows consoles,
an output encoding other than UTF-8, text with characters rich measures with its
Unicode tables, tabs, styles not listed here, a very narrow terminal), :func:`plain_terminal`
or :func:`representable` says no and the caller prints through rich.
tests/test_textout.py holds the two to the same bytes.
"""

from __future__ import annotations

import builtins
import os
import re
import sys
from abc import ABC, abstractmethod
from itertools import chain
from typing import IO, TYPE_CHECKING, Iterator, Mapping, Sequence, Union, cast

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.measure import Measurement
    from rich.segment import Segment
    from rich.text import Text

#: a run of text and its style (None: unstyled): one of :data:`SGR`'s names
Piece = tuple[str, Union[str, None]]
#: rich's SGR parameters of the styles the summary uses (``rich.style.Style``)
SGR = {"bold": "1", "dim": "2", "italic": "3", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
_COLORS = frozenset(("red", "green", "yellow", "cyan"))
#: characters outside those ranges that polyprof's own texts use (the ellipsis of
#: shortened names, arrows of op chains, ...): each one cell and one grapheme in rich's
#: tables (tests/test_textout.py checks it)
EXTRA_ONE_CELL = "…—→≤≥ᵀ"
#: characters rich gives one cell each and measures without its Unicode tables
#: (``rich.cells._SINGLE_CELL_UNICODE_RANGES``), and :data:`EXTRA_ONE_CELL`
_SINGLE = frozenset(map(chr, chain.from_iterable(range(a, b + 1) for a, b in (
    (0x20, 0x7E), (0xA0, 0xAC), (0xAE, 0x2FF), (0x370, 0x482), (0x2500, 0x25FC), (0x2800, 0x28FF)))))
_ONE_CELL = _SINGLE | frozenset(EXTRA_ONE_CELL)
#: control codes rich's Text drops (``rich.control.STRIP_CONTROL_CODES``)
_STRIP = {7: None, 8: None, 11: None, 12: None, 13: None}
_WORD = re.compile(r"\s*\S+\s*")
_TRAILING_SPACE = r"\s+$"  # compiled on first use (re's cache): only a wrapped cell with trailing spaces
#: narrower than this, rich's panel lays its title out differently; rich prints it
MIN_WIDTH = 20


# Para, Boxed and Terminal are plain classes: a NamedTuple's fields are type-checked at
# every start (docs/benchmarks.md, issue 35)
class Para:
    """A paragraph: styled pieces word-wrapped to the width less ``indent`` spaces; the
    lines after its first ``hang`` spaces further in (a finding's title under its words)."""

    __slots__ = ("pieces", "indent", "hang")
    pieces: tuple[Piece, ...]
    indent: int
    hang: int

    def __init__(self, pieces: tuple[Piece, ...], indent: int = 0, hang: int = 0):
        self.pieces, self.indent, self.hang = pieces, indent, hang

    @property
    def plain(self) -> str:
        return "".join(t for t, _ in self.pieces)


class Boxed:
    """Paragraphs in a rounded box with a title on its top border (rich's ``Panel``
    with ``title_align="left"``)."""

    __slots__ = ("title", "paras")
    title: str
    paras: tuple[Para, ...]

    def __init__(self, title: str, paras: tuple[Para, ...]):
        self.title, self.paras = title, paras


class Lines(ABC):
    """Something that draws its own lines at a width: ``(text, style)`` per line,
    cropped to the width by itself (``report.grid.Grid``)."""

    @abstractmethod
    def lines(self, width: int) -> list[Piece]:
        """The lines at ``width``."""


Item = Union[Para, Boxed, Lines]


class Terminal:
    """Where the summary goes, as rich's ``Console(file=...)`` would see it: its ``width``,
    whether to write SGR codes (``styled``: a terminal that is not dumb), and NO_COLOR
    (``no_color``: bold, dim and italic only)."""

    __slots__ = ("width", "styled", "no_color")
    width: int
    styled: bool
    no_color: bool

    def __init__(self, width: int, styled: bool, no_color: bool):
        self.width, self.styled, self.no_color = width, styled, no_color


def plain_terminal(file: IO[str], environ: Mapping[str, str] | None = None) -> Terminal | None:
    """The width and styling rich's ``Console(file=file)`` would use, or None where rich
    does more than this module repeats (see the module's doc)."""
    env = os.environ if environ is None else environ
    if sys.platform == "win32" or hasattr(builtins, "get_ipython"):
        return None
    if getattr(sys.stdin, "__module__", "").startswith("idlelib"):
        return None
    if not (getattr(file, "encoding", "utf-8") or "utf-8").lower().startswith("utf"):
        return None
    tty_compatible, force = env.get("TTY_COMPATIBLE", ""), env.get("FORCE_COLOR")
    if tty_compatible in ("0", "1"):
        terminal = tty_compatible == "1"
    elif force is not None:
        terminal = force != ""
    else:
        try:
            terminal = bool(file.isatty())
        except ValueError:
            terminal = False
    dumb = terminal and env.get("TERM", "").lower() in ("dumb", "unknown")
    width = _width(env, dumb)
    if width < MIN_WIDTH:
        return None
    return Terminal(width, terminal and not dumb, env.get("NO_COLOR", "") != "")


def _width(env: Mapping[str, str], dumb: bool) -> int:
    """``rich.console.Console.size``'s width on a POSIX system."""
    columns, lines = env.get("COLUMNS"), env.get("LINES")
    if columns is not None and columns.isdigit():
        if (lines is not None and lines.isdigit()) or not dumb:
            return int(columns)
    if dumb:
        return 80
    width = None
    for fd in _std_fds():
        try:
            width = os.get_terminal_size(fd)[0]
        except (AttributeError, ValueError, OSError):
            continue
        break
    return width or 80


def _std_fds() -> tuple[int, int, int]:
    out = []
    for stream, default in ((sys.__stdin__, 0), (sys.__stdout__, 1), (sys.__stderr__, 2)):
        try:
            out.append(stream.fileno())  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - as rich: no stream, or one without a descriptor
            out.append(default)
    return out[0], out[1], out[2]


def one_cell(s: str) -> bool:
    """Every character of ``s`` is one cell and one grapheme as rich measures it."""
    return (s.isascii() and s.isprintable()) or _ONE_CELL.issuperset(s)


def _cells(s: str) -> int:
    """``rich.cells.cell_len(s)``: its length where every character is one cell
    (:func:`one_cell`; rich measures other text character by character, loading its
    Unicode tables in a fresh process)."""
    if s.isascii() and s.isprintable():  # one_cell's first test, here without its call (thousands a summary)
        return len(s)
    return len(s) if _ONE_CELL.issuperset(s) else cell_len(s)


def cell_sizes(texts: list[str]) -> list[int]:
    """:func:`_cells` of each of ``texts`` (a table column's cells): their lengths where
    all of them are printable ASCII, found by one test of them joined, else each measured."""
    joined = "".join(texts)
    if joined.isascii() and joined.isprintable():
        return list(map(len, texts))
    return list(map(_cells, texts))


def cell_len(s: str) -> int:
    """``rich.cells.cell_len``: rich's Unicode tables, imported for text that needs them."""
    from rich.cells import cell_len as rich_cell_len  # rich only where a character is not one cell

    return rich_cell_len(s)


def set_cell_size(s: str, n: int) -> str:
    """``rich.cells.set_cell_size``: ``s`` cropped or padded with spaces to ``n`` cells."""
    if (s.isascii() and s.isprintable()) or _SINGLE.issuperset(s):  # rich's own short cut
        return s + " " * (n - len(s)) if len(s) < n else s[:n]
    if one_cell(s):  # one cell and one grapheme each: what rich's walk over graphemes gives
        return "" if n <= 0 else s + " " * (n - len(s)) if len(s) < n else s[:n]
    from rich.cells import set_cell_size as rich_set_cell_size  # rich only where a character is not one cell

    return rich_set_cell_size(s, n)


def _text_ok(s: str) -> bool:
    return one_cell(s.replace("\n", ""))


def representable(items: Sequence[Item]) -> bool:
    """Whether every paragraph uses only :data:`SGR`'s styles and one-cell characters
    (newlines allowed, tabs not), so that :func:`render` prints what rich prints."""
    for item in items:
        paras = item.paras if isinstance(item, Boxed) else (item,) if isinstance(item, Para) else ()
        for p in paras:
            for text, style in p.pieces:
                if (style is not None and style not in SGR) or not _text_ok(text.translate(_STRIP)):
                    return False
    return True


def _breaks(text: str, width: int) -> list[int]:
    """Where rich's word wrap (``rich._wrap.divide_line``, folding) breaks ``text`` of
    one-cell characters into lines of ``width``."""
    out: list[int] = []
    used = 0
    for m in _WORD.finditer(text):  # each word from where the last ended (its spaces after it included)
        start, word = m.start(), m.group(0)
        n = len(word.rstrip())
        if width - used >= n:
            used += len(word)
        elif n > width:  # a word longer than a line: folded into pieces of a line each
            pieces = [word[i:i + width] for i in range(0, len(word), width)]
            for k, piece in enumerate(pieces):
                if start:
                    out.append(start)
                if k == len(pieces) - 1:
                    used = len(piece)
                else:
                    start += len(piece)
        elif used and start:
            out.append(start)
            used = len(word)
    return out


def _cut(pieces: Sequence[Piece], a: int, b: int) -> list[Piece]:
    """The pieces of characters ``a`` to ``b``."""
    out, at = [], 0
    for text, style in pieces:
        lo, hi = max(a - at, 0), min(b - at, len(text))
        if lo < hi:
            out.append((text[lo:hi], style))
        at += len(text)
    return out


def wrap(pieces: Sequence[Piece], width: int) -> list[list[Piece]]:
    """``Text.assemble(*pieces)`` wrapped as rich wraps it at ``width`` (justify
    "default", overflow "fold"): lines of pieces."""
    pieces = [(t.translate(_STRIP), s) for t, s in pieces]
    text = "".join(t for t, _ in pieces)
    out, start = [], 0
    for line in text.split("\n"):
        end = start + len(line)
        cuts = [start, *(start + b for b in _breaks(line, width)), end]
        for a, b in zip(cuts, cuts[1:]):
            if b - a > width:  # whitespace past the width goes (Text.rstrip_end)
                m = re.compile(_TRAILING_SPACE).search(text, a, b)
                b -= min(len(m.group(0)), b - a - width) if m else 0
            out.append(_cut(pieces, a, min(b, a + width)))  # then cropped (Text.truncate)
        start = end + 1
    return out


def _styled(pieces: Sequence[Piece], term: Terminal) -> str:
    if not term.styled:
        return "".join(t for t, _ in pieces)
    out = []
    for text, style in pieces:
        sgr = SGR[style] if style is not None and not (term.no_color and style in _COLORS) else ""
        out.append(f"\x1b[{sgr}m{text}\x1b[0m" if sgr and text else text)
    return "".join(out)


def rest_start(plain: str, first: int) -> int:
    """Where the lines after a paragraph's first begin, its first line ``first``
    characters long: past the spaces it ended with and the newline that ended it."""
    n = len(plain)
    while first < n and plain[first] == " ":
        first += 1
    return first + 1 if first < n and plain[first] == "\n" else first


def _para_lines(p: Para, width: int, term: Terminal, pad: bool) -> list[str]:
    """A paragraph's lines, indented and (``pad``) filled with spaces to ``width``; with
    a hanging indent, its first line, then the rest wrapped ``hang`` narrower and filled
    (rich's ``Padding`` of the rest: :class:`Hanging`)."""
    inner = width - p.indent
    lines = wrap(p.pieces, inner)
    if p.hang and len(lines) > 1:
        pieces = [(t.translate(_STRIP), s) for t, s in p.pieces]
        plain = "".join(t for t, _ in pieces)
        rest = _cut(pieces, rest_start(plain, sum(len(t) for t, _ in lines[0])), len(plain))
        lines = [lines[0], *([(" " * p.hang, None), *line] for line in wrap(rest, inner - p.hang))]
    out = []
    for i, line in enumerate(lines):
        n = sum(len(t) for t, _ in line)
        out.append(" " * p.indent + _styled(line, term) + (" " * (inner - n) if pad or (i and p.hang) else ""))
    return out


def _boxed_lines(b: Boxed, width: int, term: Terminal) -> list[str]:
    """rich's ``Panel(Group(*paras), title=b.title, title_align="left")``: a rounded box
    the full width, one space inside each side."""
    title = f" {b.title} "[: width - 4]
    out = ["╭─" + title + "─" * (width - 4 - len(title)) + "─╮"]
    for p in b.paras:
        out.extend(f"│ {line} │" for line in _para_lines(p, width - 4, term, pad=True))
    out.append("╰" + "─" * (width - 2) + "╯")
    return out


def render(items: Sequence[Item], term: Terminal) -> str:
    """What ``Console.print(Group(*items), crop=False)`` writes (``items`` as rich
    renderables: :func:`to_rich`), for a :class:`Terminal` and :func:`representable` items."""
    out: list[str] = []
    for item in items:
        if isinstance(item, Para):
            out.extend(_para_lines(item, term.width, term, pad=item.indent > 0))  # rich's Padding fills
        elif isinstance(item, Boxed):
            out.extend(_boxed_lines(item, term.width, term))
        else:
            out.extend(_styled([piece], term) for piece in item.lines(term.width))
    return "".join(line + "\n" for line in out)


def to_rich(item: Item) -> RenderableType:
    """The rich renderable :func:`render` stands for (rich prints what this module
    cannot): a paragraph as ``Text.assemble`` (indented by ``Padding``), the box as a
    ``Panel``, a :class:`Lines` as itself (it renders itself for rich too)."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.text import Text

    if isinstance(item, Boxed):
        return Panel(Group(*(to_rich(p) for p in item.paras)), title=Text(item.title), title_align="left")
    if isinstance(item, Para):
        text = Text.assemble(*(t if st is None else (t, st) for t, st in item.pieces))
        fit = Hanging(text, item.hang) if item.hang else Fit(text)
        return Padding(fit, (0, 0, 0, item.indent)) if item.indent else fit
    return cast("RenderableType", item)  # a Lines draws itself for rich too (Grid)


class Fit:
    """``text`` as rich prints it; one that fits its line is rendered without rich's word
    wrap (a regex walk over its words and copies of it, slow the first time
    in a process), which would leave it whole anyway."""

    def __init__(self, text: Text):
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment | Text]:
        t, plain = self.text, self.text.plain
        if (not t.style and (t.justify or options.justify or "default") == "default" and "\n" not in plain
                and "\t" not in plain and _cells(plain) <= options.max_width):
            yield from t.render(console, end=t.end)  # what wrap + join gives a line that fits
        else:
            yield t

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        return Measurement.get(console, options, self.text)


class Hanging:
    """``text`` with a hanging indent, as rich prints it: its first line as rich wraps
    it, then the rest of it in a ``Padding`` of ``hang`` spaces."""

    def __init__(self, text: Text, hang: int):
        self.text, self.hang = text, hang

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        from rich.padding import Padding

        lines = self.text.wrap(console, options.max_width, overflow="fold")
        if len(lines) < 2:
            yield Fit(self.text)
            return
        t = self.text
        at = rest_start(t.plain, len(lines[0].plain))
        yield Fit(t[:len(lines[0].plain)])
        yield Padding(Fit(t[at:]), (0, 0, 0, self.hang))
