"""polyprof's one table type (issue 27): every analysis gives a pandas-free
:class:`~analyze.table.Table`, and what the reports make of the tables is what pandas
made of the DataFrames the analyses used to return (pandas is the reference here: its
``to_json(orient="records", double_precision=15)`` for ``--json``, ``notna`` and object
rows for the HTML report's records). Real traces (every Kineto and XSpace sample), real
runs (torch with memory, a script with sections and counters), the synthetic shapes no
program here makes (a CUDA device, a leak) and random traces. The terminal summary and
``--json`` of the real traces are compared byte for byte with the tree before the
change by scripts/compare_outputs.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

import polyprof
from polyprof.analyze import frames
from polyprof.analyze.table import Table
from polyprof.report import grid, json_records, terminal
from polyprof.report.tables import build
from polyprof.trace.factorize import factorize

from . import synth
from .test_memory import PATTERN, _leaky

SRC = Path(__file__).resolve().parents[2] / "src"
REAL = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "data" / "traces" / "kineto").glob("*.json.gz"))


def _text(report, width: int = 120) -> str:
    buf = io.StringIO()
    terminal.render(report, 15, Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def _pandas_json(df: pd.DataFrame) -> str:
    """What ``--json`` wrote of a table while the analyses returned DataFrames."""
    return df.to_json(orient="records", double_precision=15, date_format="iso") if len(df) else "[]"


def _same(trace, window="auto") -> None:
    """``trace``'s report: every table a Table, its JSON records what pandas writes of
    its DataFrame, its HTML records what pandas' rules make; the summary prints."""
    from polyprof.report.html import _records

    report = build(trace, window)
    for name, t in report.tables.items():
        assert isinstance(t, Table), name
        df = t.to_pandas()
        assert json_records.records(t) == _pandas_json(df), name
        cols = [*t.columns, "not_a_column"]
        assert _records(t, cols, 3) == _pandas_records(df, cols, 3), name
    assert _text(report)


@pytest.mark.parametrize("name", REAL)
def test_every_kineto_sample_gives_the_same_summary_without_pandas(traces_dir, name):
    trace = polyprof.load(traces_dir / "kineto" / name)
    _same(trace)
    _same(trace, window=None)  # every step


def test_the_tpu_sample_gives_the_same_summary_without_pandas(traces_dir):
    _same(polyprof.load(traces_dir / "xspace" / "tpu_inference_2.xplane.pb"))


@pytest.mark.parametrize("make", [synth.gpu_trace, lambda: synth.gpu_trace(with_ids=False),
                                  lambda: synth.pipeline_trace(sync_us=300, loader_us=500, copy_us=50,
                                                               end_sync_us=2000),
                                  _leaky, lambda: _leaky(freed=True)])
def test_synthetic_shapes_give_the_same_summary_without_pandas(make):
    trace = make()
    _same(trace)
    _same(trace, window=None)


def test_a_leak_is_found_from_tables_without_pandas():
    """The memory findings read the tables as columns: both fire on a leaky trace."""
    found = {f.id for f in build(_leaky(), None).findings}
    assert {"memory_growth", "memory_peak_held_by_one"} <= found


def _run(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    """``polyprof run`` of a script whose exit handler lists the heavy modules loaded
    (after the summary was printed: atexit runs once main returns)."""
    seen = tmp_path / "modules.txt"
    script = tmp_path / "s.py"
    script.write_text("import atexit, sys\n"
                      f"atexit.register(lambda: open({str(seen)!r}, 'w').write("
                      "' '.join(m for m in ('pandas', 'pyarrow') if m in sys.modules)))\n" + body)
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="120")
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", *args, "-o", str(tmp_path / "s.polyprof"), str(script)],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_the_summary_of_a_run_imports_neither_pandas_nor_pyarrow(tmp_path):
    """What ``polyprof run`` prints at the end is computed without pandas (0.3 s and
    90 MB to import), for a script with steps, sections and a counter, and it is what
    the tables of the written trace pass :func:`_same`."""
    body = ("import polyprof, time\n"
            "for i in range(4):\n"
            "    with polyprof.section('work'):\n"
            "        time.sleep(0.002)\n"
            "    polyprof.counter('loss', 1.0 / (i + 1))\n"
            "    polyprof.step()\n")
    p = _run(tmp_path, body)
    assert (tmp_path / "modules.txt").read_text().split() == []
    assert "Sections" in p.stdout and "work" in p.stdout and "loss" in p.stdout
    _same(polyprof.load(tmp_path / "s.polyprof"))


