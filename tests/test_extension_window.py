"""Another package's analysis table and finding rule read the analysed window, as the
built-in tables do (docs/plugins.md, "Readers, analyses and findings from another
package"): under ``--steps`` (and the default window, which leaves the warm-up step
out) its table counts the window's events, not the whole trace's (before: every event
of the trace, beside built-in tables of one step), and its rule's ``trace.span_ns`` is
the analysed span; where the window is the whole trace it gets the trace itself. And at
80 columns its table leaves out its rightmost numbers before its name column is cut
below a name's width (before: names cut to ~10 characters, every number kept).

The package is a module and a dist-info on PYTHONPATH, as pip leaves one; the traces
are a real two-rank NCCL trace of three steps (tests/data) and a real OpenCL run on
PoCL recorded by a time window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from opencl_programs import FINISH, record  # pytest puts tests/ on sys.path

import polyprof
from polyprof.analyze import registry as areg
from polyprof.analyze.frames import column, frame
from polyprof.analyze.window import Window, selection
from polyprof.report import extension_tables, grid
from polyprof.report.tables import build
from polyprof.report.textout import _cells

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "traces" / "kineto"
NCCL = KINETO / "a100_nccl_rank0.json.gz"  # steps 4, 5, 6
NO_STEPS = KINETO / "cuda_event_sync_multistream.json.gz"

#: the package: a table of every event it is given, by category and name, and a rule
#: that says how many events it was given and their span
VENDOR = '''
import numpy as np
from polyprof.analyze.finding import Finding
from polyprof.analyze.frames import frame
from polyprof.analyze.registry import Analysis


def event_counts(trace):
    ev = trace.events
    strings = np.asarray(trace.strings, object)
    key = ev["category"].astype(np.int64) * len(strings) + ev["name"]
    keys, inv = np.unique(key, return_inverse=True)
    return frame({"category": strings[keys // len(strings)], "name": strings[keys % len(strings)],
                  "count": np.bincount(inv, minlength=len(keys)),
                  "total_ns": np.bincount(inv, ev["dur_ns"], minlength=len(keys)).astype(np.int64)})


EVENT_COUNTS = Analysis("acme_event_counts", "acme_window_polyprof:event_counts")


def given(trace, t):
    start, end = trace.span_ns
    return [Finding("acme_given", f"ACME was given {trace.n_events} events", "low", "/host:CPU",
                    {"events": trace.n_events, "start_ns": start, "end_ns": end,
                     "counted": int(t("acme_event_counts")["count"].sum())})]
'''

ENTRY_POINTS = """[polyprof.analyses]
acme_event_counts = acme_window_polyprof:EVENT_COUNTS
[polyprof.findings]
acme_given = acme_window_polyprof:given
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "acme_window_polyprof").mkdir(parents=True)
    (site / "acme_window_polyprof" / "__init__.py").write_text(VENDOR)
    info = site / "acme_window_polyprof-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-window-polyprof\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def _summary(tmp_path: Path, site: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]),
               POLYPROF_ENTRY_POINT_CACHE="0")
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "WARNING: acme" not in r.stderr, r.stderr
    return json.loads(r.stdout)


