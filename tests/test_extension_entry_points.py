"""Readers, writers, analyses and finding rules from another package, through the
entry-point groups ``polyprof.formats``, ``polyprof.analyses`` and ``polyprof.findings``
(polyprof/entrypoints.py; docs/plugins.md, "Readers, analyses and findings from another
package"): a tiny vendor package as pip leaves it (a module and a dist-info) on
PYTHONPATH, and ``python -m polyprof`` in a child: the numbers its reader reads reach
the summary, its table the --json, its finding the terminal; and each way such a
package can be wrong is skipped or contained with one warning, the command going on."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import polyprof
from polyprof import entrypoints as _ep

ROOT = Path(__file__).resolve().parents[1]

#: a made-up line format: a header, then ``kernel NAME START_NS DUR_NS`` per line
VENDOR = '''
import os
from pathlib import Path
import numpy as np
from polyprof.analyze.finding import Finding
from polyprof.analyze.frames import frame
from polyprof.analyze.registry import Analysis
from polyprof.formats.registry import Format
from polyprof.trace.builder import TraceBuilder

BREAK = os.environ.get("ACME_BREAK", "")
if BREAK == "print":
    print("ACME IMPORTED")


def sniff(head, path):
    if BREAK == "sniff":
        raise RuntimeError("acme sniff is broken")
    return head.startswith(b"ACMELOG 1\\n")


def load(path, **options):
    if BREAK == "read":
        raise ValueError("acme parser choked")
    if BREAK == "garbage":
        return {"events": 3}
    rows = [ln.split() for ln in Path(path).read_text().splitlines()[1:] if ln.strip()]
    b = TraceBuilder()
    track = b.track(b.plane("/device:ACME:0", "device", vendor="acme"), "queue 0", "stream")
    b.events(track, np.array([r[1] for r in rows], object), np.array([int(r[2]) for r in rows]),
             np.array([int(r[3]) for r in rows]), "kernel")
    return b.build()


def write(trace, path):
    ev = trace.events
    with open(path, "w") as f:
        f.write("ACMELOG 1\\n")
        for n, s, d in zip(ev["name"].tolist(), ev["start_ns"].tolist(), ev["dur_ns"].tolist()):
            f.write(f"kernel {trace.strings[n]} {s} {d}\\n")
    return Path(path)


ACME_FORMAT = Format("acme-log", "ACME's kernel log (ACMELOG 1)", reader="acme_polyprof:load", sniff=sniff,
                     writer="acme_polyprof:write", suffixes=(".acmelog",))


def make_format():
    return ACME_FORMAT._replace(name="acme-log2", sniff=None, suffixes=(".acmelog2",))


def kernel_totals(trace):
    if BREAK == "analysis":
        raise ZeroDivisionError("acme analysis divided by zero")
    if BREAK == "print":
        print("ACME DEBUG: totals")
    ev = trace.events
    names = np.array([trace.strings[i] for i in ev["name"].tolist()], object)
    keys, inv = np.unique(names, return_inverse=True)
    return frame({"name": keys, "count": np.bincount(inv), "total_ns": np.bincount(inv, ev["dur_ns"]).astype(np.int64)})


ACME_ANALYSIS = Analysis("acme_kernel_totals", "acme_polyprof:kernel_totals")


def long_kernels(trace, t):
    if BREAK == "rule":
        raise KeyError("acme rule lost its table")
    if BREAK == "rule-garbage":
        return ["not a finding"]
    kt = t("acme_kernel_totals")
    if not len(kt):
        return []
    i = int(np.argmax(kt["total_ns"]))
    return [Finding("acme_long_kernel", f"ACME kernel {kt['name'][i]} takes {int(kt['total_ns'][i])} ns",
                    "medium", "/device:ACME:0", {"total_ns": int(kt["total_ns"][i])})]


NOT_A_FORMAT = 42
DUPLICATE = Format("chrome-json", "claims a built-in name", reader="acme_polyprof:load", sniff=sniff)
'''

ENTRY_POINTS = """[polyprof.formats]
acme-log = acme_polyprof:ACME_FORMAT
acme-log2 = acme_polyprof:make_format
[polyprof.analyses]
acme_kernel_totals = acme_polyprof:ACME_ANALYSIS
[polyprof.findings]
acme_long_kernel = acme_polyprof:long_kernels
"""

#: entry points a broken vendor package could declare, each skipped with one warning
BROKEN = """[polyprof.formats]
acme-missing = acme_polyprof_missing:FORMAT
acme-int = acme_polyprof:NOT_A_FORMAT
acme-dup = acme_polyprof:DUPLICATE
[polyprof.analyses]
acme-attr = acme_polyprof:NO_SUCH_ANALYSIS
[polyprof.findings]
acme-rule-int = acme_polyprof:NOT_A_FORMAT
"""

#: (name, start_ns, dur_ns) of the log's kernels
KERNELS = [("acme_gemm", 1_000, 400), ("acme_gemm", 2_000, 600), ("acme_copy", 3_000, 50)]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site(tmp_path)


def make_site(tmp_path: Path) -> Path:
    """The vendor package as an installed dist-info in ``tmp_path/site``, and
    ``tmp_path/run.acmelog`` (tests/test_extension_tables.py builds on it)."""
    site = tmp_path / "site"
    (site / "acme_polyprof").mkdir(parents=True)
    (site / "acme_polyprof" / "__init__.py").write_text(VENDOR)
    info = site / "acme_polyprof-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-polyprof\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    log = tmp_path / "run.acmelog"
    log.write_text("ACMELOG 1\n" + "".join(f"kernel {n} {s} {d}\n" for n, s, d in KERNELS))
    return site


def _broken(site: Path) -> None:
    info = site / "acme_broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(BROKEN)


def _polyprof(tmp_path: Path, site: Path, *args: str, brk: str = "", cache: str = "0") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]), ACME_BREAK=brk,
               POLYPROF_ENTRY_POINT_CACHE=cache, XDG_CACHE_HOME=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "polyprof", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def _summary(tmp_path: Path, site: Path, brk: str = "", name: str = "run.acmelog") -> tuple[dict, str]:
    r = _polyprof(tmp_path, site, "summary", "--json", name, brk=brk)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_a_vendor_format_analysis_and_finding_reach_the_summary(tmp_path, site):
    doc, err = _summary(tmp_path, site)
    assert "Traceback" not in err and "WARNING" not in err, err
    stats = {(r["category"], r["name"]): r for r in doc["tables"]["event_stats"]["records"]}
    for name in ("acme_gemm", "acme_copy"):
        mine = [(s, d) for n, s, d in KERNELS if n == name]
        assert (stats[("kernel", name)]["count"], stats[("kernel", name)]["total_ns"]) == \
            (len(mine), sum(d for _, d in mine))
    assert doc["overview"]["events"] == 3
    tables = list(doc["tables"])
    assert tables[-1] == "acme_kernel_totals"  # after every built-in table
    recs = {r["name"]: (r["count"], r["total_ns"]) for r in doc["tables"]["acme_kernel_totals"]["records"]}
    assert recs == {"acme_gemm": (2, 1000), "acme_copy": (1, 50)}
    found = {f["id"]: f for f in doc["findings"]}
    assert found["acme_long_kernel"]["evidence"] == {"total_ns": 1000}
    r = _polyprof(tmp_path, site, "summary", "run.acmelog")
    assert r.returncode == 0, r.stderr
    assert "ACME kernel acme_gemm takes 1000 ns" in r.stdout


def test_load_export_and_sql_through_the_vendor_format(tmp_path, site):
    r = _polyprof(tmp_path, site, "export", "run.acmelog", "-o", "back.acmelog")  # the suffix picks it
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "back.acmelog").read_text().splitlines()
    assert lines[0] == "ACMELOG 1" and sorted(lines[1:]) == sorted(f"kernel {n} {s} {d}" for n, s, d in KERNELS)
    r = _polyprof(tmp_path, site, "export", "run.acmelog", "-f", "acme-log2", "-o", "named.txt")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "named.txt").read_text() == (tmp_path / "back.acmelog").read_text()
    r = _polyprof(tmp_path, site, "export", "--help")
    assert "acme-log: ACME's kernel log" in " ".join(r.stdout.split())
    r = _polyprof(tmp_path, site, "export", "run.acmelog", "-o", "t.polyprof")
    assert r.returncode == 0, r.stderr
    r = _polyprof(tmp_path, site, "sql", "--csv", "run.acmelog", "select sum(dur_ns) as total from events")
    assert r.returncode == 0 and r.stdout.split() == ['"total"', "1050"], (r.stdout, r.stderr)
    r = _polyprof(tmp_path, site, "report", "run.acmelog", "-o", "r.html")
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "r.html").read_text()  # the reader's kernels and the rule's finding in the report's data
    assert '["acme_gemm","compute",2,1000,' in html and "ACME kernel acme_gemm takes 1000 ns" in html
    code = ("import polyprof; t = polyprof.load('run.acmelog'); print(t.n_events, int(t.events['dur_ns'].sum()), "
            "polyprof.load('t.polyprof').n_events)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]),
               POLYPROF_ENTRY_POINT_CACHE="0")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["3", "1050", "3"]


def test_polyprof_plugins_lists_the_extensions_and_the_skipped_ones(tmp_path, site):
    _broken(site)
    r = _polyprof(tmp_path, site, "plugins")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for kind, name in (("format", "acme-log"), ("format", "acme-log2"), ("analysis", "acme_kernel_totals"),
                       ("finding", "acme_long_kernel")):
        assert f"{kind} {name} acme_polyprof" in out, (kind, name, r.stdout)
    for name in ("acme-missing", "acme-int", "acme-dup", "acme-attr", "acme-rule-int"):
        assert name in out and "skipped" in out, (name, r.stdout)


def test_broken_entry_points_are_each_skipped_with_one_warning(tmp_path, site):
    """An entry point that cannot be imported, names what is missing or the wrong type,
    or takes a built-in format's name: one warning each naming the distribution and the
    entry point, no traceback, and the good ones still work."""
    _broken(site)
    doc, err = _summary(tmp_path, site)
    assert "Traceback" not in err, err
    assert doc["overview"]["events"] == 3 and "acme_kernel_totals" in doc["tables"]
    warnings = [ln for ln in err.splitlines() if "WARNING" in ln]
    for group, name, why in (("polyprof.formats", "acme-missing", "cannot import it (ModuleNotFoundError"),
                             ("polyprof.formats", "acme-int", "it gives an int, not a polyprof.formats.registry.Format"),
                             ("polyprof.formats", "acme-dup", "the name 'chrome-json' is taken by a built-in one"),
                             ("polyprof.analyses", "acme-attr", "cannot import it (AttributeError"),
                             ("polyprof.findings", "acme-rule-int", "it gives an int, not a rule")):
        mine = [w for w in warnings if f"{group} entry point {name!r} of acme_broken" in w]
        assert len(mine) == 1 and why in mine[0], (name, err)
    assert len(warnings) == 5, err
    # the Kineto file is still read by its built-in reader, not the duplicate's (whose
    # sniff would take it): the formats' group is not even looked at
    kin = ROOT / "tests" / "data" / "traces" / "kineto" / "triton_example.json.gz"
    r = _polyprof(tmp_path, site, "summary", "--json", str(kin))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["overview"]["events"] == polyprof.load(kin).n_events
    assert "polyprof.formats" not in r.stderr and r.stderr.count("WARNING") == 2, r.stderr


def test_a_vendor_reader_that_raises_or_gives_garbage_is_a_trace_format_error(tmp_path, site):
    for brk, why in (("read", "damaged or unsupported content (ValueError: acme parser choked)"),
                     ("garbage", "gave a dict, not a polyprof Trace")):
        r = _polyprof(tmp_path, site, "summary", "run.acmelog", brk=brk)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        assert "run.acmelog" in r.stderr and why in r.stderr, r.stderr
    code = ("import os, polyprof; from polyprof.errors import TraceFormatError\n"
            "try:\n    polyprof.load('run.acmelog')\nexcept TraceFormatError as e:\n    print('TFE', e)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]), ACME_BREAK="read",
               POLYPROF_ENTRY_POINT_CACHE="0")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.stdout.startswith("TFE ") and "run.acmelog" in p.stdout, (p.stdout, p.stderr)


def test_a_vendor_reader_is_held_to_the_event_limit(tmp_path, site):
    env_limit = {"POLYPROF_MAX_EVENTS": "2"}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]),
               POLYPROF_ENTRY_POINT_CACHE="0", **env_limit)
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", "run.acmelog"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "more than 2 events (3;" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_vendor_sniff_that_raises_is_not_its_file_and_built_ins_sniff_first(tmp_path, site):
    r = _polyprof(tmp_path, site, "summary", "run.acmelog", brk="sniff")
    assert r.returncode != 0 and "unrecognised format" in r.stderr, r.stderr
    assert r.stderr.count("its sniff raised RuntimeError (acme sniff is broken)") == 1, r.stderr
    assert "Traceback" not in r.stderr
    # a file a built-in format sniffs is never shown to the vendor's sniff (it would raise)
    kin = ROOT / "tests" / "data" / "traces" / "kineto" / "triton_example.json.gz"
    r = _polyprof(tmp_path, site, "summary", str(kin), brk="sniff")
    assert r.returncode == 0 and "acme sniff" not in r.stderr, r.stderr


def test_a_vendor_analysis_that_raises_gives_an_empty_table_and_a_warning(tmp_path, site):
    doc, err = _summary(tmp_path, site, brk="analysis")
    assert doc["tables"]["acme_kernel_totals"]["rows"] == 0
    assert doc["overview"]["events"] == 3  # the rest of the summary is there
    assert "event_stats" in doc["tables"] and "acme_long_kernel" not in {f["id"] for f in doc["findings"]}
    mine = [ln for ln in err.splitlines() if "WARNING" in ln]
    assert len(mine) == 1 and "'acme_kernel_totals' of acme_polyprof" in mine[0] \
        and "ZeroDivisionError: acme analysis divided by zero" in mine[0], err
    assert "Traceback" not in err


def test_what_vendor_code_prints_leaves_the_json_alone(tmp_path, site):
    """Its module printing at import and its analysis printing: on stderr, and stdout is
    still the JSON (before: 'ACME IMPORTED' ahead of it)."""
    doc, err = _summary(tmp_path, site, brk="print")
    assert doc["tables"]["acme_kernel_totals"]["rows"] == 2
    assert "ACME IMPORTED" in err and "ACME DEBUG: totals" in err


@pytest.mark.parametrize("brk, why", [("rule", "KeyError"), ("rule-garbage", "gave a str among its findings")])
def test_a_vendor_finding_rule_that_fails_is_skipped_with_a_warning(tmp_path, site, brk, why):
    doc, err = _summary(tmp_path, site, brk=brk)
    assert "acme_long_kernel" not in {f["id"] for f in doc["findings"]}
    assert doc["tables"]["acme_kernel_totals"]["rows"] == 2
    mine = [ln for ln in err.splitlines() if "WARNING" in ln]
    assert len(mine) == 1 and "'acme_long_kernel' of acme_polyprof" in mine[0] and why in mine[0], err


def test_a_kineto_summary_does_not_look_for_vendor_formats(tmp_path, site, monkeypatch):
    """A file a built-in format sniffs loads without any search for other packages'
    formats (the analyses' and findings' groups are looked for: the summary lists them)."""
    from polyprof import entrypoints
    from polyprof.formats import detect, registry

    monkeypatch.setattr(registry, "_extensions", None)
    calls = []
    monkeypatch.setattr(entrypoints, "declared", lambda group: calls.append(group) or [])
    kin = ROOT / "tests" / "data" / "traces" / "kineto" / "triton_example.json.gz"
    assert detect.detect(kin) == "chrome-json" and calls == []
    with pytest.raises(Exception, match="unrecognised format"):
        detect.detect(tmp_path / "run.acmelog")
    assert calls == ["polyprof.formats"]


def test_the_cache_file_answers_until_a_directory_changes(tmp_path, site):
    """With the cache on: the second process reads the entry points from the file, and a
    package installed later (its directory's time changes) is seen."""
    os.utime(site, ns=(1_000_000_000, 1_000_000_000))  # settled: kept in the file
    r = _polyprof(tmp_path, site, "summary", "--json", "run.acmelog", cache="1")
    assert r.returncode == 0, r.stderr
    cache = tmp_path / "cache" / "polyprof" / "entry-points-v1.txt"
    text = cache.read_text()
    assert f"D\t1000000000\t{site}" in text and "E\tpolyprof.analyses\tacme_kernel_totals" in text
    # the file is what is read: an entry only it holds is used
    cache.write_text(text.replace("E\tpolyprof.findings\tacme_long_kernel", "E\tpolyprof.findings\tacme_from_cache"))
    r = _polyprof(tmp_path, site, "plugins", cache="1")
    assert "acme_from_cache" in r.stdout, r.stdout
    _broken(site)  # a new distribution: the directory's time moves on
    r = _polyprof(tmp_path, site, "plugins", cache="1")
    assert "acme_from_cache" not in r.stdout and "acme-missing" in r.stdout, r.stdout


def test_the_example_package_s_entry_points_work_as_its_pyproject_declares(tmp_path):
    """examples/python_plugin: its pyproject.toml's entry points, as pip would write them
    into entry_points.txt, read a log of its format; the table and the finding follow."""
    import tomllib

    example = ROOT / "examples" / "python_plugin"
    project = tomllib.loads((example / "pyproject.toml").read_text())["project"]
    site = tmp_path / "site"
    info = site / "polyprof_example_plugin-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in project["entry-points"].items()))
    # three gen-0 pauses of 300 ns and one gen-2 pause of 4000 ns over a 10 us span
    rows = [(7, 1_000, 1_300, 0), (7, 2_000, 2_300, 0), (8, 3_000, 3_300, 0), (7, 7_000, 11_000, 2)]
    (tmp_path / "run.gcpauses").write_text("GCPAUSES 1\n" + "".join(f"{t} {s} {e} {g} 5\n" for t, s, e, g in rows))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(example / "src"), str(ROOT / "src")]),
               POLYPROF_ENTRY_POINT_CACHE="0")
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", "run.gcpauses"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    got = {x["generation"]: (x["pauses"], x["total_ns"], x["max_ns"]) for x in doc["tables"]["gc_pauses"]["records"]}
    assert got == {0: (3, 900, 300), 2: (1, 4000, 4000)}
    found = {f["id"]: f for f in doc["findings"]}
    assert found["gc_pauses_long"]["evidence"] == {"gc_ns": 4900, "span_ns": 10_000, "share_pct": 49.0}
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", "run.gcpauses", "-o", "back.gcpauses"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    back = sorted((tmp_path / "back.gcpauses").read_text().splitlines()[1:])
    assert back == sorted(f"{t} {s} {e} {g} 0" for t, s, e, g in rows)


