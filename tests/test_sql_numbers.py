"""``polyprof sql`` prints numbers whole at 80 columns.

Its table let every column fold, numbers included: a kineto trace's start_ns
1716423322965734014 printed as ``17164233229`` with ``65734014`` on the next line, which
reads as a whole number 10^8 too small; sums and maxima alike, and averages with 17
digits (an auditor, session 39). The real CLI runs here on every kineto trace of
tests/data at COLUMNS=80; each number it prints is read back, whole, from the table or
from the records a result too wide for a table becomes, and compared with the trace's
own values (pandas over ``polyprof.load(...).to_pandas()``, not the SQL it printed).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

KINETO = sorted((Path(__file__).parent / "data" / "traces" / "kineto").glob("*.json.gz"))
NCCL = next(p for p in KINETO if p.name == "a100_nccl_rank0.json.gz")


def sql(path: Path, query: str, width: int = 80) -> str:
    r = subprocess.run([sys.executable, "-m", "polyprof", "sql", str(path), query], capture_output=True, text=True,
                       timeout=180, env=dict(os.environ, COLUMNS=str(width)))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= width, r.stdout  # (a number of 20 digits fits any such table)
    return r.stdout


def rows_of(out: str, names: list[str], numbers: set[str]) -> list[dict[str, str]]:
    """The printed rows, as {column: text}: from a table (a row's text columns folded over
    the lines that follow it, whose number cells are empty: a number cell on a line of its
    own would start a row of its own) or from records (``column | value``)."""
    lines = out.splitlines()
    rows: list[dict[str, str]] = []
    if any(ln.startswith("-[ row ") for ln in lines):
        last = ""
        for ln in lines[1:]:
            if ln.startswith("-[ row "):
                rows.append({})
                continue
            label, value = ln.split(" | ", 1) if " | " in ln else (ln.rstrip(" |"), "")
            if label.strip():
                last = label.strip()
                rows[-1][last] = value
            else:
                assert last not in numbers, f"number {last} continued on a line of its own: {out}"
                rows[-1][last] += value
        return rows
    for ln in lines:
        if not ln.startswith("│"):
            continue
        cells = [c.strip() for c in ln.strip().strip("│").split("│")]
        assert len(cells) == len(names), ln
        if not rows or any(cells[i] for i, c in enumerate(names) if c in numbers):
            rows.append(dict(zip(names, cells)))
        else:
            for c, v in zip(names, cells):
                rows[-1][c] += v
    return rows


def _digits(text: str) -> int:
    """Significant digits of a printed decimal (``40196685.2``: 9; ``3.50``: 2)."""
    mant = text.split("e")[0]
    mant = mant.rstrip("0") if "." in mant else mant
    return len(re.sub(r"^0+", "", re.sub(r"[^0-9]", "", mant))) or 1


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name.split(".")[0])
def test_integers_print_whole_in_a_table(path: Path):
    """Per category: the count, the first start and the last end, each cell the exact
    integer and on one line; the categories (text) fold where they must."""
    df = polyprof.load(path).to_pandas()
    want = df.groupby("category", observed=True).agg(n=("start_ns", "size"), first_ns=("start_ns", "min"),
                                                     last_ns=("end_ns", "max"))
    out = sql(path, "SELECT category, count(*) AS n, min(start_ns) AS first_ns, max(end_ns) AS last_ns "
                    "FROM events GROUP BY 1 ORDER BY 1")
    assert "┃ category" in out, out  # (narrow enough for a table at 80 columns)
    got = {r["category"]: r for r in rows_of(out, ["category", "n", "first_ns", "last_ns"], {"n", "first_ns", "last_ns"})}
    assert set(got) == set(map(str, want.index)), out
    for cat, w in want.iterrows():
        g = got[str(cat)]
        assert (g["n"], g["first_ns"], g["last_ns"]) == (str(w.n), str(w.first_ns), str(w.last_ns)), (cat, out)
    # a table's number cells right-aligned: each ends at its column's right border
    body = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert all(re.search(r"\d │$", ln) for ln in body if ln.split("│")[-2].strip()), out


def test_the_auditors_kernels_print_as_records_with_every_digit():
    """The auditor's query: six columns whose numbers (19 + 7 + 19 digits and a 14-character
    header) leave no room for the names at 80 columns: records, as psql's expanded display,
    every number whole on its line; before, a table with start_ns in two halves."""
    df = polyprof.load(NCCL).to_pandas()
    k = df[df.category == "kernel"].sort_values(["dur_ns", "start_ns"], ascending=[False, True]).head(3)
    cols = ["name", "category", "start_ns", "dur_ns", "end_ns", "correlation_id"]
    out = sql(NCCL, f"SELECT {', '.join(cols)} FROM events WHERE category='kernel' ORDER BY dur_ns DESC, start_ns "
                    "LIMIT 3")
    got = rows_of(out, cols, {"start_ns", "dur_ns", "end_ns", "correlation_id"})
    assert len(got) == 3, out
    for g, (_, w) in zip(got, k.iterrows()):
        assert [g[c].strip() for c in cols[2:]] == [str(w[c]) for c in cols[2:]], out
        assert g["name"].replace(" ", "") == str(w["name"]).replace(" ", "")
    assert "1716423322965734014" in out.split()  # the auditor's start_ns, one word


def test_a_narrow_table_of_long_names_folds_the_names_not_the_numbers():
    """start_ns and dur_ns fit beside a name column: a table whose names fold over lines
    whose number cells stay empty."""
    df = polyprof.load(NCCL).to_pandas()
    k = df[df.category == "kernel"].sort_values(["dur_ns", "start_ns"], ascending=[False, True]).head(4)
    out = sql(NCCL, "SELECT name, start_ns, dur_ns FROM events WHERE category='kernel' ORDER BY dur_ns DESC, start_ns "
                    "LIMIT 4")
    assert "┃ name" in out, out
    got = rows_of(out, ["name", "start_ns", "dur_ns"], {"start_ns", "dur_ns"})
    assert [(g["start_ns"], g["dur_ns"]) for g in got] == [(str(a), str(b)) for a, b in zip(k.start_ns, k.dur_ns)], out
    assert [g["name"].replace(" ", "") for g in got] == [str(n).replace(" ", "") for n in k.name]
    assert sum(ln.startswith("│") for ln in out.splitlines()) > 4  # (the names did fold)


def test_aggregates_and_floats_at_80_columns():
    """sum, max, avg, stddev per category: integers exact (a sum is DuckDB's HUGEINT, a
    decimal), floats to a few significant digits (their integer part whole), not 17."""
    df = polyprof.load(NCCL).to_pandas()
    g = df.groupby("category", observed=True)
    want = {str(c): v for c, v in g.agg(n=("dur_ns", "size"), total_ns=("dur_ns", "sum"), mx=("end_ns", "max"),
                                        mean_ns=("dur_ns", "mean"), ms=("dur_ns", lambda s: s.sum() / 1e6)).iterrows()}
    cols = ["category", "n", "total_ns", "mx", "mean_ns", "ms", "sd"]
    out = sql(NCCL, "SELECT category, count(*) n, sum(dur_ns) total_ns, max(end_ns) mx, avg(dur_ns) mean_ns, "
                    "sum(dur_ns)/1e6 ms, stddev(dur_ns) sd FROM events GROUP BY ALL ORDER BY total_ns DESC")
    got = rows_of(out, cols, set(cols[1:]))
    assert {r["category"].strip() for r in got} == set(want), out
    for r in got:
        w = want[r["category"].strip()]
        assert [r[c].strip() for c in ("n", "total_ns", "mx")] == [str(w.n), str(int(w.total_ns)), str(w.mx)], out
        for c in ("mean_ns", "ms"):
            text = r[c].strip()
            assert math.isclose(float(text), float(w[c]), rel_tol=1e-5), (c, text, w[c])
            assert _digits(text) <= max(6, len(str(int(abs(float(w[c])))))), (c, text)


def test_csv_keeps_full_precision():
    """--csv is for programs: its floats keep every digit."""
    r = subprocess.run([sys.executable, "-m", "polyprof", "sql", "--csv", str(NCCL),
                        "SELECT avg(dur_ns) AS a FROM events WHERE category = 'kernel'"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    df = polyprof.load(NCCL).to_pandas()
    assert float(r.stdout.splitlines()[1]) == float(df[df.category == "kernel"].dur_ns.mean())
