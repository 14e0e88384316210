"""A table laid out for the terminal: which columns it keeps at a width, how far its
text columns narrow and how their texts are shortened (:func:`_table`), and the boxed
grid that draws it line by line (:class:`Grid`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..analyze.frames import column, labels
from ..analyze.table import Table
from .fit import fit_texts
from .names import fit_names, ladder, one_module
from .textout import Lines, Piece, _cells, cell_sizes, set_cell_size, wrap

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions
    from rich.segment import Segment


#: text columns may be shortened (with an ellipsis) to fit the terminal; numbers never are
TEXT_COLUMNS = ("name", "plane", "stream", "kind", "category", "launch_name", "device", "op", "section", "stack",
                "state", "top_op", "bottom_op")
#: text columns of names: shortened by what their parts mean before they are cut (report/names.py)
NAME_COLUMNS = ("name", "launch_name", "plane", "stream", "device", "op", "top_op", "bottom_op")
#: text columns that give way first when a table is too wide: the name columns keep the room
LOW_COLUMNS = ("kind", "category")


#: how narrow a column of names may become before optional columns are left out
NAME_FLOOR = 24
#: how narrow a column of names may become at all while other columns can be left out
#: (a name shortened further no longer tells which row it is)
NAME_LEAST = 10
#: how narrow another text column may become at all, its header's width if wider
TEXT_LEAST = 6


def _floor(c: str, head: str, need: int, cells: list[str], names: tuple[str, ...] | list[str] = ()) -> int:
    """The narrowest text column ``c`` may become before optional columns are dropped:
    :data:`NAME_FLOOR` (24) cells for names (and the columns ``names`` that name a row);
    a kind or category its header's width (at least 7); a device or stream what its
    names need once shortened (``GPU:4``, ``Stream #135``; up to 16; its header's width
    where no row is shown); another 10."""
    if c in ("name", "launch_name") or c in names:
        return min(need, NAME_FLOOR)
    if c in LOW_COLUMNS:
        return min(need, max(len(head), 7))
    if c in NAME_COLUMNS:
        return min(need, max(len(head), min(max((_cells(ladder(t)[-1]) for t in cells), default=0), 16)))
    return min(need, max(len(head), 10))


def _least(c: str, head: str, floor: int, names: tuple[str, ...] | list[str] = ()) -> int:
    """The narrowest text column ``c`` may become while a column can still be left out
    instead: never narrower than its header (a header is never cut), nor a column of
    names than :data:`NAME_LEAST` cells, another than :data:`TEXT_LEAST` (at most its
    ``floor``)."""
    least = NAME_LEAST if c in ("name", "launch_name") or c in names else TEXT_LEAST
    return max(min(floor, least), _cells(head))


def _one_value(a: np.ndarray) -> bool:
    """``nunique(dropna=False) == 1`` of a non-empty column: every value the same (every
    NaN the same value, None another)."""
    vals = a.tolist()
    nan = vals[0] != vals[0]
    return all(v != v for v in vals) if nan else all(v == vals[0] for v in vals)


def shown_names(df: Table, names: list[str], rows: np.ndarray | None = None) -> tuple[list[str], list[str], str]:
    """The names of ``df``'s first rows (``names``: its name column's, formatted) as a
    table shows them, each row's XLA module ("" for none) and the one module of them all
    ("" where there is not one): where every row is an op of one module, the names go
    without it (:func:`one_module`) and the title says it once. The one place that
    decides this, for :func:`_table` and for whoever measures its names (``cli/diff``)."""
    mods = [str(m) for m in column(df, "module")[slice(None) if rows is None else rows][:len(names)]] \
        if "module" in labels(df) else []  # XLA ops named module/op
    shown, one = one_module(names, mods) if mods else (names, "")
    return shown, mods, one


def _table(title: str, df: Table, cols: list[tuple], top: int, width: int = 200,
           rows: np.ndarray | None = None, texts: tuple[str, ...] | list[str] = (),
           names: tuple[str, ...] | list[str] = ()) -> "Grid":
    """A table of ``df`` (of its rows at the positions ``rows``, when given: as
    ``df.iloc[rows]`` without building that frame): (column, header, formatter[,
    optional]). Optional columns
    (a priority: higher goes first, then the rightmost) are left out when the table would
    not fit ``width`` characters; then text columns are narrowed (kinds and categories
    first, then the widest) and their texts shortened (names by what their parts mean,
    ``report/names.py``, then cut where the rows differ), down to what is still readable
    (:func:`_least`); a table still too wide then leaves out its rightmost columns, the
    first kept, and says which in its title (wrapped, never cut: :func:`_title_lines`).
    Numbers and headers are always shown in full (but in a single column wider than the
    terminal). ``texts``: more text columns than :data:`TEXT_COLUMNS`;
    ``names``: those of them that name a row (another package's key column), kept as
    wide as a name (:data:`NAME_FLOOR`) until the optional columns are left out."""
    text, values = TEXT_COLUMNS + tuple(texts), {c: column(df, c) for c, *_ in cols}
    if rows is not None:
        values = {c: v[rows] for c, v in values.items()}
    n = len(df) if rows is None else len(rows)
    shown = min(top, n)
    # each column's first rows as Python values, as iterating df.head(top)[c] gives them
    cells = {c: [(fmt(v) if fmt else str(v)) for v in values[c][:shown].tolist()] for c, _, fmt, *_ in cols}
    cells["name"], mods, one = shown_names(df, cells["name"], rows) if "name" in cells else ([], [], "")
    sizes = {c: cell_sizes(cells[c]) for c in cells}  # each cell's width, measured once
    need = {c: max([_cells(h), *sizes[c]]) for c, h, *_ in cols}
    if "name" in need:
        need["name"] = min(need["name"], 60)

    def fits(keep: list[tuple], w: dict[str, int]) -> bool:
        return sum(w[c[0]] + 3 for c in keep) + 1 <= width  # 1 space padding each side + a border

    keep = list(cols)
    note = f"  module: {one}" if one else ""
    # a text column with one value in every row (one device, say) moves to the title
    for col in [c for c in cols if c[0] in ("plane", "stream")]:
        if not fits(keep, need) and len(keep) > 2 and shown and _one_value(values[col[0]]):
            keep.remove(col)
            note += f"  {col[1]}: {cells[col[0]][0]}"
    # how narrow each column may become: only for a table wider than the terminal (a name
    # column's floor shortens every name, report/names.py); one that fits is left as it is
    floor = need if fits(keep, need) else {
        c: _floor(c, h, need[c], cells[c], names) if c in text else need[c] for c, h, *_ in cols}
    # drop columns with nothing to show first (every row "-": a CPU-only job's device
    # shares), then optional columns, highest priority number first, then rightmost first
    blank = [c for c in cols[1:] if shown and all(x == "-" for x in cells[c[0]])]
    optional = sorted((c for c in cols if len(c) > 3 and c[3] and c not in blank),
                      key=lambda c: (-int(c[3]), -cols.index(c)))
    dropped = []
    for col in blank + optional:
        if fits(keep, floor):
            break
        keep.remove(col)
        dropped += [] if col in blank else [col[1]]  # (a blank column has nothing to miss)
    # the narrowest each text column may become while a column can still go instead (a
    # header never cut, a name still readable); then, with every optional column gone, the
    # rightmost columns leave (the first, what names a row, stays) rather than the table
    # be cut at the terminal's edge
    least = {c: _least(c, h, floor[c], names) if c in text else need[c] for c, h, *_ in cols}
    w, over = _narrowed(keep, need, floor, least, text, width)
    while over > 0 and len(keep) > 1:
        dropped.append(keep.pop()[1])
        w, over = _narrowed(keep, need, floor, least, text, width)
    if over > 0:  # one column wider than the terminal: its text shortened as far as it must be
        w, over = _narrowed(keep, need, floor, {c: min(floor[c], 6) for c in floor}, text, width)
    if dropped:
        note += f"  (left out: {', '.join(dropped)})"
    heads = [(c, head) for c, head, *_ in keep]
    for c, _ in heads:
        if c in text and shown and max(sizes[c]) > w[c]:  # (texts that fit are left as they are)
            cells[c] = fit_names(cells[c], w[c], mods if c == "name" and not one else None) if c in NAME_COLUMNS else \
                fit_texts(cells[c], w[c])
            sizes[c] = cell_sizes(cells[c])
    return Grid(f"{title}" + (f"  (top {top} of {n})" if n > top else "") + note,
                [(head, w[c], c in text) for c, head in heads],
                [[cells[c][i] for c, _ in heads] for i in range(shown)],
                [[sizes[c][i] for c, _ in heads] for i in range(shown)])


def _narrowed(keep: list[tuple], need: dict[str, int], floor: dict[str, int], least: dict[str, int],
              text: tuple[str, ...], width: int) -> tuple[dict[str, int], int]:
    """The widths of the columns ``keep`` at ``width``, and by how much they are still too
    wide: text columns narrowed one cell at a time from the column first in line (kinds
    and categories first, then the widest), in steps as far as the next, to their
    ``floor``, then below it to their ``least``."""
    w = {c[0]: need[c[0]] for c in keep}
    over = sum(w[c[0]] + 3 for c in keep) + 1 - width  # what fits() measures, kept as the widths shrink
    narrow = [c for c in w if c in text]
    while over > 0:
        shrink = [c for c in narrow if w[c] > min(floor[c], least[c])]
        if not shrink:
            break
        tier = {k: (w[k] > floor[k], k in LOW_COLUMNS) for k in shrink}
        c = max(shrink, key=lambda k: (*tier[k], w[k]))
        rivals = [w[k] for k in shrink if k != c and tier[k] == tier[c]]
        step = max(1, min(over, w[c] - max([floor[c] if tier[c][0] else min(floor[c], least[c]), *rivals])))
        w[c] -= step
        over -= step
    return w, over


def _title_lines(title: str, width: int) -> list[str]:
    """A table's title in lines of ``width``: whole where it fits; else its parts (the
    name, ``(top 15 of 38)``, ``device: ...``, ``(left out: ...)``, two spaces apart)
    each on the line before unless it would pass the width, a part wider than a line
    word-wrapped (``textout.wrap``), so the note of what was left out is never cut."""
    if _cells(title) <= width or width < 1:
        return [title]
    out: list[str] = []
    for part in title.split("  "):
        if out and part and _cells(out[-1]) + 2 + _cells(part) <= width:
            out[-1] += "  " + part
        elif part:
            out.extend("".join(t for t, _ in line).rstrip() for line in wrap([(part, None)], width))
    return out or [title]


class Grid(Lines):
    """A boxed table whose column widths are already decided (by :func:`_table`).

    Drawn line by line with rich's box characters (``rich.box.HEAVY_HEAD``) and styles:
    rich's Table would lay out every cell again, which cost more than all the analyses
    of a summary.
    """

    def __init__(self, title: str, columns: list[tuple[str, int, bool]], rows: list[list[str]],
                 sizes: list[list[int]] | None = None):
        self.title, self.columns, self.rows = title, columns, rows  # columns: (header, width, left-aligned)
        self.sizes = sizes  # each cell's width in cells, where the caller measured it

    @property
    def headers(self) -> list[str]:
        return [h for h, _, _ in self.columns]

    def _line(self, cells: list[str], left: str, sep: str, right: str, sizes: list[int] | None = None) -> str:
        out = []
        for k, (text, (_, w, left_aligned)) in enumerate(zip(cells, self.columns)):
            n = sizes[k] if sizes is not None and len(text) == sizes[k] else _cells(text)  # (a cell replaced since)
            if n > w:  # cut to exactly w cells
                text, n = (set_cell_size(text, w - 1) + "…" if w > 1 else set_cell_size(text, w)), w
            pad = " " * (w - n)
            out.append(text + pad if left_aligned else pad + text)
        return left + " " + f" {sep} ".join(out) + " " + right

    def lines(self, width: int) -> list[Piece]:
        """Each line and its style, cropped to ``width`` as rich crops its own tables; a
        title wider than ``width`` wrapped (:func:`_title_lines`)."""
        widths = [w + 2 for _, w, _ in self.columns]
        title = [(t, "italic") for t in _title_lines(self.title, width)]
        lines: list[Piece] = [*title, ("┏" + "┳".join("━" * w for w in widths) + "┓", None),
                              (self._line(self.headers, "┃", "┃", "┃"), "bold"),
                              ("┡" + "╇".join("━" * w for w in widths) + "┩", None),
                              *((self._line(r, "│", "│", "│", self.sizes[i] if self.sizes else None), None)
                                for i, r in enumerate(self.rows)),
                              ("└" + "┴".join("─" * w for w in widths) + "┘", None)]
        # every line but the title is as wide as the boxes: each cell is padded or cut to
        # its column's width by _line
        full = sum(widths) + len(widths) + 1
        return [(text if (full if i >= len(title) else _cells(text)) <= width else set_cell_size(text, width), style)
                for i, (text, style) in enumerate(lines)]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        from rich.segment import Segment
        from rich.style import Style

        styles = {"italic": Style(italic=True), "bold": Style(bold=True), None: None}
        for text, style in self.lines(options.max_width):
            yield Segment(text, styles[style])
            yield Segment.line()
