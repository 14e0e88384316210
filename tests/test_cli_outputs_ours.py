"""Where `export`, `report` and `diff -o` write (cli/common.py): a file there that
polyprof did not write is refused as `run` refuses it (collect/output.not_ours; a page:
a polyprof report or diff page), their own earlier output is replaced, `--force` writes
anyway; `-o DIR/` is a directory to write into; report's default name keeps the files
of one torch process apart. Also the CLI's exit statuses on a closed pipe and on a bad
`--dask`, and the lines said for a file of no known format."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from polyprof.cli.common import names_directory, trace_stem

DATA = Path(__file__).resolve().parent / "data" / "h200"
SMALL = DATA / "torch_bf16_mm_h200.json.gz"  # a real torch trace of 321 events


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.fixture
def here(tmp_path: Path) -> Path:
    shutil.copy(SMALL, tmp_path / "t.json.gz")
    return tmp_path


def _theirs(d: Path) -> dict[str, bytes]:
    """A user's files where an output could be asked: a JSON config, a Parquet data set, notes, a page."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (d / "config.json").write_text('{"lr": 0.1, "epochs": 5}\n')
    pq.write_table(pa.table({"x": [1, 2, 3]}), d / "data.parquet")
    (d / "notes.txt").write_text("my notes\n")
    (d / "page.html").write_text("<html>my page</html>\n")
    return {p.name: p.read_bytes() for p in d.iterdir() if p.name != "t.json.gz"}


def test_a_file_polyprof_did_not_write_is_refused_before_anything_is_read(here):
    before = _theirs(here)
    for args, what in ((("export", "t.json.gz", "-o", "config.json"), "not a chrome trace (the format written)"),
                       (("export", "t.json.gz", "-o", "data.parquet"), "not a parquet trace"),
                       (("export", "t.json.gz", "-f", "chrome", "-o", "notes.txt"), "not a chrome trace"),
                       (("export", "t.json.gz", "-f", "polyprof", "-o", "notes.txt"), "not a polyprof trace"),
                       (("report", "t.json.gz", "-o", "page.html"), "not a polyprof report or diff page"),
                       (("diff", "t.json.gz", "t.json.gz", "-o", "notes.txt"), "not a polyprof report or diff page")):
        r = cli(*args, cwd=here)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, (args, r.stderr)
        assert f"is there and is {what}" in r.stderr and "refusing to replace it" in r.stderr, (args, r.stderr)
        assert "--force" in r.stderr
    assert {n: (here / n).read_bytes() for n in before} == before  # every one of them as it was
    assert sorted(p.name for p in here.iterdir()) == sorted([*before, "t.json.gz"])  # and nothing beside them
    r = cli("export", "t.json.gz", "-o", "config.json", "--force", cwd=here)
    assert r.returncode == 0, r.stderr
    assert (here / "config.json").read_bytes().startswith(b'{"displayTimeUnit"')
    r = cli("report", "t.json.gz", "-o", "page.html", "--force", cwd=here)
    assert r.returncode == 0 and b"<title>polyprof report" in (here / "page.html").read_bytes()[:4096], r.stderr


def test_the_same_command_again_replaces_its_own_output(here):
    """Its earlier output, of that format (by content: a chrome export at a name of no
    ending, a report where a diff was), or an empty file: replaced, as before."""
    (here / "empty.json").touch()
    runs = [("export", "t.json.gz", "-o", "out.json"), ("export", "t.json.gz", "-o", "out.parquet"),
            ("export", "t.json.gz", "-f", "chrome", "-o", "plain"), ("export", "t.json.gz", "-o", "empty.json"),
            ("export", "t.json.gz", "-o", "k.pt.trace.json"), ("diff", "t.json.gz", "t.json.gz", "-o", "d.html"),
            ("report", "t.json.gz", "-o", "d.html")]
    for args in runs + runs[:-1]:
        r = cli(*args, cwd=here)
        assert r.returncode == 0, (args, r.stderr)
    # a chrome export where a polyprof archive was, and the other way round: both polyprof's
    assert cli("export", "t.json.gz", "-o", "t.polyprof", cwd=here).returncode == 0
    assert cli("export", "t.json.gz", "-f", "polyprof", "-o", "out.json", cwd=here).returncode == 0
    r = cli("export", "t.json.gz", "-o", "out.json", cwd=here)
    assert r.returncode == 0, r.stderr


def test_a_trailing_separator_names_a_directory_to_write_into(here):
    r = cli("export", "t.json.gz", "-o", "new/", cwd=here)
    assert r.returncode == 0 and "no format" not in r.stderr, r.stderr
    assert (here / "new" / "t.json").read_bytes().startswith(b'{"displayTimeUnit"')
    assert cli("export", "t.json.gz", "-f", "parquet", "-o", "new/", cwd=here).returncode == 0
    assert (here / "new" / "t.parquet").is_file()
    r = cli("report", "t.json.gz", "-o", "pages/", cwd=here)
    assert r.returncode == 0 and (here / "pages" / "t.html").is_file(), r.stderr
    r = cli("diff", "t.json.gz", "t.json.gz", "-o", "diffs/", cwd=here)
    assert r.returncode == 1 and "-o names the HTML file to write (-o diffs/diff.html)" in r.stderr, r.stderr
    assert not (here / "diffs").exists()


