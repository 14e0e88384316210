"""Other packages' analysis tables everywhere polyprof shows its own (docs/plugins.md,
"Readers, analyses and findings from another package"): the terminal summary (of a
trace and of a job) and the HTML report show them from their own columns, fitted to the
terminal; a job's directory finds the files of another package's format; a job's
per-rank summary carries their tables, leaves with the rank those that say
``per_event``, and takes their names in ``tables=``. The vendor package is
tests/test_extension_entry_points.py's (a module and a dist-info on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from analysis.browser import chromium, page_data
from test_extension_entry_points import KERNELS, make_site

import polyprof
from polyprof import entrypoints
from polyprof.analyze import registry as areg
from polyprof.analyze.frames import column, frame
from polyprof.analyze.window import Window
from polyprof.analyze.window_counting import restrict
from polyprof.formats import registry as freg
from polyprof.ranks import sources
from polyprof.report import extension_tables, grid
from polyprof.report.textout import _cells

ROOT = Path(__file__).resolve().parents[1]
TRITON = ROOT / "tests" / "data" / "traces" / "kineto" / "triton_example.json.gz"


def _log(path: Path, scale: int = 1) -> Path:
    path.write_text("ACMELOG 1\n" + "".join(f"kernel {n} {s} {d * scale}\n" for n, s, d in KERNELS))
    return path


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The vendor package, ``run.acmelog`` and ``job/`` (two ranks: rank 1's kernels twice as long)."""
    site = make_site(tmp_path)
    (tmp_path / "job").mkdir()
    for r in (0, 1):
        _log(tmp_path / "job" / f"rank{r}.acmelog", r + 1)
    return site


