"""One registry per extension point: formats (formats/registry.py), analyses
(analyze/registry.py), vocabularies (trace/vocabulary.py), plugin discovery
(collect/registry.py). Each test adds or uses an entry the way a contributor would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import polyprof
from polyprof.analyze import registry as areg
from polyprof.analyze.table import Table
from polyprof.formats import registry as freg

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def a100(traces_dir: Path) -> polyprof.Trace:
    return polyprof.load(traces_dir / "kineto" / "a100_alexnet_small.json.gz")


# ------------------------------------------------------------------ formats
def test_every_real_trace_is_read_by_its_registered_format(traces_dir: Path):
    from polyprof.formats.detect import detect

    seen = {detect(p) for p in [*traces_dir.glob("kineto/*.json.gz"), *traces_dir.glob("xspace/*.xplane.pb")]}
    assert seen == {"chrome-json", "xspace"}
    assert {f.name for f in freg.readers()} >= {"polyprof", "chrome-json", "polyprof-journal", "xspace", "nsys",
                                                "perfetto", "rocpd", "rocprofv3-json"}


@pytest.mark.parametrize("fmt", [f.name for f in freg.writers() if f.name != "tensorboard"])
def test_every_writer_writes_what_its_readers_or_duckdb_read(fmt: str, a100, tmp_path: Path):
    """The A100 trace through each registered writer: the file reads back with the same
    event count (or, for Parquet, DuckDB counts the rows)."""
    f = freg.by_name(fmt)
    name = "out" + (f.suffixes[0] if f.suffixes else ".bin")
    out = polyprof.export(a100, tmp_path / name, format=fmt)
    assert out.exists() and out.stat().st_size > 0
    if fmt == "parquet":
        n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}')").fetchall()[0][0]
        assert n == a100.n_events
    else:
        assert polyprof.load(out).n_events == a100.n_events


def test_output_name_picks_the_writer(a100, tmp_path: Path):
    assert freg.for_output("x.pt.trace.json.gz").name == "kineto"
    assert freg.for_output("x.json.gz").name == "chrome"
    assert freg.for_output("x.xplane.pb").name == "xspace"
    assert freg.for_output("x.txt") is None
    out = polyprof.export(a100, tmp_path / "events.parquet")
    assert duckdb.sql(f"SELECT count(*) FROM '{out}'").fetchall()[0][0] == a100.n_events
    with pytest.raises(polyprof.PolyprofError, match="cannot tell the format"):
        polyprof.export(a100, tmp_path / "x.txt")
    with pytest.raises(polyprof.PolyprofError, match="reads chrome-json but does not write it"):
        polyprof.export(a100, tmp_path / "x.json", format="chrome-json")


def test_cli_export_lists_and_infers_registered_writers(traces_dir: Path, tmp_path: Path):
    src = traces_dir / "kineto" / "triton_example.json.gz"
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", "--help"], capture_output=True, text=True,
                       timeout=120)
    for f in freg.writers():
        assert f.name in r.stdout
    out = tmp_path / "t.xplane.pb"
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(src), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    from polyprof.formats.detect import detect

    assert detect(out) == "xspace"  # from the name, not the default (chrome)


def test_a_new_format_is_one_registry_line(monkeypatch, a100, tmp_path: Path):
    """A contributor's format: a module with load/write and one Format entry."""
    mod = tmp_path / "csvfmt.py"
    mod.write_text(
        "from pathlib import Path\n"
        "import polyprof\n"
        "from polyprof.trace import TraceBuilder\n"
        "def write(trace, path):\n"
        "    df = trace.to_pandas()\n"
        "    Path(path).write_text('CSVTRACE\\n' + df[['name', 'start_ns', 'dur_ns']].to_csv(index=False))\n"
        "    return Path(path)\n"
        "def load(path):\n"
        "    import io, pandas as pd\n"
        "    df = pd.read_csv(io.StringIO(Path(path).read_text().split('\\n', 1)[1]))\n"
        "    b = TraceBuilder()\n"
        "    th = b.track(b.plane('/host:CPU', 'host'), 'main', 'thread', tid=1)\n"
        "    for n, s, d in zip(df['name'], df['start_ns'], df['dur_ns']):\n"
        "        b.event(th, str(n), int(s), int(d), 'cpu_op')\n"
        "    return b.build()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    new = freg.Format("csv", "a CSV of names and times", reader="csvfmt:load",
                      sniff=lambda head, path: head.startswith(b"CSVTRACE"), writer="csvfmt:write",
                      suffixes=(".csvtrace",))
    monkeypatch.setattr(freg, "FORMATS", (*freg.FORMATS, new))
    out = polyprof.export(a100, tmp_path / "a.csvtrace")
    back = polyprof.load(out)
    assert back.n_events == a100.n_events
    assert sorted(back.names().tolist()) == sorted(a100.names().tolist())