def test_the_extension_groups_are_what_importlib_metadata_gives(tmp_path):
    """entrypoints.declared (one pass for every polyprof.* group, through the cache file
    or not) against importlib.metadata: the same entry points in the same order, a
    distribution earlier on sys.path shadowing a later one of the same (normalised) name;
    then with a zip on sys.path, whose distributions only importlib.metadata reads."""
    import zipfile

    first, second = tmp_path / "first", tmp_path / "second"
    for root, name, text in (
            (first, "Acme.Tools-1.0.dist-info", "[polyprof.formats]\na = acme:A\n[polyprof.findings]\nr = acme:r\n"),
            (first, "plain-2.0.dist-info", None),
            (second, "acme_tools-0.9.dist-info", "[polyprof.formats]\nshadowed = old:A\n"),
            (second, "other-1.0.dist-info", "# c\n\n[polyprof.analyses]\n  t = other.mod : T.attr [x]\n"
                                            "[console_scripts]\nnot-ours = other:main\n"),
            (second, "old.egg-info", "[polyprof.formats]\negg = egg_mod:F\n")):
        (root / name).mkdir(parents=True)
        if text is not None:
            (root / name / "entry_points.txt").write_text(text)
    for d in (first, second):
        os.utime(d, ns=(10**9, 10**9))  # settled: the cache keeps them
    zpath = tmp_path / "dists.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("zipped-1.0.dist-info/entry_points.txt", "[polyprof.analyses]\nzipped = zipped_mod:Z\n")
        z.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
    code = ("import json, os, sys; sys.path[:0] = os.environ['EXTRA_PATH'].split(os.pathsep); "
            "from importlib.metadata import entry_points as m; from polyprof import entrypoints as e; "
            "groups = e.EXTENSION_GROUPS; "
            "print(json.dumps([[[x.name, x.value] for x in m(group=g)] for g in groups] + "
            "[[[x.name, x.value] for x in e.declared(g)] for g in groups]))")
    for extra, zipped in ((f"{first}{os.pathsep}{second}", False), (f"{first}{os.pathsep}{second}{os.pathsep}{zpath}", True)):
        for cache in ("0", "1", "1"):  # the second "1" reads the file the first wrote
            env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), EXTRA_PATH=extra, POLYPROF_ENTRY_POINT_CACHE=cache,
                       XDG_CACHE_HOME=str(tmp_path / "cache"))
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
            assert p.returncode == 0, p.stderr
            got = json.loads(p.stdout)
            want, mine = got[:3], got[3:]
            assert mine == want, (cache, zipped)
            formats, analyses, findings = mine
            assert formats[:2] == [["a", "acme:A"], ["egg", "egg_mod:F"]] and findings == [["r", "acme:r"]]
            assert ["t", "other.mod : T.attr [x]"] in analyses and (["zipped", "zipped_mod:Z"] in analyses) is zipped
    text = (tmp_path / "cache" / "polyprof" / "entry-points-v1.txt").read_text()
    assert f"D\t1000000000\t{first}" in text and "E\tpolyprof.formats\tshadowed\told:A\tacme_tools" in text


