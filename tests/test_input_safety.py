"""Safe by default: `polyprof sql` cannot touch files, databases, extensions or the
network; the HTML report escapes hostile names in every context (checked in headless
Chromium); decompression bombs and huge event counts stop at configurable limits with a
clear error; a one-line CLI error for every failure; loading never unpickles."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import polyprof
from polyprof.cli import main
from polyprof.errors import PolyprofError, TraceFormatError
from polyprof.formats import native, safety

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analysis import browser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "tests" / "data" / "corpus" / "seeds"
HOSTILE = ["</script><script>document.documentElement.setAttribute('data-pwned','script')</script>",
           "<!--<script>", "__DATA__", "__TITLE__",
           "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','onerror')\">",
           "\" onerror=\"document.documentElement.setAttribute('data-pwned','attr')", "[memory] [bold]x[/bold]"]


@pytest.fixture(scope="module")
def hostile_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with polyprof.profile(plugins=["host"]) as s:
        for name in HOSTILE:
            with polyprof.section(name):
                pass
    d = tmp_path_factory.mktemp("hostile")
    return native.save(s.trace, d / "t__DATA__<img src=x onerror=alert(1)>.polyprof")


def _cli(*argv: str) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "polyprof", *argv], capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    return r.returncode, r.stdout, r.stderr


# ----------------------------------------------------------------------------- SQL
@pytest.mark.parametrize("query, word", [
    ("SELECT * FROM read_csv('/etc/passwd')", "/etc/passwd"),
    ("SELECT * FROM read_text('/etc/hostname')", "/etc/hostname"),
    ("COPY (SELECT 1) TO '{out}'", "{out}"),
    ("ATTACH '{db}' AS other", "{db}"),
    ("INSTALL httpfs", "extensions"),
    ("SET enable_external_access = true", "configuration"),
])
def test_sql_is_refused_outside_the_trace(hostile_file: Path, tmp_path: Path, query: str, word: str):
    out, db = tmp_path / "leak.csv", tmp_path / "x.duckdb"
    q = query.format(out=out, db=db)
    rc, stdout, err = _cli("sql", str(hostile_file), q)
    assert rc == 1 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("polyprof: error: SQL"), err
    assert word.format(out=out, db=db) in lines[0]
    if "external" not in query:
        assert "--allow-external" in lines[0]
    assert "root:" not in stdout and not out.exists() and not db.exists()


def test_sql_allow_external_lifts_the_sandbox(hostile_file: Path, tmp_path: Path):
    csv = tmp_path / "x.csv"
    csv.write_text("a,b\n1,2\n")
    rc, stdout, err = _cli("sql", str(hostile_file), f"SELECT a + b AS s FROM read_csv('{csv}')", "--csv",
                           "--allow-external")
    assert rc == 0, err
    assert stdout.splitlines() == ['"s"', "3"]


def test_sql_prints_names_as_they_are(hostile_file: Path):
    rc, stdout, err = _cli("sql", str(hostile_file), "SELECT DISTINCT name FROM events WHERE name LIKE '[%'")
    assert rc == 0, err
    assert "[memory] [bold]x[/bold]" in stdout  # not eaten as rich markup


# ----------------------------------------------------------------------------- HTML
def test_html_keeps_hostile_text_out_of_markup(hostile_file: Path, tmp_path: Path):
    out = tmp_path / "r.html"
    assert main(["report", str(hostile_file), "-o", str(out)]) == 0
    page = out.read_text()
    script = page.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in script and ">" not in script  # nothing in the data can end or hide the element
    data = json.loads(script)  # the page data is whole, once, in its element
    assert page.count('id="data"') == 1
    assert data["title"] == hostile_file.name
    assert set(HOSTILE) <= set(data["sections"]["rows"][i][0] for i in range(len(data["sections"]["rows"])))
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
    assert "&lt;img src=x onerror=alert(1)&gt;" in title and "<img" not in title


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_report_with_hostile_names_stays_whole_in_chromium(hostile_file: Path, tmp_path: Path):
    out = tmp_path / "r.html"
    assert main(["report", str(hostile_file), "-o", str(out)]) == 0
    dom, log = browser.dump_dom(out)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert "data-pwned" not in root, root  # no script or handler from the trace ran
    assert 'data-rendered="1"' in root, "the report script did not finish (page data cut off?)"
    assert "data-js-errors" not in root, root
    assert "Uncaught" not in log
    sections = dom.split('id="sections-table"', 1)[1].split("</section>", 1)[0]
    for name in HOSTILE:  # every name shown as text, escaped once
        esc = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert esc in sections, name
    sub = dom.split('id="subtitle"', 1)[1].split("</div>", 1)[0]
    assert "t__DATA__&lt;img src=x onerror=alert(1)&gt;.polyprof" in sub
    assert "<img" not in sub


def _hostile_kineto(path: Path) -> Path:
    """A Kineto trace with HOSTILE in op, kernel, annotation, thread, stream and device
    names and in args; every name inside the analysed steps (1-N: step 0 is skipped)."""
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": HOSTILE[4]}},
          {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": HOSTILE[5]}},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 2, "ts": 900, "dur": 60}]
    for i, h in enumerate(HOSTILE, 1):
        t = 1000 * i
        ev += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 2, "ts": t - 1,
                "dur": 60},
               {"ph": "X", "cat": "user_annotation", "name": h, "pid": 1, "tid": 2, "ts": t, "dur": 50,
                "args": {h: h}},
               {"ph": "X", "cat": "cpu_op", "name": f"{h} op", "pid": 1, "tid": 2, "ts": t + 5, "dur": 20,
                "args": {"External id": i}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": t + 6,
                "dur": 3, "args": {"correlation": 100 + i, "External id": i}},
               {"ph": "X", "cat": "kernel", "name": f"{h} kernel", "pid": 0, "tid": 7, "ts": t + 10, "dur": 30,
                "args": {"device": 0, "stream": 7, "correlation": 100 + i, "External id": i}}]
    doc = {"deviceProperties": [{"id": 0, "name": HOSTILE[4]}], "traceEvents": ev,
           "distributedInfo": {"backend": HOSTILE[0], "rank": 0}}
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_report_of_a_hostile_kineto_trace_stays_whole_in_chromium(tmp_path: Path):
    """The same through the Kineto reader: op, kernel, thread and stream names."""
    src = _hostile_kineto(tmp_path / "k__DATA__<!--<script> onerror=x.json")
    out = tmp_path / "r.html"
    assert main(["report", str(src), "-o", str(out)]) == 0
    dom, log = browser.dump_dom(out)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert "data-pwned" not in root and 'data-rendered="1"' in root and "data-js-errors" not in root, root
    assert "Uncaught" not in log
    body = dom.split('id="data"', 1)[0] + dom.split('id="data"', 1)[1].split("</script>", 1)[1]
    for name in HOSTILE:  # shown as text, escaped once, as an op, a kernel and a section
        esc = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert f"{esc} op" in body and f"{esc} kernel" in body, name
    assert "k__DATA__&lt;!--&lt;script&gt; onerror=x.json" in body
    assert not re.search(r"<img\b|<[a-zA-Z][^<>]*\son\w+=", body)  # no element from a name, no handler


# ----------------------------------------------------------------------------- limits
def test_a_decompression_bomb_stops_at_the_ratio_limit(tmp_path: Path):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        f.write(b" " * (300 << 20))  # 300 MiB of blanks: ~300 KiB compressed
        f.write(b"]}")
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(TraceFormatError, match="inflates more than 200x.*decompression bomb"):
        polyprof.load(bomb)
    with safety.override(max_inflate_ratio=1e6, max_inflated_bytes=100 << 20):
        with pytest.raises(TraceFormatError, match="inflates to more than 104,857,600 bytes"):
            polyprof.load(bomb)


def test_xspace_gzip_and_zip_members_are_bounded_too(tmp_path: Path):
    xs = (SEEDS / "polyprof_written.xplane.pb").read_bytes()
    p = tmp_path / "x.xplane.pb.gz"
    p.write_bytes(gzip.compress(xs))
    with safety.override(max_inflated_bytes=1000):
        with pytest.raises(TraceFormatError, match="inflates to more than 1,000 bytes"):
            polyprof.load(p)
        with pytest.raises(TraceFormatError, match="zip's content inflates to more than"):
            polyprof.load(SEEDS / "host_session.polyprof")
    assert polyprof.load(p).n_events > 0  # the limits are back


@pytest.mark.parametrize("seed", ["cpu_only_rank34.json", "tpu_trimmed.xplane.pb", "kineto_converted.polyprof",
                                  "killed.polyprof.partial"])
def test_event_limit(seed: str, monkeypatch):
    monkeypatch.setenv("POLYPROF_MAX_EVENTS", "5")
    with pytest.raises(TraceFormatError, match="more than 5 events"):
        polyprof.load(SEEDS / seed)


def test_bad_limit_settings_are_named(monkeypatch):
    monkeypatch.setenv("POLYPROF_MAX_EVENTS", "lots")
    with pytest.raises(PolyprofError, match="POLYPROF_MAX_EVENTS='lots'"):
        polyprof.load(SEEDS / "triton_example.json")
    with pytest.raises(PolyprofError, match="unknown limits"):
        with safety.override(max_eventz=1):
            pass


# ----------------------------------------------------------------------------- CLI
def test_report_and_export_make_missing_directories(tmp_path: Path):
    seed = str(SEEDS / "triton_example.json")
    assert main(["report", seed, "-o", str(tmp_path / "a" / "b" / "r.html")]) == 0
    assert main(["export", seed, "-f", "kineto", "-o", str(tmp_path / "c" / "k.json")]) == 0
    assert (tmp_path / "a" / "b" / "r.html").stat().st_size > 0 and (tmp_path / "c" / "k.json").stat().st_size > 0


def test_unwritable_output_is_one_line(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc, _, err = _cli("export", str(SEEDS / "triton_example.json"), "-o", str(blocker / "x" / "out.json"))
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("polyprof: error: cannot create the directory")


def test_the_tpu_sample_exports_to_kineto(traces_dir: Path, tmp_path: Path):
    out = tmp_path / "tpu.json"
    assert main(["export", str(traces_dir / "xspace" / "tpu_inference_2.xplane.pb"), "-f", "kineto", "-o",
                 str(out)]) == 0
    assert polyprof.load(out).n_events > 1000


def test_schema_errors_name_the_file(tmp_path: Path, monkeypatch):
    from polyprof.errors import TraceSchemaError
    from polyprof.formats import kineto

    def boom(*a, **k):
        raise TraceSchemaError("event track id out of range")

    monkeypatch.setattr(kineto._Collector, "finish", boom)
    p = SEEDS / "triton_example.json"
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(p)
    assert str(ei.value) == f"{p}: event track id out of range"


# ----------------------------------------------------------------------------- pickle
def test_pyarrow_minimum_is_past_the_ipc_pickle_cve():
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'"pyarrow>=([0-9.]+)"', text)
    assert m and tuple(map(int, m.group(1).split("."))) >= (14, 0, 1)


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {_Evil.marker}",))


def test_loading_never_unpickles(tmp_path: Path):
    """A .polyprof whose events table carries a pickled extension type (the pyarrow
    CVE-2023-47248 vector) is refused without running the pickle."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    _Evil.marker = tmp_path / "pwned"
    zin = zipfile.ZipFile(SEEDS / "host_session.polyprof")
    events = ipc.open_file(pa.BufferReader(zin.read("events.arrow"))).read_all()
    field = events.schema.field("name").with_metadata({b"ARROW:extension:name": b"arrow.py_extension_type",
                                                         b"ARROW:extension:metadata": pickle.dumps(_Evil())})
    evil = events.cast(events.schema.set(events.schema.get_field_index("name"), field))
    sink = io.BytesIO()
    with ipc.new_file(sink, evil.schema) as w:
        w.write_table(evil)
    path = tmp_path / "evil.polyprof"
    with zipfile.ZipFile(path, "w") as z:
        for n in zin.namelist():
            z.writestr(n, sink.getvalue() if n == "events.arrow" else zin.read(n))
    try:
        polyprof.load(path)
    except TraceFormatError:
        pass
    assert not _Evil.marker.exists()