def test_a_torch_run_with_memory_gives_the_same_summary_without_pandas(tmp_path):
    pytest.importorskip("torch")
    _run(tmp_path, PATTERN, "--memory")
    trace = polyprof.load(tmp_path / "s.polyprof")
    report = build(trace, None)
    assert len(report.tables["memory_peak"]) and len(report.tables["section_stats"])
    _same(trace)
    _same(trace, window=None)


# ------------------------------------------------------------------ the parts
@pytest.mark.parametrize("values", [
    ["b", "a", "b", "c", "a"], ["x"] * 3, [], ["a", None, "b", None, "a"], [float("nan"), "a", 1, 1.0, "a"],
])
def test_factorize_of_objects_is_pandas_factorize(values):
    a = np.empty(len(values), object)
    a[:] = values
    codes, uniq = factorize(a)
    want_codes, want_uniq = pd.factorize(a)
    assert codes.tolist() == want_codes.tolist()
    assert list(uniq) == list(want_uniq)


@pytest.mark.parametrize("a", [np.array([3, 1, 3, 2, 1, 7], np.int64), np.array([2.5, np.nan, 1.0, 2.5, -0.0, 0.0]),
                               np.array([True, False, True]), np.array(["b", "a", "b"]), np.zeros(0, np.int32),
                               np.random.default_rng(1).integers(0, 50, 10_000)])
def test_factorize_of_numbers_is_pandas_factorize(a):
    codes, uniq = factorize(a)
    want_codes, want_uniq = pd.factorize(a)
    assert codes.tolist() == want_codes.tolist()
    assert np.asarray(uniq).tolist() == np.asarray(want_uniq).tolist()


def test_factorize_of_a_long_array_with_and_without_pandas_loaded():
    """Beyond SMALL values pandas' hash table is used when pandas is loaded: the dict
    path gives the same codes (here pandas is loaded, so the dict path is called as is)."""
    from polyprof.trace import factorize as F

    rng = np.random.default_rng(2)
    a = np.array([f"name{i}" for i in rng.integers(0, 300, 3 * F.SMALL)], dtype=object)
    a[::97] = None
    by_pandas = F.factorize(a)
    by_dict = F._objects(a)
    assert by_pandas[0].tolist() == by_dict[0].tolist()
    assert list(by_pandas[1]) == list(by_dict[1])


@pytest.mark.parametrize("values", [
    np.array([3.0, np.nan, 1.0, 3.0, np.nan, 2.0]), np.array([5, 1, 5, 2], np.int64),
    np.array(["b", "a", "c", "a"], dtype=object), np.array([np.nan, np.nan]), np.array([True, False, True]),
    np.array(["b", None, "a"], dtype=object),
])
@pytest.mark.parametrize("stable", [True, False])
def test_row_orders_are_pandas_sort_values(values, stable):
    kind = "stable" if stable else "quicksort"
    s = pd.DataFrame({"v": values})
    assert frames.order_desc(values, stable).tolist() == \
        s.sort_values("v", ascending=False, kind=kind).index.tolist()
    assert frames.order_asc(values, stable).tolist() == s.sort_values("v", kind=kind).index.tolist()


def test_one_value_is_nunique_of_one():
    for values in (["a", "a"], ["a", "b"], [1.0, np.nan], [np.nan, np.nan], [None, np.nan], [2, 2]):
        a = np.empty(len(values), object)
        a[:] = values
        assert grid._one_value(a) == (pd.Series(a).nunique(dropna=False) == 1), values


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    """``polyprof ARGS`` in a fresh process that prints, after it, the heavy modules it loaded."""
    code = ("import sys; from polyprof.cli import main; rc = main(sys.argv[1:]); sys.stdout.flush(); "
            "print('HEAVY', sorted(m for m in ('pandas',) if m in sys.modules), file=sys.stderr); sys.exit(rc)")
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="120")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.mark.parametrize("name", ["triton_example.json.gz", "a100_nccl_rank0.json.gz"])
def test_json_summary_is_written_from_the_tables_without_pandas(traces_dir, name):
    """``summary --json`` imports no pandas, and each table's records are what pandas'
    writer made of the DataFrames (docs/analysis.md, "Numbers in --json")."""
    path = traces_dir / "kineto" / name
    p = _cli(["summary", "--json", str(path)])
    assert b"HEAVY []" in p.stderr
    doc = json.loads(p.stdout)
    report = build(polyprof.load(path))
    assert list(doc["tables"]) == list(report.tables)
    for tname, t in report.tables.items():
        got = doc["tables"][tname]
        assert got["columns"] == t.columns and got["rows"] == len(t)
        want = _pandas_json(t.to_pandas())
        assert got["records"] == json.loads(want), tname
        assert len(t) == 0 or b'"records": ' + want.encode() in p.stdout, tname  # the very bytes
    assert doc["tables"]["kernel_breakdown"]["rows"] > 0


