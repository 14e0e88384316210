"""The terminal tables at a narrow width (report/grid.py): no rows at all (a table of ``top=0``), and
at 60 columns every table whole, its headers uncut, its names readable: optional columns
go first, then the rightmost columns, and the title says which (wrapped, never cut).
At 80 columns the built-in tables keep every column they had."""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.frames import frame
from polyprof.report import grid
from polyprof.report.textout import _cells

DATA = Path(__file__).resolve().parent / "data" / "h200"
TRANSFORMER = DATA / "torch_transformer_h200.json.gz"
SMALL = DATA / "torch_bf16_mm_h200.json.gz"


@functools.lru_cache(maxsize=None)
def _report():
    from polyprof.report.tables import build

    return build(polyprof.load(TRANSFORMER))


def _render_at(width: int) -> list[str]:
    from rich.console import Console

    from polyprof.report.terminal import render

    buf = io.StringIO()
    render(_report(), console=Console(file=buf, width=width, color_system=None))
    return buf.getvalue().splitlines()


def _table(lines: list[str], name: str) -> tuple[str, list[str], list[list[str]]]:
    """The table whose title starts with ``name``: its title (its wrapped lines joined),
    header cells and rows."""
    start = next(i for i, line in enumerate(lines) if line.startswith(name))
    top = next(i for i in range(start, len(lines)) if lines[i].startswith("┏"))
    head = [c.strip() for c in lines[top + 1].strip("┃").split("┃")]
    rows = []
    for row in lines[top + 3:]:
        if not row.startswith("│"):
            break
        rows.append([c.strip() for c in row.strip("│").split("│")])
    return "  ".join(lines[start:top]), head, rows


def test_no_rows_at_a_narrow_width_is_a_table_of_its_headers():
    """``summary -n 0`` at 80 columns: a device column's narrowest width worked out over
    no rows (before: max() of nothing, an internal error)."""
    tb = frame({"device": np.array(["/device:GPU:0", "/device:GPU:1"], object),
                "kind": np.array(["memcpy DtoD", "memset"], object),
                **{f"n{k}": np.arange(2) * 10**k for k in range(8)}})
    cols = [("device", "device", None), ("kind", "kind", None),
            *((f"n{k}", f"number {k}", str) for k in range(8))]
    g = grid._table("Copies", tb, cols, 0, 60)
    assert g.rows == [] and g.headers[:2] == ["device", "kind"]
    assert all(_cells(text) <= 60 for text, _ in g.lines(60))


@pytest.mark.parametrize("width", ["80", "60"])
def test_summary_of_no_rows_is_the_headline_and_findings(width):
    """``summary -n 0`` printed every table as an empty frame of headers; now, as ``diff
    -n 0`` is the verdict alone, the headline, the notes under it and the findings."""
    env = {**os.environ, "COLUMNS": width}
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "-n", "0", str(SMALL)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("polyprof summary:") and "internal error" not in r.stderr
    assert "Memory copies and fills" not in r.stdout and "┏" not in r.stdout
    full = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(SMALL)], capture_output=True,
                          text=True, timeout=300, env=env).stdout
    assert full.startswith(r.stdout.split("╭")[0]) and "Memory copies and fills" in full


def test_at_60_columns_every_table_is_whole_with_its_headers_and_readable_names():
    lines = _render_at(60)
    assert max(_cells(line) for line in lines) <= 60
    for i, line in enumerate(lines):
        if line.startswith("┃"):  # every header whole, its table closed at the right
            assert line.endswith("┃") and "…" not in line, line
        if line.startswith("┏") and "(left out" in lines[i - 1] + lines[i - 2]:
            assert lines[i - 1].endswith(")"), lines[i - 2:i]  # the note whole
    title, head, rows = _table(lines, "Top framework ops (host)")
    assert head[:2] == ["name", "count"] and "device caused" in head and "launches" not in head
    assert "(left out: launches)" in title
    assert min(len(r[0]) for r in rows) >= 8 and "aten::mm" in [r[0] for r in rows]
    width = len(next(ln for ln in lines if ln.startswith("┃ name") and "self" in ln).split("┃")[1]) - 2
    assert width >= grid.NAME_LEAST, width
    title, head, rows = _table(lines, "Sections")
    assert head[0] == "name" and "total" in head and "device" not in head and "device" in title
    assert "train_step" in [r[0] for r in rows]
    # what the note under the table says is host time is what is shown
    note = lines[next(i for i, ln in enumerate(lines) if ln.startswith("└") and i > lines.index(
        next(ln for ln in lines if ln.startswith("Sections")))) + 1]
    assert note.startswith(f"total..{head[-1]} = host time"), note
    title, head, _ = _table(lines, "Launches")
    assert head[0] == "launch call" and "(left out: delay p99" in title


def test_at_80_columns_the_tables_keep_their_columns():
    lines = _render_at(80)
    assert max(_cells(line) for line in lines) <= 80
    assert _table(lines, "Top framework ops (host)")[1] == ["name", "count", "total", "self", "device caused", "launches"]
    title, head, rows = _table(lines, "Sections")
    assert "device" in head and "max" in head and "left out: p99, median, util, projected" in title
    assert _table(lines, "Launches")[1][:5] == ["launch call", "count", "CPU mean", "device mean", "delay median"]


def test_a_title_wider_than_the_terminal_is_wrapped_between_its_parts():
    g = grid.Grid("Memory copies and fills  device: /device:GPU:0  (left out: pageable, < 1 MiB, median GB/s)",
                  [("kind", 6, True)], [["DtoD"]])
    lines = [text for text, _ in g.lines(40)]
    assert lines[:3] == ["Memory copies and fills", "device: /device:GPU:0",
                         "(left out: pageable, < 1 MiB, median"] and lines[3] == "GB/s)"
    assert [text for text, _ in g.lines(100)][0] == g.title


def test_diff_says_the_columns_a_narrow_terminal_left_out():
    """A diff table narrower than its last drop group: the rightmost columns go (said in
    the line under the tables), rather than the table being cut at the edge."""
    from polyprof.cli.diff import TABLE_COLUMNS, fit_columns
    from polyprof.report.terminal import fmt_ns

    n = 3
    tb = frame({"name": np.array([f"aten::op_number_{k}" for k in range(n)], object),
                **{c[0]: np.full(n, 1.5e6) for c in TABLE_COLUMNS[1:-1]},
                "change": np.array(["faster"] * n, object)})
    cols = [(c[0], c[1], c[2] or (str if c[0] == "change" else fmt_ns)) for c in TABLE_COLUMNS]
    g, gone = fit_columns(tb, cols, 15, 30)
    assert all(sum(w + 3 for _, w, _ in g.columns) + 1 <= 30 for _ in [0])
    assert set(gone) >= {"Δ total", "n A", "total A", "A/step"} and "name" in g.headers
    shown = set(g.headers)
    assert all(c[1] in shown or c[1] in gone for c in cols)
