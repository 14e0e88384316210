"""Other packages' analysis tables (``polyprof.analyses`` entry points) in the terminal
summary and the HTML report.

Such a table has no hand-written layout: it is shown from its own columns, its key
columns first (``rank`` in a job, then its text columns: what names a row), then its
numbers in the order it gives them; cells are formatted by the column's name and type
as the HTML report formats every cell (``*_ns`` a duration, ``*_pct`` a share,
``*bytes`` a size). At the terminal's width the rightmost numbers go first, then the
other key columns, and only then is a text column narrowed: the first text column (what
names a row) keeps at least ``grid.NAME_FLOOR`` (24) cells, as the built-in tables keep
their names, while there is a column left to leave out. A table keeps ``rank``, its
first text column (else its first column) and its first number.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

import numpy as np

from .. import entrypoints
from ..analyze.frames import column, labels
from ..analyze.registry import GROUP, extensions
from ..analyze.units import fmt_ns, fmt_pct, fmt_size

#: a terminal column as ``grid._table`` takes it: (column, header, formatter[, priority])
Spec = tuple[Any, ...]


def third_party(tables: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(name, title, table) of each other package's table in ``tables`` (a trace's
    report, or a job's per-rank tables with their ``rank`` column), in the order the
    packages declare them."""
    dist = {name: ep.dist for group, ep, name in entrypoints.LOADED if group == GROUP}
    for a in extensions():
        if a.name in tables:
            yield a.name, f"{a.name} (from {dist.get(a.name) or 'another package'})", tables[a.name]


def ordered(table: Any) -> tuple[list[str], list[str]]:
    """The table's key columns (``rank``, then its text columns) and its other columns, each in its order."""
    names = [str(c) for c in labels(table)]
    keys = [c for c in names if c == "rank" or _is_text(column(table, c))]
    return keys, [c for c in names if c not in keys]


def _is_text(v: np.ndarray) -> bool:
    return v.dtype.kind in "OUS"


def _text(x: object) -> str:
    return "-" if x is None else str(x)


def _number(x: object) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def formatter(name: str, v: np.ndarray) -> Callable[[Any], str]:
    """How a cell of the column ``name`` (values ``v``) is written."""
    if _is_text(v) or v.dtype.kind == "b":
        return _text
    if name.endswith("_ns"):
        return lambda x: "-" if x != x else fmt_ns(x)
    if name.endswith("_pct"):
        return fmt_pct
    if name.endswith("bytes"):
        return fmt_size
    return _number


def header(name: str) -> str:
    """A column's header, as the HTML report writes it: ``total_ns`` is "total" (its cells
    are durations), ``max_wait_bytes`` "max wait bytes"."""
    return (name[:-3] if name.endswith("_ns") else name).replace("_", " ")


def terminal_columns(table: Any) -> tuple[list[Spec], list[str], list[str]]:
    """The columns ``grid._table`` shows of ``table``, which of them are text (narrowed
    and shortened, never the numbers, when the table is too wide) and which one names a
    row (its first text column: kept as wide as a name while columns can be left out)."""
    keys, values = ordered(table)
    texts = [c for c in keys if _is_text(column(table, c))]
    kept = {"rank", (texts or keys or values)[0], *values[:1]}
    specs: list[Spec] = []
    for c in keys + values:
        fmt = formatter(c, column(table, c))
        head = header(c)
        if c in kept:
            specs.append((c, head, fmt))
        else:  # dropped at the terminal's width: numbers (rightmost first) before other keys
            specs.append((c, head, fmt, 2 if c in values else 1))
    return specs, texts, texts[:1]


def html_tables(tables: Mapping[str, Any], records: Callable[[Any, list[str]], Any]) -> list[dict[str, Any]]:
    """Each other package's table for the HTML report: its name, title and ``records``
    (``html._records``: the first rows) of its columns, keys first."""
    out = []
    for name, title, t in third_party(tables):
        keys, values = ordered(t)
        out.append({"name": name, "title": title, "table": records(t, keys + values)})
    return out


def parts(out: Callable[[Any], None], tables: Mapping[str, Any], top: int, width: int,
          table: Callable[..., Any]) -> None:
    """Each other package's table that has rows, titled, to ``out`` (a summary's parts),
    laid out by ``table`` (``grid._table``) at ``width`` with ``top`` rows."""
    for _, title, t in third_party(tables):
        if len(t):
            cols, texts, names = terminal_columns(t)
            out(table(title, t, cols, top, width, texts=texts, names=names))