def _polyprof(tmp_path: Path, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]),
               POLYPROF_ENTRY_POINT_CACHE="0", COLUMNS="80")
    r = subprocess.run([sys.executable, "-m", "polyprof", *args], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "WARNING" not in r.stderr, r.stderr
    return r


def _block(text: str, title: str) -> list[str]:
    """The lines of the terminal table titled ``title``: title, boxes and rows."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(title))
    j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("└"))
    return lines[i:j + 1]


def _rows(block: list[str]) -> list[list[str]]:
    return [[c.strip() for c in ln.strip("│").split("│")] for ln in block if ln.startswith("│")]


def test_the_terminal_summary_shows_a_vendor_table_after_polyprofs(tmp_path, site):
    out = _polyprof(tmp_path, site, "summary", "run.acmelog").stdout
    block = _block(out, "acme_kernel_totals (from acme_polyprof)")
    assert out.index("Top device activity") < out.index("acme_kernel_totals")  # after the built-in tables
    assert [c.strip() for c in block[2].strip("┃").split("┃")] == ["name", "count", "total"]
    assert _rows(block) == [["acme_copy", "1", "50 ns"], ["acme_gemm", "2", "1 µs"]]
    one = _block(_polyprof(tmp_path, site, "summary", "-n", "1", "run.acmelog").stdout, "acme_kernel_totals")
    assert "(top 1 of 2)" in one[0] and _rows(one) == [["acme_copy", "1", "50 ns"]]


def test_a_job_shows_each_ranks_vendor_table_and_finds_its_files(tmp_path, site):
    """A directory of vendor-format ranks is a job (before: "no trace files in this
    directory"); --json, the terminal and the HTML report carry the table per rank."""
    doc = json.loads(_polyprof(tmp_path, site, "summary", "--json", "job").stdout)
    assert doc["overview"]["ranks"] == 2
    recs = [(r["rank"], r["name"], r["count"], r["total_ns"]) for r in doc["tables"]["acme_kernel_totals"]["records"]]
    assert recs == [(0, "acme_copy", 1, 50), (0, "acme_gemm", 2, 1000), (1, "acme_copy", 1, 100),
                    (1, "acme_gemm", 2, 2000)]
    block = _block(_polyprof(tmp_path, site, "summary", "job").stdout, "acme_kernel_totals (from acme_polyprof)")
    assert _rows(block) == [["0", "acme_copy", "1", "50 ns"], ["0", "acme_gemm", "2", "1 µs"],
                            ["1", "acme_copy", "1", "100 ns"], ["1", "acme_gemm", "2", "2 µs"]]
    _polyprof(tmp_path, site, "report", "job", "-o", "job.html", "--rank", "1")
    data = page_data(tmp_path / "job.html")
    assert [x["table"]["rows"] for x in data["ranks"]["extensions"]] == [[list(r) for r in recs]]
    # the tables below the ranks are rank 1's
    assert data["extensions"][0]["table"]["rows"] == [["acme_copy", 1, 100], ["acme_gemm", 2, 2000]]


@pytest.mark.skipif(chromium() is None, reason="needs chromium")
def test_the_html_report_renders_vendor_tables_in_chromium(tmp_path, site):
    """A trace's page: a card titled by the table with its rows, numbers formatted; a
    job's page: the per-rank table in the ranks' card too; no error in the console."""
    import cdp

    _polyprof(tmp_path, site, "report", "run.acmelog", "-o", "r.html")
    _polyprof(tmp_path, site, "report", "job", "-o", "job.html")
    page = cdp.Page(chromium())
    problems: list[str] = []
    recv = page.ws.recv

    def watch() -> str:  # console errors and uncaught exceptions, as the page reports them
        msg = recv()
        m = json.loads(msg)
        if m.get("method") == "Runtime.exceptionThrown" or (
                m.get("method") == "Runtime.consoleAPICalled" and m["params"]["type"] in ("error", "assert")):
            problems.append(msg)
        elif m.get("method") == "Log.entryAdded" and m["params"]["entry"]["level"] == "error":
            problems.append(msg)
        return msg

    page.ws.recv = watch
    try:
        page.call("Runtime.enable")
        page.call("Log.enable")
        cells = ("Array.from(document.querySelectorAll('#{0} tr')).map(function (r) {{ return Array.from("
                 "r.children).map(function (c) {{ return c.textContent; }}); }})")
        page.open(tmp_path / "r.html", "document.documentElement.getAttribute('data-rendered')")
        assert page.eval("window.__errors.length") == 0
        assert page.eval("Array.from(document.querySelectorAll('#extension-tables h2')).map(function (h) "
                         "{ return h.textContent; })") == ["acme_kernel_totals (from acme_polyprof)"]
        assert page.eval(cells.format("ext-0")) == [["name", "count", "total"], ["acme_copy", "1", "50 ns"],
                                                    ["acme_gemm", "2", "1.00 µs"]]
        assert page.eval("document.querySelector('#ext-0 td').className") == "txt"  # text: left-aligned
        page.open(tmp_path / "job.html", "document.documentElement.getAttribute('data-rendered')")
        assert page.eval("window.__errors.length") == 0
        assert page.eval(cells.format("rk-ext-0"))[1:] == [["0", "acme_copy", "1", "50 ns"],
                                                           ["0", "acme_gemm", "2", "1.00 µs"],
                                                           ["1", "acme_copy", "1", "100 ns"],
                                                           ["1", "acme_gemm", "2", "2.00 µs"]]
        assert page.eval(cells.format("ext-0"))[1:] == [["acme_copy", "1", "50 ns"], ["acme_gemm", "2", "1.00 µs"]]
    finally:
        page.close()
    assert problems == [], problems


# ------------------------------------------------------------------ in process: fitting, listing, ranks
def _wide(trace: object) -> object:
    """A vendor table wider than 80 columns: a long text key, a second key, eight numbers."""
    names = np.array([f"acme::very_long_templated_kernel_name<float, {i}, true>::run" for i in range(5)], object)
    cols = {"value_ns": np.arange(5, dtype=np.int64) * 1000, "kernel": names,
            "queue": np.array(["q0", "q1", "q0", "q1", "q0"], object)}
    cols.update({f"metric_{k}_pct": np.linspace(0, 50, 5) for k in range(7)})
    return frame(cols)


def test_a_wide_vendor_table_fits_80_columns_keys_first(monkeypatch):
    monkeypatch.setattr(areg, "_extensions", (areg.Analysis("acme_wide", _wide),))
    tables = areg.compute_all(polyprof.load(TRITON))
    got = []
    extension_tables.parts(got.append, tables, 3, 80, grid._table)
    assert len(got) == 1
    lines = [text for text, _ in got[0].lines(80)]
    assert lines[0].startswith("acme_wide") and "(top 3 of 5)" in lines[0]
    assert all(_cells(ln) <= 80 for ln in lines), lines
    heads = [c.strip() for c in next(ln for ln in lines if ln.startswith("┃")).strip("┃").split("┃")]  # (the title wraps)
    assert "".join(lines[:lines.index(next(ln for ln in lines if ln.startswith("┏")))]).endswith(")")  # its note whole
    # keys first (the text columns), then the first number; the rightmost numbers gave way
    assert heads[:3] == ["kernel", "queue", "value"] and "metric 6 pct" not in heads, heads
    rows = _rows(lines)
    assert [r[2] for r in rows] == ["0 ns", "1 µs", "2 µs"] and [r[1] for r in rows] == ["q0", "q1", "q0"]
    assert rows[0][0].startswith("acme::") and len({r[0] for r in rows}) == 3  # names shortened, still told apart


def test_a_directory_lists_vendor_files_and_looks_for_packages_only_for_unknown_endings(tmp_path, monkeypatch):
    fmt = freg.Format("acme-log", "ACME", reader=lambda path, **o: None, sniff=lambda h, p: False,
                      suffixes=(".acmelog",))
    monkeypatch.setattr(freg, "_extensions", None)
    calls: list[str] = []
    monkeypatch.setattr(entrypoints, "declared", lambda group: calls.append(group) or [])
    for name in ("rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"):
        (tmp_path / name).write_bytes(b"x")
    assert [q.name for q in sources.rank_files(tmp_path)] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert calls == []  # a normal job's directory: no search of the installed packages
    (tmp_path / "rank2.ACMELOG").write_bytes(b"x")
    (tmp_path / "notes.txt").write_bytes(b"x")
    assert len(sources.rank_files(tmp_path)) == 2 and calls == ["polyprof.formats"]  # no such format installed
    ep = entrypoints.EntryPoint("acme-log", "acme:FORMAT", "acme")
    monkeypatch.setattr(freg, "_extensions", (freg._format_of(fmt, ep),))
    assert [q.name for q in sources.rank_files(tmp_path)] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz",
                                                              "rank2.ACMELOG"]


def _totals(trace: object) -> object:
    ev = trace.events  # type: ignore[attr-defined]
    return frame({"events": np.array([len(ev["dur_ns"])]), "total_ns": np.array([int(ev["dur_ns"].sum())])})


def _per_event(trace: object) -> object:
    ev = trace.events  # type: ignore[attr-defined]
    return frame({"dur_ns": np.asarray(ev["dur_ns"][:50])})


def test_a_job_carries_vendor_tables_and_leaves_per_event_ones_with_the_rank(monkeypatch):
    """``per_event=True`` is kept (before: forced to False) and the table stays with its
    rank as launch_stats does; ``rank_summary(tables=...)`` takes a vendor name (before:
    "unknown analyses")."""
    from polyprof.ranks.result import rank_summary

    ep = entrypoints.EntryPoint("acme_rows", "acme:ROWS", "acme")
    rows = areg._analysis_of(areg.Analysis("acme_rows", _per_event, per_event=True), ep)
    assert rows.per_event is True
    monkeypatch.setattr(areg, "_extensions", (areg.Analysis("acme_totals", _totals), rows))
    trace = polyprof.load(TRITON)
    job = polyprof.load_ranks([trace, polyprof.load(TRITON)]).analyze("serial", window=None)
    assert job.overview["per_event_tables_left_with_ranks"][-1] == "acme_rows"
    assert "acme_rows" not in job.tables and "launch_stats" not in job.tables
    t = job.tables["acme_totals"]
    assert column(t, "rank").tolist() == [0, 1]
    assert column(t, "events").tolist() == [trace.n_events] * 2
    assert column(t, "total_ns").tolist() == [int(trace.events["dur_ns"].sum())] * 2
    only = rank_summary(trace, tables=("acme_totals", "acme_rows"), window=None)
    assert list(only.tables) == ["acme_totals", "acme_rows"]
    assert column(only.tables["acme_rows"], "dur_ns").tolist() == trace.events["dur_ns"][:50].tolist()


def test_a_store_rank_summarised_by_windows_leaves_vendor_tables_out_and_says_so(tmp_path, monkeypatch, caplog,
                                                                                  capsys):
    """No merge rule for a table polyprof does not know: left out, one warning naming it
    (before: left out without a word); read whole, it is there."""
    import logging

    from test_bigrank import _replicate
    from test_store_windows import LOW, V100

    from polyprof.cli import main

    store = polyprof.load_ranks([_replicate(V100, tmp_path / "rank0.json", 2)]).convert(tmp_path / "s")
    monkeypatch.setattr(areg, "_extensions", (areg.Analysis("acme_totals", _totals),))
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", LOW)
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        assert main(["summary", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "acme_totals" not in doc["tables"] and "kernel_breakdown" in doc["tables"]
    warned = [r.getMessage() for r in caplog.records if "acme_totals" in r.getMessage()]
    assert len(warned) == 1 and "summarised window by window" in warned[0], warned
    assert main(["summary", str(store), "--json", "--all-steps"]) == 0
    whole = json.loads(capsys.readouterr().out)["tables"]["acme_totals"]["records"]
    # every step's events: the window's, as a package's table is given them (docs/plugins.md §7)
    rank = polyprof.load_ranks(store).load(0)
    assert [r["events"] for r in whole] == [restrict(rank, Window(skip_first=0)).n_events]