def _by_name(records: list[dict]) -> dict[tuple[str, str], tuple[int, int]]:
    """(category, name) -> (count, total_ns), summed over a table's rows."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for r in records:
        c, t = out.get((r["category"], r["name"]), (0, 0))
        out[(r["category"], r["name"])] = (c + r["count"], t + r["total_ns"])
    return out


def test_a_package_table_and_rule_read_the_window_under_steps(tmp_path, site):
    """``--steps 5`` and the default window (steps 5-6: step 4 is the warm-up): the
    package's counts are the built-in event table's, (category, name) by (category,
    name), and its rule's span is the analysed span (before: all 26,935 events of the
    trace and its whole span)."""
    whole = polyprof.load(NCCL).n_events
    for args in (["--steps", "5"], []):
        doc = _summary(tmp_path, site, *args, str(NCCL))
        ov = doc["overview"]
        mine = _by_name(doc["tables"]["acme_event_counts"]["records"])
        assert mine == _by_name(doc["tables"]["event_stats"]["records"]), args
        events = sum(c for c, _ in mine.values())
        assert 0 < events < whole
        # kernels, copies and memsets as "Top device activity" counts them (launched in the window)
        names = _by_name([{**r, "category": ""} for r in doc["tables"]["acme_event_counts"]["records"]])
        device = {("", r["name"]): (r["count"], r["total_ns"]) for r in doc["tables"]["kernel_breakdown"]["records"]}
        assert device and {k: names[k] for k in device} == device, args
        found = {f["id"]: f for f in doc["findings"]}["acme_given"]["evidence"]
        assert found == {"events": events, "start_ns": ov["analysed_span_start_ns"],
                         "end_ns": ov["analysed_span_start_ns"] + ov["analysed_span_ns"], "counted": events}, args


def test_a_package_gets_the_whole_trace_where_the_window_is_the_whole_trace(tmp_path, site, monkeypatch):
    """A trace without steps is analysed whole: the package gets every event and the
    trace's span; so does ``build(trace, None)`` of a trace with steps."""
    trace = polyprof.load(NO_STEPS)
    doc = _summary(tmp_path, site, str(NO_STEPS))
    mine = _by_name(doc["tables"]["acme_event_counts"]["records"])
    assert sum(c for c, _ in mine.values()) == trace.n_events
    found = {f["id"]: f for f in doc["findings"]}["acme_given"]["evidence"]
    assert (found["events"], found["start_ns"], found["end_ns"]) == (trace.n_events, *trace.span_ns)
    seen: list[polyprof.Trace] = []
    monkeypatch.setattr(areg, "_extensions", (areg.Analysis("acme_seen", lambda t: seen.append(t) or frame({})),))
    nccl = polyprof.load(NCCL)
    build(nccl, None)
    assert seen == [nccl]
    build(nccl, Window(5, 6))
    assert seen[-1] is not nccl and seen[-1].n_events < nccl.n_events


def _counts(trace: polyprof.Trace) -> object:
    ev = trace.events
    names = np.asarray(trace.strings, object)[ev["name"]]
    keys, inv = np.unique(names.astype(str), return_inverse=True)
    return frame({"name": keys.astype(object), "count": np.bincount(inv, minlength=len(keys)),
                  "total_ns": np.bincount(inv, ev["dur_ns"], minlength=len(keys)).astype(np.int64)})


def test_each_rank_of_a_job_gives_the_package_its_window(monkeypatch):
    """A job's per-rank tables (``load_ranks(...).analyze``): each rank's package table
    counts its window's kernels, as its kernel table does."""
    monkeypatch.setattr(areg, "_extensions", (areg.Analysis("acme_counts", _counts),))
    job = polyprof.load_ranks([polyprof.load(NCCL), polyprof.load(NCCL)]).analyze("serial", window=Window(5, 6))
    t, kb = job.tables["acme_counts"], job.tables["kernel_breakdown"]
    whole = polyprof.load(NCCL).n_events
    for rank in (0, 1):
        mine = dict(zip(column(t, "name")[column(t, "rank") == rank].tolist(),
                        column(t, "count")[column(t, "rank") == rank].tolist()))
        assert sum(mine.values()) < whole
        theirs = column(kb, "rank") == rank
        for name, count in zip(column(kb, "name")[theirs].tolist(), column(kb, "count")[theirs].tolist()):
            assert mine[name] == count, (rank, name)