def test_summary_of_a_saved_trace_reads_and_prints_without_pandas(tmp_path):
    """``polyprof summary run.polyprof``: the Arrow columns are read from their buffers
    (pyarrow's to_numpy imports pandas) and the summary is the DataFrame path's."""
    _run(tmp_path, "import polyprof\nwith polyprof.section('s'):\n    polyprof.counter('c', 2.5)\n", "--no-summary")
    code = ("import sys; from polyprof.cli import main; rc = main(['summary', sys.argv[1]]); "
            "print('HEAVY', sorted(m for m in ('pandas',) if m in sys.modules)); sys.exit(rc)")
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="120")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.polyprof")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "HEAVY []" in p.stdout and "Sections" in p.stdout
    trace = polyprof.load(tmp_path / "s.polyprof")
    assert trace.n_events and "pandas" in sys.modules  # (this test process has it: the comparison below)
    _same(trace)


def _page(report) -> str:
    from polyprof.report.html import page_data, script_json

    return script_json(page_data(report))


def test_the_html_report_of_a_torch_memory_run_has_its_memory_tables(tmp_path):
    pytest.importorskip("torch")
    _run(tmp_path, PATTERN, "--memory", "--no-summary")
    trace = polyprof.load(tmp_path / "s.polyprof")
    _same(trace, None)
    assert '"peak_bytes"' in _page(build(trace, None))