def test_a_vendor_reader_or_writer_that_cannot_be_imported_is_polyprofs_error(tmp_path, monkeypatch):
    """The reader's and writer's modules are imported when they read or write: a missing
    one is a TraceFormatError naming the file, an OutputError naming the output (any file
    there left as it was), not an ImportError's traceback."""
    from polyprof import entrypoints
    from polyprof.errors import OutputError, TraceFormatError
    from polyprof.formats import registry

    fmt = registry.Format("ghost", "a format whose modules are gone", reader="acme_ghost_mod:load",
                          sniff=lambda head, path: head.startswith(b"GHOST"), writer="acme_ghost_mod:write",
                          suffixes=(".ghost",))
    ep = entrypoints.EntryPoint("ghost", "acme_ghost:FORMAT", "acme_ghost")
    monkeypatch.setattr(registry, "_extensions", (registry._format_of(fmt, ep),))
    (tmp_path / "a.ghost").write_bytes(b"GHOST 1\n")
    with pytest.raises(TraceFormatError, match=r"a\.ghost: the reader of format 'ghost' \(polyprof\.formats entry "
                                               r"point 'ghost' of acme_ghost .*cannot be imported: ModuleNotFoundError"):
        polyprof.load(tmp_path / "a.ghost")
    (tmp_path / "out.ghost").write_text("before")
    trace = polyprof.load(ROOT / "tests" / "data" / "traces" / "kineto" / "triton_example.json.gz")
    with pytest.raises(OutputError, match=r"cannot write .*out\.ghost: ModuleNotFoundError"):
        polyprof.export(trace, tmp_path / "out.ghost")
    assert (tmp_path / "out.ghost").read_text() == "before"