def test_report_names_each_file_of_one_process_apart(here):
    """torch's tensorboard_trace_handler writes ``{host}_{pid}.{ms}.pt.trace.json`` once per
    schedule cycle: each keeps its page (before: every one was ``host_123.html``)."""
    names = ["host_123.1700000000001.pt.trace.json.gz", "host_123.1700000005000.pt.trace.json.gz",
             ".hidden.json.gz", "node1.cluster_99.json.gz"]
    for n in names:
        shutil.copy(SMALL, here / n)
        r = cli("report", n, cwd=here)
        assert r.returncode == 0, r.stderr
    assert {"host_123.1700000000001.html", "host_123.1700000005000.html", ".hidden.html",
            "node1.cluster_99.html"} <= {p.name for p in here.iterdir()}


def test_trace_stem_removes_only_a_trace_ending():
    assert trace_stem("logs/host_1.1700.pt.trace.json.gz") == "host_1.1700"
    assert trace_stem("a/run.json") == "run" and trace_stem("r.xplane.pb") == "r" and trace_stem("r.pftrace") == "r"
    assert trace_stem("report.nsys.sqlite.gz") == "report.nsys" and trace_stem("t.polyprof.partial") == "t"
    assert trace_stem("job.v2") == "job.v2" and trace_stem(".json") == ".json" and trace_stem("R.JSON.GZ") == "R"
    assert names_directory("out/") and not names_directory("out") and not names_directory("out.html")


def test_a_stores_outputs_are_named_without_store(tmp_path):
    """``export job.store -o out/`` writes ``out/job.json`` (before: ``job.store.json``);
    a directory that is no store keeps its whole name."""
    (tmp_path / "job.store" / "rank=0").mkdir(parents=True)
    (tmp_path / "logs.store").mkdir()
    assert trace_stem(tmp_path / "job.store") == "job" and trace_stem(tmp_path / "logs.store") == "logs.store"


def _closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """The command with its stdout a pipe nobody reads any more (``| head -1`` once head
    has gone): every write is EPIPE."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "polyprof", *args], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(w)


@pytest.mark.parametrize("args", [("plugins",), ("diff", str(SMALL), str(SMALL)), ("summary", str(SMALL))])
def test_a_closed_pipe_ends_every_command_with_status_0(args):
    r = _closed_pipe(*args)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_a_bad_dask_spec_is_a_usage_error_with_one_input_too(tmp_path):
    r = cli("summary", "--dask", "bogus", str(SMALL), cwd=tmp_path)
    assert r.returncode == 2 and "executor 'bogus': expected" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_an_unrecognised_file_points_to_where_each_format_is_described(tmp_path):
    from polyprof.formats.registry import FORMATS

    (tmp_path / "x.bin").write_bytes(b"\x01\x02 garbage" * 100)
    r = cli("summary", "x.bin", cwd=tmp_path)
    assert r.returncode == 1 and "`polyprof summary --help` says what each is" in r.stderr, r.stderr
    shown = " ".join(cli("summary", "--help", cwd=tmp_path).stdout.split())  # (its lines wrapped)
    said = r.stderr.split("reads (")[1].split(";")[0].split(", ")
    assert said and all(f"{name}:" in shown for name in said), (said, shown)
    assert all(f"{f.name}: " in shown for f in FORMATS if f.reader)


def test_a_list_of_numbers_is_an_int_at_its_index(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2, 3]")
    r = cli("summary", "list.json", cwd=tmp_path)
    assert r.returncode == 1 and "item 0 of its JSON array is an int, not an event object" in r.stderr, r.stderr


def test_a_failed_tensorboard_export_leaves_no_empty_folders(tmp_path, monkeypatch):
    import polyprof
    from polyprof.errors import OutputError
    from polyprof.writers import xspace

    trace = polyprof.load(SMALL)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "mine.txt").write_text("kept")

    def full(path, write, force=False):
        raise OutputError(f"cannot write {path}: No space left on device (any previous file there is unchanged)")

    monkeypatch.setattr(xspace, "write_file", full)
    for logdir in (tmp_path / "logs", tmp_path / "new"):
        with pytest.raises(OutputError):
            xspace.write_logdir(trace, logdir, run="r1", host="h")
    assert [p.name for p in (tmp_path / "logs").iterdir()] == ["mine.txt"] and not (tmp_path / "new").exists()
    monkeypatch.undo()
    out = xspace.write_logdir(trace, tmp_path / "new", run="r1", host="h")
    assert out == tmp_path / "new" / "plugins" / "profile" / "r1" / "h.xplane.pb" and out.is_file()
