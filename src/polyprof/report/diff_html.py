"""The HTML diff (``polyprof diff A B -o diff.html``): one self-contained file, offline.

Python computes everything (``analyze.diff.diff``); ``diff_template.html`` holds the
page and a small script that draws, from the embedded JSON, the verdict, a chart of the
changes (relative change per step of the changed rows and of the largest tested ones,
the effect floor shaded), the per-step distributions of the top rows in A and B, and
the three tables with A's and B's columns side by side. No network, no external script.
"""

from __future__ import annotations

import html
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from ..analyze.diff import Diff
    from ..analyze.table import Table

import numpy as np

from ..analyze.diff_stats import NO_REACH
from ..analyze.frames import column, labels
from .html import script_json

#: rows of each table put in the page (a note says how many there were)
MAX_ROWS = 500
#: bars in the chart of changes: every changed row, then the largest tested ones up to this
CHART_ROWS = 24
TABLE_COLUMNS = ["name", "kind", "count_a", "total_ns_a", "step_mean_ns_a", "count_b", "total_ns_b", "step_mean_ns_b",
                 "step_delta_ns", "rel_change", "p_value", "p_adjusted", "change", "reason", "rank_decided",
                 "rank_step_delta_ns", "variants"]


#: the reasons of the rows tested and not called changed, charted after the changed ones
TESTED = ("within the noise", "below the effect floor", NO_REACH)


def _plain(v: object) -> object:
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v


def _table(df: Table | pd.DataFrame) -> dict[str, Any]:
    cols = [c for c in TABLE_COLUMNS if c in labels(df)]
    n = min(len(df), MAX_ROWS)
    values = [[_plain(v) for v in column(df, c)[:n].tolist()] for c in cols]
    return {"columns": cols, "rows": [list(r) for r in zip(*values)], "total": len(df)}


def _chart(d: Diff) -> list[dict[str, Any]]:
    """The changed rows, then the tested rows with the largest relative change per step;
    a changed row nested with others that moved with it (one change, ``diff_nesting``)
    says the rows of its change (``one_change_with``)."""
    out, rest = [], []
    leads = {c.get("group"): c for c in d.changes if c.get("lead")}
    with_ = {(c["table"], c["name"]): [r["name"] for r in [leads[c["group"]], *leads[c["group"]]["nested"]]
                                       if r["name"] != c["name"]]
             for c in d.changes if c.get("group") in leads and leads[c["group"]]["nested"]}
    for t, df in d.tables.items():
        rel = column(df, "rel_change").astype(np.float64)
        reason = column(df, "reason")
        for i in range(len(df)):
            row: dict[str, Any] = {"table": t, "name": str(column(df, "name")[i]), "rel": _plain(float(rel[i])),
                   "delta_ns": _plain(float(column(df, "step_delta_ns")[i])),
                   "p": _plain(float(column(df, "p_adjusted")[i])), "change": str(column(df, "change")[i]),
                   "reason": str(reason[i]), "one_change_with": with_.get((t, str(column(df, "name")[i])), [])}
            if row["change"]:
                out.append(row)
            elif reason[i] in TESTED and rel[i] == rel[i] and rel[i] != 0:
                rest.append(row)
    out.sort(key=lambda r: -abs(r["rel"]) if r["rel"] is not None else float("-inf"))
    rest.sort(key=lambda r: -abs(r["rel"]))
    return out + rest[:max(0, CHART_ROWS - len(out))]


def _title(d: Diff) -> str:
    """"A vs B", each side named by the shortest part of its first path that tells it from
    the other's: the file's name where the names differ, else the folders where the paths
    differ (``even/`` vs ``late1/`` for ``runs/even/ddp.0.polyprof`` and
    ``runs/late1/ddp.0.polyprof``), with how many more files the side has."""
    paths = [d.overview[s].get("paths") or [] for s in ("a", "b")]
    if not (paths[0] and paths[1]):
        return " vs ".join(Path(p[0]).name if p else s for p, s in zip(paths, "AB"))
    names = _apart(Path(paths[0][0]).parts, Path(paths[1][0]).parts)
    return " vs ".join(n + (f" +{len(p) - 1}" if len(p) > 1 else "") for n, p in zip(names, paths))


def _apart(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, str]:
    """Two paths' parts cut to what tells them apart: their common leading and trailing
    parts left out (a trailing folder kept as ``name/``); where one has only folders more,
    each from their common leading folders on (``run.polyprof`` vs ``sub/run.polyprof``);
    one path given twice, whole."""
    if not a or not b or a[-1] != b[-1]:
        return (a[-1] if a else "A"), (b[-1] if b else "B")
    tail = 0
    while tail < min(len(a), len(b)) and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    head = 0
    while head < min(len(a), len(b)) - tail and a[head] == b[head]:
        head += 1
    ma, mb = a[head:len(a) - tail], b[head:len(b) - tail]
    if not ma or not mb:  # one path is the other's with folders more: each from their common folder on
        return str(Path(*a[head:])), str(Path(*b[head:]))  # (Path: a root part is "/" itself)
    return "/".join(ma) + "/", "/".join(mb) + "/"


def page_data(d: Diff) -> dict[str, Any]:
    return {"title": _title(d), "overview": d.overview, "verdict": d.verdict,
            "step_time": {k: _plain(v) for k, v in d.step_time.items()},
            "changes": [{k: _plain(v) for k, v in c.items()} for c in d.changes],
            "chart": _chart(d), "samples": d.samples,
            "tables": {t: _table(df) for t, df in d.tables.items()}}


def render(d: Diff) -> str:
    """The page of the Diff ``d`` (placeholders filled in one pass: text from the traces
    is never substituted again)."""
    template = resources.files("polyprof.report").joinpath("diff_template.html").read_text(encoding="utf-8")
    values = {"__TITLE__": html.escape(_title(d), quote=True), "__DATA__": script_json(page_data(d))}
    return re.sub("__TITLE__|__DATA__", lambda m: values[m.group(0)], template)


def write(d: Diff, path: str | Path, force: bool = False) -> Path:
    """Write the HTML diff to ``path`` as every output is written (``outfile``: a
    temporary file beside it, then renamed; a directory or a symbolic link refused)."""
    from ..outfile import write_file  # only a command that writes the page

    write_file(path, lambda tmp: tmp.write_text(render(d), encoding="utf-8"), force)
    return Path(path)