@pytest.mark.opencl
def test_in_a_time_window_the_package_gets_each_event_cut_to_the_window(tmp_path, monkeypatch):
    """``polyprof run --delay 0.8 --duration 0.3`` of 60 OpenCL kernels of ~0.1 s queued
    at once: no step in the window, so it is analysed as that window, the kernels running
    through its edges counted for their part inside. The package's trace spans no more
    than the window, and its kernel time is the built-in kernel table's."""
    seen: list[polyprof.Trace] = []
    monkeypatch.setattr(areg, "_extensions", (areg.Analysis("acme_counts", lambda t: seen.append(t) or _counts(t)),))
    for k in range(3):  # (the delay counts from the session's start: on a loaded machine the
        # program's set-up, pyopencl's import and the kernel's build, can outlast it, and the
        # window then falls before the kernels (CI at load 8): recorded again, later)
        trace, _ = record(tmp_path, "finish", FINISH, ["--delay", str(0.8 + 1.5 * k), "--duration", "0.3"],
                          [str(60 + 15 * k)], summary=False)
        seen.clear()
        rep = build(trace)
        sel = selection(rep.trace)
        assert sel is not None and sel.timed and len(seen) == 1
        kernels = trace.names() == "axpy"
        start, end = trace.events["start_ns"][kernels], trace.end_ns[kernels]
        if ((start < sel.hi) & (end > sel.hi)).any():
            break
    assert ((start < sel.hi) & (end > sel.hi)).any(), "no kernel runs past the window: the program ran too fast"
    t0, t1 = seen[0].span_ns
    assert sel.lo <= t0 and t1 <= sel.hi
    mine, kb = rep.tables["acme_counts"], rep.tables["kernel_breakdown"]
    got = dict(zip(column(mine, "name").tolist(), zip(column(mine, "count").tolist(),
                                                          column(mine, "total_ns").tolist())))
    assert "axpy" in column(kb, "name").tolist()
    for name, count, total in zip(column(kb, "name").tolist(), column(kb, "count").tolist(),
                                  column(kb, "total_ns").tolist()):
        assert got[name] == (count, total), name


# ------------------------------------------------------------------ 80 columns
LONG = "acme_gemm_bf16_128x128x64_tn_very_long_kernel_name_for_width_tests"


def _acme(trace: polyprof.Trace) -> object:
    """The shape of a vendor's kernel table: a name, then six numbers (two of them surplus)."""
    names = np.array(["acme_copy", LONG, "acme_softmax"], object)
    n = np.array([83, 84, 83], np.int64)
    return frame({"kernel": names, "launches": n, "total_ns": n * 500_000, "share_pct": np.array([41.5, 25.2, 33.2]),
                  "bytes": n * 4096, "extra_a": n, "extra_b": n})


def _laid_out(tables: dict, width: int = 80) -> tuple[list[str], list[str], list[list[str]]]:
    got: list = []
    extension_tables.parts(got.append, tables, 10, width, grid._table)
    lines = [text for text, _ in got[0].lines(width)]
    assert all(_cells(ln) <= width for ln in lines), lines
    heads = [c.strip() for c in lines[2].strip("┃").split("┃")]
    rows = [[c.strip() for c in ln.strip("│").split("│")] for ln in lines if ln.startswith("│")]
    return lines, heads, rows


def test_at_80_columns_a_package_table_leaves_out_numbers_before_cutting_its_names(monkeypatch):
    """The rightmost numbers go (named in the title) before the name column narrows
    below a name's 24 characters (before: ``acme_gemm_…``, every number kept, no note);
    in a job, ``rank`` and the name both stay (before: the name cut to 14)."""
    monkeypatch.setattr(areg, "_extensions", (areg.Analysis("acme_kernels", _acme),))
    trace = polyprof.load(NO_STEPS)
    lines, heads, rows = _laid_out(areg.compute_all(trace))
    assert "(left out: extra b, extra a)" in lines[0], lines[0]
    assert heads == ["kernel", "launches", "total", "share pct", "bytes"]
    name = [r[0] for r in rows]
    assert name[0] == "acme_copy" and name[2] == "acme_softmax"
    assert len(name[1]) >= grid.NAME_FLOOR and LONG.startswith(name[1].rstrip("…")), name
    job = polyprof.load_ranks([trace, polyprof.load(NO_STEPS)]).analyze("serial", window=None)
    lines, heads, rows = _laid_out(job.tables)
    assert heads[:2] == ["rank", "kernel"] and "launches" in heads and "extra b" not in heads, heads
    assert "(left out: extra b" in lines[0], lines[0]
    assert all(len(r[1]) >= min(len(LONG), grid.NAME_FLOOR) or r[1] in ("acme_copy", "acme_softmax") for r in rows)
    # wide enough, nothing is left out or cut
    lines, heads, rows = _laid_out(areg.compute_all(trace), 200)
    assert "left out" not in lines[0] and heads[-1] == "extra b" and rows[1][0] == LONG