def test_polyprof_report_of_one_trace_imports_no_pandas(traces_dir, tmp_path):
    code = ("import sys; from polyprof.cli import main; rc = main(['report', sys.argv[1], '-o', sys.argv[2]]); "
            "print('HEAVY', sorted(m for m in ('pandas',) if m in sys.modules)); sys.exit(rc)")
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "r.html"
    p = subprocess.run([sys.executable, "-c", code, str(traces_dir / "kineto" / "a100_alexnet_small.json.gz"),
                        str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "HEAVY []" in p.stdout and out.stat().st_size > 10_000


def _pandas_records(df: pd.DataFrame, cols: list[str], n: int | None) -> dict:
    """What the HTML report's records were, by pandas' own rules (``notna``, object rows)."""
    d = df[[c for c in cols if c in df.columns]]
    if n is not None:
        d = d.head(n)
    d = d.astype(object).where(pd.notna(d), None)
    return {"columns": list(d.columns), "rows": d.values.tolist(), "total": len(df)}


def test_html_records_are_what_pandas_made_of_every_table(traces_dir):
    """The column-wise records (report/html.py) against pandas' on every DataFrame of a
    trace's report and of a two-rank job's (NaN, nullable and text columns)."""
    from polyprof import load_ranks
    from polyprof.report.html import _records

    kineto = traces_dir / "kineto"
    tables = dict(build(polyprof.load(kineto / "a100_nccl_rank0.json.gz")).tables)
    job = load_ranks([kineto / "sampled_rank0.json.gz", kineto / "sampled_rank1.json.gz"]).analyze("serial")
    tables.update({f"ranks.{k}": v for k, v in job.tables.items()})
    assert all(isinstance(t, Table) for t in tables.values())  # the job's tables too
    frames_ = {name: t.to_pandas() for name, t in tables.items()}
    assert any(df.isna().to_numpy().any() for df in frames_.values() if len(df))  # missing values are covered
    for name, t in tables.items():
        df = frames_[name]
        cols = [*t.columns, "not_a_column"]
        for n in (None, 3):
            assert _records(t, cols, n) == _pandas_records(df, cols, n), name
        assert json_records.records(t) == _pandas_json(df), name


# ------------------------------------------------------------------ random traces
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from polyprof.trace import keys  # noqa: E402
from polyprof.trace.builder import TraceBuilder  # noqa: E402

_OPS = ["aten::mm", "aten::relu", "aten::add_", "Optimizer.step", "forward"]
_KERNELS = ["gemm_kernel", "relu_kernel", "ncclKernel_AllReduce_RING", "Memcpy HtoD", "elementwise"]
_LAUNCHES = ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaDeviceSynchronize", "cudaStreamSynchronize"]


@st.composite
def _traces(draw):
    """A host with one or two threads and a GPU with one or two streams: steps, framework
    ops, sections, launches with (some unmatched) kernels, memory events, counters."""
    b = TraceBuilder()
    host = b.plane(keys.HOST_PLANE, "host", pid=1)
    threads = [b.track(host, f"thread {i}", tid=i + 1) for i in range(draw(st.integers(1, 2)))]
    gpu = b.plane("/device:GPU:0", "device", vendor="nvidia", index=0)
    streams = [b.track(gpu, f"stream {7 + i}", "stream", tid=7 + i) for i in range(draw(st.integers(1, 2)))]
    us = st.integers(0, 2_000).map(lambda x: x * 1000)
    n_steps = draw(st.integers(0, 4))
    for k in range(n_steps):
        b.event(threads[0], f"ProfilerStep#{k}", k * 2_000_000, 2_000_000, "user_annotation")
    corr = 1
    for _ in range(draw(st.integers(0, 40))):
        th = draw(st.sampled_from(threads))
        t0, d = draw(us), draw(us)
        what = draw(st.sampled_from(["op", "section", "launch", "alloc", "counter"]))
        if what == "op":
            b.event(th, draw(st.sampled_from(_OPS)), t0, d, "cpu_op")
        elif what == "section":
            b.event(th, draw(st.sampled_from(["load", "train", "eval"])), t0, d, "user_annotation")
        elif what == "launch":
            name = draw(st.sampled_from(_LAUNCHES))
            b.event(th, name, t0, max(d // 20, 1000), "cuda_runtime", correlation_id=corr)
            if name != "cudaDeviceSynchronize" and draw(st.booleans()):
                kernel = draw(st.sampled_from(_KERNELS))
                cat = "gpu_memcpy" if kernel.startswith("Memcpy") else "kernel"
                b.event(draw(st.sampled_from(streams)), kernel, t0 + draw(us), max(d, 1000), cat,
                        correlation_id=corr, stream=7, device=0)
            corr += 1
        elif what == "alloc":
            n = draw(st.integers(-4, 8)) * (1 << 20)
            b.event(th, "alloc" if n >= 0 else "free", t0, 0, keys.CAT_MEMORY, alloc_bytes=n,
                    addr=draw(st.integers(1, 6)))
        else:
            b.counter(host, draw(st.sampled_from(["loss", "process.rss_bytes"])), [t0], [float(d) / 7])
    return b.build()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_traces())
def test_random_traces_give_the_same_summary_without_pandas(trace):
    _same(trace)
    _same(trace, window=None)
    assert "__DATA__" not in _page(build(trace, None))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_traces(), _traces())
def test_random_traces_through_every_output(tmp_path_factory, trace, other):
    """What found the window bugs above, kept: every report (JSON, HTML), the diff, and a
    .polyprof round trip that prints the same summary."""
    from polyprof.analyze.diff import diff
    from polyprof.report.html import render
    from polyprof.report.tables import to_json

    report = build(trace)
    assert json.loads(to_json(report))["overview"]["events"] == trace.n_events
    assert "__DATA__" not in render(report)
    diff(trace, other)
    path = tmp_path_factory.mktemp("rt") / "t.polyprof"
    trace.save(path)
    assert _text(build(polyprof.load(path))) == _text(build(trace))


@pytest.mark.parametrize("n", [3, 3 * 4096])
def test_intern_many_gives_missing_values_their_text_with_or_without_pandas(n):
    """TraceBuilder.intern_many went through pandas' factorize when pandas was loaded,
    which codes None as -1: the last distinct string was taken for it ("b" below), while
    without pandas it was interned as "None". Both go through trace/factorize.py now
    (n > SMALL: pandas' hash table, loaded in this process)."""
    from polyprof.trace.builder import TraceBuilder

    values = np.empty(n, object)
    values[:] = (["a", None, "b"] * n)[:n]
    b = TraceBuilder()
    ids = b.intern_many(values)
    assert [b.strings[i] for i in ids[:3].tolist()] == ["a", "None", "b"]
    assert b.strings[:3] == ["a", "None", "b"]  # interned in order of first appearance
    assert [b.strings[i] for i in ids.tolist()] == [str(v) for v in values.tolist()]