# ------------------------------------------------------------------ analyses
def test_summary_json_has_exactly_the_registered_tables(traces_dir: Path):
    src = traces_dir / "kineto" / "triton_example.json.gz"
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(src), "--json"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert list(json.loads(r.stdout)["tables"]) == [a.name for a in areg.ANALYSES]


def test_findings_reuse_the_report_tables(monkeypatch, a100):
    """findings() computes nothing the report already computed."""
    from polyprof.analyze.findings import findings

    tables = areg.compute_all(a100)
    calls = []
    real = areg.Analysis.run
    monkeypatch.setattr(areg.Analysis, "run", lambda self, *a: calls.append(self.name) or real(self, *a))
    findings(a100, tables)
    assert calls == []


def test_a_new_analysis_is_one_registry_line(monkeypatch, a100, tmp_path: Path):
    mod = tmp_path / "myanalysis.py"
    mod.write_text("def busiest_names(trace, kernels):\n"
                   "    return kernels[['name', 'total_ns']].head(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    new = areg.Analysis("busiest_names", "myanalysis:busiest_names", needs=("kernel_breakdown",))
    monkeypatch.setattr(areg, "ANALYSES", (*areg.ANALYSES, new))
    monkeypatch.setitem(areg._BY_NAME, new.name, new)
    from polyprof.report.tables import build, to_json

    rep = build(a100)
    got = rep.tables["busiest_names"]
    want = rep.tables["kernel_breakdown"].select(["name", "total_ns"]).head(3)
    assert isinstance(got, Table) and got.equals(want) and len(got) == 3
    assert json.loads(to_json(rep))["tables"]["busiest_names"]["rows"] == 3


def test_an_analysis_that_returns_a_dataframe_is_given_as_a_table(monkeypatch, a100, tmp_path: Path):
    """A third party's analysis written with pandas still works: the registry hands its
    result on as a Table, like every other analysis's."""
    mod = tmp_path / "pandasanalysis.py"
    mod.write_text("def top_kernels(trace, kernels):\n"
                   "    return kernels.to_pandas().nlargest(2, 'total_ns')[['name', 'total_ns']]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    new = areg.Analysis("top_kernels", "pandasanalysis:top_kernels", needs=("kernel_breakdown",))
    monkeypatch.setattr(areg, "ANALYSES", (*areg.ANALYSES, new))
    monkeypatch.setitem(areg._BY_NAME, new.name, new)
    got = areg.Tables(a100)["top_kernels"]
    kb = areg.Tables(a100)["kernel_breakdown"]
    assert isinstance(got, Table) and got.columns == ["name", "total_ns"]
    assert got["total_ns"].tolist() == sorted(kb["total_ns"].tolist(), reverse=True)[:2]


# ------------------------------------------------------------------ plugins
def test_plugin_discovery_is_all_in_the_registry():
    """collect/native.py loads and drives a library; finding plugins is collect/registry.py's."""
    from polyprof.collect import native, registry

    for fn in ("plugin_path_libraries", "path_plugins", "resolve_factory", "load_target", "import_factory"):
        assert hasattr(registry, fn) and not hasattr(native, fn), fn
    import ast

    tree = ast.parse(Path(native.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "registry" not in imported and "polyprof.collect.registry" not in imported  # no cycle


def test_every_plugin_has_a_conformance_workload():
    """Plugin declares it (a section and NumPy work); a device plugin overrides it."""
    from polyprof.collect.plugin import Plugin
    from polyprof.plugins.host import HostPlugin

    assert HostPlugin.conformance_workload is Plugin.conformance_workload
    with polyprof.profile(["host"]) as prof:
        HostPlugin.conformance_workload(0.05)
    assert "polyprof-kit" in set(prof.trace.names().tolist())
    from polyprof.plugins.torch import TorchPlugin

    assert TorchPlugin.conformance_workload is not Plugin.conformance_workload


def test_entry_point_scan_gives_what_importlib_metadata_gives(tmp_path):
    """collect/registry.entry_points reads the dist-info directories itself (importing
    importlib.metadata and parsing every distribution's entry points cost a run
    25-40 ms); it must find what importlib.metadata finds, in its order, for the
    installed packages plus distributions made here: one shadowing polyprof's own
    (a second "polyprof" later on sys.path), comments, blank lines and extras, one
    without entry points, and an egg-info; then with a zip on sys.path (that path's
    distributions only importlib.metadata reads)."""
    import json
    import os
    import subprocess
    import sys
    import zipfile

    site = tmp_path / "site"
    for name, text in {
        "Extra_Plugin-1.0.dist-info": "# a comment\n\n[polyprof.plugins]\n  extra = extra_mod:Factory [gpu]\n"
                                      "[console_scripts]\nextra-cli = extra_mod:main\n",
        "polyprof-9.9.dist-info": "[polyprof.plugins]\nhost = shadowed:Never\n",  # later on sys.path: shadowed
        "nothing-1.0.dist-info": None,
        "old.egg-info": "[polyprof.plugins]\nold=old_mod : Obj.attr\n",
    }.items():
        (site / name).mkdir(parents=True)
        if text is not None:
            (site / name / "entry_points.txt").write_text(text)
    zpath = tmp_path / "dists.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("zipped-1.0.dist-info/entry_points.txt", "[polyprof.plugins]\nzipped = zipped_mod:P\n")
        z.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
    code = ("import json, os, sys; sys.path += os.environ['EXTRA_PATH'].split(os.pathsep); "
            "from importlib.metadata import entry_points as m; "
            "from polyprof.collect import registry as r; "
            "groups = ['polyprof.plugins', 'console_scripts']; "
            "print(json.dumps([[[e.name, e.value] for e in m(group=g)] for g in groups] + "
            "[[[e.name, e.value] for e in r.entry_points(g)] for g in groups] + [r._scan(groups[0]) is None]))")
    src = str(Path(__file__).resolve().parents[1] / "src")
    for extra, zipped in ((str(site), False), (os.pathsep.join([str(site), str(zpath)]), True)):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), EXTRA_PATH=extra)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        want_plugins, want_scripts, got_plugins, got_scripts, fell_back = json.loads(p.stdout)
        assert got_plugins == want_plugins and got_scripts == want_scripts
        assert fell_back is zipped
        names = [n for n, _ in got_plugins]
        assert {"host", "extra", "old"} <= set(names) and ("zipped" in names) is zipped
        assert dict(got_plugins)["host"] == "polyprof.plugins.host:HostPlugin"
        assert dict(got_plugins)["extra"] == "extra_mod:Factory [gpu]"


def test_entry_point_load_follows_module_and_attributes():
    from polyprof.collect.registry import EntryPoint
    from polyprof.plugins.host import HostPlugin

    assert EntryPoint("host", "polyprof.plugins.host:HostPlugin").load() is HostPlugin
    assert EntryPoint("x", "polyprof.plugins.host : HostPlugin.name [extra]").load() == "host"
    import polyprof.plugins.host as mod

    assert EntryPoint("m", "polyprof.plugins.host").load() is mod


def test_distribution_names_normalise_as_importlib_metadata_does():
    """registry._normalise (string operations, on every run's scan) against the regular
    expression importlib.metadata uses, on names with every run of "_" and "."."""
    import itertools
    import re

    from polyprof.collect.registry import _normalise

    parts = ["a", "B", "_", ".", "__", "..", "._", "_.", "9"]
    for n in range(1, 5):
        for combo in itertools.product(parts, repeat=n):
            name = "".join(combo).lower()
            assert _normalise(name) == re.sub(r"[-_.]+", "_", name), name
