"""Issue 27, item 2: an analysis returns the same type, polyprof's Table, whether called
from the library, from the CLI or in a worker process; the documented way to a
DataFrame (``.to_pandas()``) gives what pandas users had."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
import pandas as pd
import pytest

import polyprof
from polyprof import analyze
from polyprof.analyze.registry import ANALYSES, Tables, compute_all
from polyprof.analyze.table import Table

from .synth import gpu_trace

#: the library's analysis functions (polyprof.analyze.__all__) that return a table
FUNCTIONS = [n for n in analyze.__all__ if n not in ("findings", "Finding")]


def _pair(traces_dir):
    return [traces_dir / "kineto" / f"sampled_rank{i}.json.gz" for i in (0, 1)]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_library_function_returns_a_table(name):
    t = getattr(analyze, name)(gpu_trace())
    assert type(t) is Table, name
    df = t.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df.columns) == t.columns and len(df) == len(t)
    for c in t.columns:
        assert df[c].tolist() == t[c].tolist() or all(
            a == b or (a != a and b != b) for a, b in zip(df[c].tolist(), t[c].tolist())), (name, c)


def test_the_registry_and_the_report_give_tables():
    trace = gpu_trace()
    assert all(type(t) is Table for t in compute_all(trace).values())
    assert all(type(Tables(trace)[a.name]) is Table for a in ANALYSES)
    from polyprof.report.tables import build

    assert all(type(t) is Table for t in build(trace).tables.values())


def test_the_cli_computes_tables(traces_dir, tmp_path, monkeypatch, capsys):
    """What ``polyprof summary FILE`` renders and ``polyprof report`` writes are reports
    of Tables (``summary --json``: tests/analysis/test_columnar.py)."""
    from polyprof.cli import main
    from polyprof.report import html, terminal

    seen = []
    real_render = terminal.render
    monkeypatch.setattr(terminal, "render", lambda rep, *a, **k: seen.append(rep) or real_render(rep, *a, **k))
    real_write = html.write
    monkeypatch.setattr(html, "write", lambda *a, **k: seen.append(k["report"]) or real_write(*a, **k))
    path = traces_dir / "kineto" / "a100_alexnet_small.json.gz"
    assert main(["summary", str(path)]) == 0
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    assert len(seen) == 2
    every = {a.name for a in ANALYSES}
    # the terminal's leaves out the tables it does not print (report/terminal.py NOT_SHOWN); the HTML has all
    for rep, want in zip(seen, (every - set(terminal.NOT_SHOWN), every)):
        assert set(rep.tables) == want and terminal.NOT_SHOWN
        assert all(type(t) is Table for t in rep.tables.values())


def test_a_worker_process_returns_tables(traces_dir):
    """A function of the library run on each rank in worker processes (the ranks' default
    executor, and a plain spawned ProcessPoolExecutor) hands back Tables, and the ranks
    stack into a Table with a rank column."""
    ts = polyprof.load_ranks(_pair(traces_dir))
    per_rank = ts.map(analyze.kernel_breakdown)  # the default: worker processes
    assert sorted(per_rank) == [0, 1] and all(type(t) is Table for t in per_rank.values())
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as ex:
        spawned = ts.map(analyze.kernel_breakdown, ex)
    assert all(type(t) is Table for t in spawned.values())
    assert all(spawned[r].equals(per_rank[r]) for r in per_rank)
    lib = {r: analyze.kernel_breakdown(polyprof.load(p)) for r, p in zip((0, 1), _pair(traces_dir))}
    assert all(lib[r].equals(per_rank[r]) for r in lib)  # the library's own, in this process
    stacked = ts.table(analyze.kernel_breakdown, "serial")
    assert type(stacked) is Table and stacked.columns[0] == "rank"
    assert np.array_equal(np.unique(stacked["rank"]), [0, 1])
    assert len(stacked) == sum(len(t) for t in per_rank.values())


def test_a_jobs_report_is_tables_from_its_workers(traces_dir):
    rep = polyprof.load_ranks(_pair(traces_dir)).analyze(None if os.cpu_count() else "serial")
    assert rep.tables and all(type(t) is Table for t in rep.tables.values())


def test_the_documented_dataframe_way_works(traces_dir):
    """README / docs/analysis.md: ``analyze.X(trace).to_pandas()``."""
    trace = polyprof.load(traces_dir / "kineto" / "a100_alexnet_small.json.gz")
    df = analyze.kernel_breakdown(trace).to_pandas()
    assert isinstance(df, pd.DataFrame) and isinstance(df.index, pd.RangeIndex) and len(df) > 5
    assert df["name"].dtype == object and df["count"].dtype == np.int64
    top = df.sort_values("total_ns", ascending=False).iloc[0]
    assert top["total_ns"] == df["total_ns"].max()


def test_select_takes_names_one_by_one_and_repr_cuts_long_text_in_the_middle():
    """docs/analysis.md's ``kb.select("name", "total_ns")`` raised a TypeError (it took
    one list); repr cut text from the end, so kernels alike in their first 40 characters
    (``void at::native::vectorized_elementwise…``) read the same."""
    from polyprof.analyze.table import Table

    t = Table({"name": np.array(["void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>",
                                 "void at::native::vectorized_elementwise_kernel<4, MulFunctor<float>>"], object),
               "total_ns": np.array([2, 1]), "count": np.array([1, 1])})
    assert t.select("name", "total_ns").columns == t.select(["name", "total_ns"]).columns == ["name", "total_ns"]
    assert t.select("count").columns == ["count"]
    lines = repr(t).splitlines()
    assert lines[2] != lines[3] and "…" in lines[2], lines