def test_a_vendor_table_whose_needs_fail_or_loop_is_empty_with_a_warning(monkeypatch, caplog):
    """A need that is no table, or two tables that need each other: each an empty table
    with the columns it declares, one warning each, every built-in table still there."""
    import logging

    from polyprof.analyze import registry as areg
    from polyprof.analyze.frames import frame

    def count(trace, *tables):
        return frame({"n": [sum(len(t) for t in tables)]})

    mine = (areg.Analysis("x_missing", count, needs=("no_such_table",), empty=(("n", "i8"),)),
            areg.Analysis("x_b", count, needs=("x_c",)), areg.Analysis("x_c", count, needs=("x_b",)),
            areg.Analysis("x_ok", count, needs=("kernel_breakdown",)))
    monkeypatch.setattr(areg, "_extensions", mine)
    monkeypatch.setattr(areg, "_warned", set())
    trace = polyprof.load(ROOT / "tests" / "data" / "traces" / "kineto" / "triton_example.json.gz")
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        tables = areg.compute_all(trace)
    assert list(tables)[-4:] == ["x_missing", "x_b", "x_c", "x_ok"]
    assert tables["x_missing"].columns == ["n"] and len(tables["x_missing"]) == 0
    assert tables["x_ok"]["n"].tolist() == [len(tables["kernel_breakdown"])]
    warned = [r.getMessage() for r in caplog.records]
    assert len([w for w in warned if "'x_missing' is left empty" in w and "no_such_table" in w]) == 1, warned
    assert len([w for w in warned if "needs itself" in w]) == 1, warned
    assert len(warned) == 2, warned


def test_quiet_on_overlapping_threads_gives_stdout_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two vendor calls that overlap (polyprof.load on two files at once): the first in
    leaves first; contextlib.redirect_stdout then left sys.stdout as stderr for good."""
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def a() -> None:
        with _ep.quiet():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b() -> None:
        a_in.wait(10)
        with _ep.quiet():
            b_in.set()
            a_out.wait(10)
            print("vendor line")

    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert sys.stdout is out
    assert err.getvalue() == "vendor line\n" and out.getvalue() == ""


def test_no_cache_file_without_a_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No $HOME and a user the system does not know: expanduser leaves "~", and the cache
    was written to ./~/.cache/polyprof in the working directory."""
    import pwd

    def unknown(uid: int) -> object:
        raise KeyError(uid)

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_ep, "_declared", None)
    site = tmp_path / "site"
    info = site / "acme-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text("[polyprof.findings]\nacme = acme:rule\n")
    os.utime(info, ns=(10**9, 10**9))
    os.utime(site, ns=(10**9, 10**9))  # settled: the cache would keep it
    monkeypatch.setattr(sys, "path", [str(site)])
    assert [ep.name for ep in _ep.declared("polyprof.findings")] == ["acme"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]