def test_a_4mb_gzip_bomb_of_events_is_refused_at_the_first_64mib(tmp_path: Path):
    # the ratio is measured against the compressed bytes read so far, so the parser never
    # sees more than the ratio's floor of a bomb, whatever the file's size (issue 34)
    ev = b'{"ph":"X","name":"k","cat":"kernel","ts":1,"dur":1,"pid":1,"tid":1,"args":{}},'
    member = gzip.compress(ev * ((8 << 20) // len(ev)), 6)
    bomb = tmp_path / "bomb.json.gz"
    with open(bomb, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents":[' + ev))
        for _ in range((4 << 20) // len(member)):
            f.write(member)
        f.write(gzip.compress(ev[:-1] + b"]}"))
    assert bomb.stat().st_size > 3 << 20
    with pytest.raises(TraceFormatError, match="decompression bomb") as e:
        polyprof.load(bomb)
    so_far = int(re.search(r"([\d,]+) so far", str(e.value)).group(1).replace(",", ""))
    assert so_far < (64 << 20) + (16 << 20), str(e.value)


SMALL = Path(__file__).parent / "data" / "traces" / "kineto" / "a100_alexnet_small.json.gz"


def test_sql_statement_time_limit():
    code, out, err = _cli("sql", str(SMALL), "SELECT a.name, b.name FROM events a, events b, events c",
                          "--timeout", "1")
    assert code == 1 and err.strip() == "polyprof: error: SQL statement stopped after 1 s (--timeout / timeout_s)"


def test_sql_memory_limit_is_one_line():
    code, out, err = _cli("sql", str(SMALL), "SELECT a.name, list(repeat(b.name, 1000)) FROM events a, events b "
                          "GROUP BY a.name", "--memory-limit", "40MB", "--timeout", "120")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "more than the memory limit" in err and "--memory-limit" in err


def test_sql_result_is_streamed_not_held():
    # 870 x 870 rows: counted, only --max-rows of them kept and printed
    code, out, err = _cli("sql", str(SMALL), "SELECT a.name FROM events a, events b", "--max-rows", "3")
    assert code == 0 and "756900 row(s)" in out and "756897 more row(s)" in err
    code, out, err = _cli("sql", str(SMALL), "SELECT count(*) AS n FROM events", "--csv")
    assert out.split() == ['"n"', "870"]


def test_sql_without_a_statement_says_so():
    code, out, err = _cli("sql", str(SMALL), "  ")
    assert code == 1 and not out and err.strip() == ("polyprof: error: no SQL statement given (the tables: "
                                                     "polyprof sql --help)")


def test_sql_default_memory_limit_is_a_quarter_of_ram():
    import psutil

    from polyprof.cli.sql import default_memory_limit

    assert default_memory_limit() == f"{psutil.virtual_memory().total // 4 >> 20}MB"


def test_a_reader_stopped_at_max_events_does_not_give_its_count_as_the_files():
    """A chunked reader stops at the first chunk past the limit: its count then is not
    the trace's (a 26,935-event file refused as "(2,148; ...)", read as its size)."""
    path = ROOT / "tests" / "data" / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
    with safety.override(max_events=1000), pytest.raises(
            TraceFormatError, match=r"more than 1,000 events \(stopped after reading [\d,]+; limit"):
        polyprof.load(path)
