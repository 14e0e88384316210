"""A session's output name picks its format, as ``polyprof export -o`` does
(collect/output.py ``writer_for``; formats/registry.for_output).

Before, ``polyprof.profile(output="o1.json.gz")`` and ``polyprof run -o r1.json.gz``
wrote polyprof's own zip archive under any name, without a word: gzip, ``json`` and
``pd.read_parquet`` failed on the files (an auditor). Now the ending picks the format,
written as before (temporary file + rename, the lock, a second save of one session);
a file at the output is replaced when it is of that format as polyprof writes it, never
a user's other JSON or Parquet data; the fallback of an output that cannot be written
(or a format's writer that fails) is polyprof's own archive, said so; an ending polyprof
cannot write keeps the archive, with a warning that says what was written.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

import polyprof
from polyprof.collect import output
from polyprof.formats.detect import detect

KINETO = Path(__file__).parent / "data" / "traces" / "kineto" / "cpu_only_rank34.json.gz"
PROGRAM = "import time, polyprof\nwith polyprof.section('work'):\n    time.sleep(0.01)\nopen('ran', 'w').close()\n"


def _run(tmp_path: Path, out: str, program: str = PROGRAM) -> subprocess.CompletedProcess:
    (tmp_path / "w.py").write_text(program)
    cmd = [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--no-summary", "-o", out, "w.py"]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def _profile(out: Path) -> polyprof.Session:
    with polyprof.profile(plugins=["host"], output=out) as s:
        with polyprof.section("work"):
            pass
    return s


def _has_work(path: Path) -> bool:
    return "work" in polyprof.load(path).strings


@pytest.fixture
def own_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory, where fallbacks go, under the test's own folder."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    return tmpdir


def test_profile_output_ending_picks_the_format(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The auditor's repro (o1.json.gz, o2.pftrace, o3.parquet were all zip archives), and
    the other writable endings."""
    import pandas as pd

    for name in ("o1.json.gz", "o2.pftrace", "o3.parquet", "o4.pt.trace.json", "o5.xplane.pb", "o6.json"):
        s = _profile(tmp_path / name)
        assert s.written is not None and s.written.path == tmp_path / name and not s.written.fell_back
        assert not zipfile.is_zipfile(tmp_path / name), name
        assert _has_work(tmp_path / name), name
    doc = json.load(gzip.open(tmp_path / "o1.json.gz"))
    assert any(e.get("name") == "work" for e in doc["traceEvents"])
    assert "traceEvents" in json.loads((tmp_path / "o6.json").read_bytes())
    assert "schemaVersion" in json.loads((tmp_path / "o4.pt.trace.json").read_bytes())  # Kineto's, not Chrome's
    assert "work" in set(pd.read_parquet(tmp_path / "o3.parquet")["name"])
    assert detect(tmp_path / "o2.pftrace") == "perfetto" and detect(tmp_path / "o5.xplane.pb") == "xspace"
    assert "polyprof has no writer" not in caplog.text


def test_run_o_json_gz_writes_gzipped_json_and_replaces_it_again(tmp_path: Path) -> None:
    for _ in range(2):  # the second run replaces the first's trace: one of that format polyprof wrote
        p = _run(tmp_path, "r1.json.gz")
        assert p.returncode == 0, p.stderr
        assert "trace written to r1.json.gz" in p.stderr and "not replaced" not in p.stderr, p.stderr
    doc = json.load(gzip.open(tmp_path / "r1.json.gz"))
    assert any(e.get("name") == "work" for e in doc["traceEvents"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r1.json.gz", "ran", "w.py"]  # no lock, no beside file


@pytest.mark.parametrize("name", ["t.json.gz", "t.pt.trace.json.gz"])
def test_a_trace_of_the_format_at_the_output_is_replaced(tmp_path: Path, name: str) -> None:
    """A Chrome/Kineto trace (here torch's own), or polyprof's archive (what the runs
    before this fix wrote under that name), is replaced by a run again."""
    for before in (KINETO.read_bytes(), None):
        if before is None:
            polyprof.load(KINETO).save(tmp_path / name)  # (Trace.save: the archive whatever the name)
            assert zipfile.is_zipfile(tmp_path / name)
        else:
            (tmp_path / name).write_bytes(before)
        p = _run(tmp_path, name)
        assert p.returncode == 0 and "not replaced" not in p.stderr, p.stderr
        assert json.load(gzip.open(tmp_path / name))["traceEvents"] and _has_work(tmp_path / name)


def _users_parquet(path: Path) -> None:
    import pandas as pd

    pd.DataFrame({"name": ["a", "b"], "value": [1.0, 2.0]}).to_parquet(path)


@pytest.mark.parametrize("name,make,what", [
    ("cfg.json.gz", lambda p: p.write_bytes(gzip.compress(b'{"lr": 0.1, "layers": [1, 2]}')), "chrome"),
    ("data.parquet", _users_parquet, "parquet"),
    ("x.pftrace", lambda p: p.write_bytes(b"not a protobuf at all\n" * 4), "perfetto"),
])
def test_a_users_file_of_another_kind_is_never_replaced(tmp_path: Path, name: str, make, what: str) -> None:
    """A user's JSON config, Parquet data set or other bytes at an output named for a
    format polyprof writes: ``run`` refuses it before the program runs, a session in a
    program writes beside it (the same ending: the same format)."""
    make(tmp_path / name)
    before = (tmp_path / name).read_bytes()
    p = _run(tmp_path, name)
    assert p.returncode != 0 and not (tmp_path / "ran").exists(), p.stderr
    assert (f"{name} is there and is not a {what} trace (the format its name asks for) or a polyprof trace: "
            "refusing to replace it") in p.stderr, p.stderr
    s = _profile(tmp_path / name)
    assert (tmp_path / name).read_bytes() == before
    stem, _, end = name.partition(".")
    assert s.written is not None and s.written.path == tmp_path / f"{stem}.1.{end}" and s.written.fell_back
    assert _has_work(s.written.path) and not zipfile.is_zipfile(s.written.path)


def test_a_session_in_a_program_says_why_it_did_not_replace(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "cfg.json").write_text('{"lr": 0.1}\n')
    s = _profile(tmp_path / "cfg.json")
    assert s.written is not None and s.written.path == tmp_path / "cfg.1.json"
    assert "cfg.json is not a chrome trace (the format its name asks for) or a polyprof trace: not replaced" \
        in caplog.text
    assert "traceEvents" in json.loads((tmp_path / "cfg.1.json").read_bytes())


def test_names_made_from_the_output_keep_its_ending() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4"}
    assert output.per_rank(Path("t.json.gz"), env) == Path("t.rank3.json.gz")
    assert output.per_rank(Path("t.pt.trace.json"), env) == Path("t.rank3.pt.trace.json")
    assert output.per_rank(Path("t.polyprof"), env) == Path("t.rank3.polyprof")
    assert output.per_rank(Path("notes.txt"), env) == Path("notes.rank3.txt")
    # a name already this rank's, as a launcher script writes it (-o t.rank$RANK.polyprof): as it is
    for named in ("t.rank3.polyprof", "rank3.json.gz", "d/t_rank3.pt.trace.json", "t-rank3"):
        assert output.per_rank(Path(named), env) == Path(named)
    assert output.per_rank(Path("t.rank13.polyprof"), env) == Path("t.rank13.rank3.polyprof")  # another rank's
    assert output.beside(Path("t.json.gz"), 1) == Path("t.1.json.gz")
    assert output.beside(Path("d/t.pt.trace.json.gz"), 2) == Path("d/t.2.pt.trace.json.gz")
    assert output.beside(Path("t.xplane.pb"), 1) == Path("t.1.xplane.pb")
    assert output.beside(Path("t.polyprof"), 1) == Path("t.1.polyprof") and output.beside(Path("t"), 1) == Path("t.1")
    assert output.fallback_name(Path("d/r.json.gz")) == Path("d/r.polyprof")
    f = output.fallback_path(Path("d/r.json.gz"))
    try:
        assert f.name.startswith(f"r-{os.getpid()}-") and f.name.endswith(".json.gz")
    finally:
        f.unlink()


def test_a_second_save_of_one_session_replaces_its_own_file_in_the_format(tmp_path: Path) -> None:
    """``again`` (an exec that failed after the save: collect/exits.py), and a file
    another writer put at the output meanwhile: beside it, under the same ending."""
    trace = polyprof.load(KINETO)
    out = tmp_path / "t.json.gz"
    w = output.save(trace, out, found=None)
    assert w.path == out and not w.fell_back
    w2 = output.save(trace, out, found=None, again=w)
    assert w2.path == out and json.load(gzip.open(out))["traceEvents"]
    os.utime(out, ns=(1, 1))  # another writer's since
    w3 = output.save(trace, out, found=None, again=w2)
    assert w3.path == tmp_path / "t.1.json.gz" and json.load(gzip.open(w3.path))["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.1.json.gz", "t.json.gz"]


def test_an_output_that_cannot_be_written_falls_back_to_the_archive(tmp_path: Path, own_tmpdir: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "afile").write_text("a file, not a folder")
    out = tmp_path / "afile" / "r.json.gz"
    w = output.save(polyprof.load(KINETO), out)
    assert w.path is not None and w.path.parent == own_tmpdir and w.fell_back
    assert w.path.name.startswith("r-") and w.path.suffix == ".polyprof" and zipfile.is_zipfile(w.path)
    assert polyprof.load(w.path).n_events == polyprof.load(KINETO).n_events
    assert f"the trace was written to {w.path} instead (polyprof's own archive: `polyprof export {w.path} -o " \
           "r.json.gz` writes the format asked for)" in caplog.text
    w = output.save(polyprof.load(KINETO), tmp_path / "afile" / "notes.txt")  # (an ending polyprof cannot write)
    assert w.path is not None and w.path.parent == own_tmpdir and w.path.name.startswith("notes-")
    assert w.path.suffix == ".polyprof" and zipfile.is_zipfile(w.path)


def test_a_format_writer_that_fails_keeps_the_trace_as_the_archive(tmp_path: Path, own_tmpdir: Path,
                                                                  caplog: pytest.LogCaptureFixture,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A format's writer that cannot write the trace (stood in for by Parquet's raising, as
    it did on a metadata value beyond 64 bits, which polyprof's archive keeps): the
    previous file at the output stays, the trace goes to the fallback."""
    from polyprof.errors import PolyprofError  # (the writers' error family)
    from polyprof.formats import parquet

    def refuses(trace: object, path: object) -> None:
        raise PolyprofError(f"{path}: the trace holds values JSON cannot hold (Integer exceeds 64-bit range)")

    monkeypatch.setattr(parquet, "write", refuses)
    trace = polyprof.load(KINETO)
    trace.metadata["seed"] = 2**70
    out = tmp_path / "t.parquet"
    w = output.save(trace, out)
    assert not out.exists() and w.path is not None and w.path.parent == own_tmpdir and w.path.suffix == ".polyprof"
    assert polyprof.load(w.path).metadata["seed"] in (2**70, str(2**70))
    assert "JSON cannot hold" in caplog.text and "writes the format asked for" in caplog.text


def test_an_ending_polyprof_cannot_write_gets_the_archive_and_a_warning(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="polyprof")
    s = _profile(tmp_path / "notes.csv")
    assert s.written is not None and s.written.path == tmp_path / "notes.csv" and zipfile.is_zipfile(s.written.path)
    assert "notes.csv: polyprof has no writer for names ending .csv: this is its own trace archive" in caplog.text
    assert "polyprof export" in caplog.text and ".json.gz" in caplog.text
    caplog.clear()
    for name in ("t.polyprof", "t.zip", "t", "t.rank3"):
        _profile(tmp_path / name)
        assert zipfile.is_zipfile(tmp_path / name)
    assert "polyprof has no writer" not in caplog.text
    p = _run(tmp_path, "r.txt")
    assert p.returncode == 0 and "r.txt: polyprof has no writer for names ending .txt" in p.stderr, p.stderr
    assert _has_work(tmp_path / "r.txt")


def test_the_crash_journal_of_an_output_in_another_format_stays_polyprofs(tmp_path: Path) -> None:
    """A killed run's ``OUTPUT.partial`` is polyprof's journal, whatever the output's
    format: ``polyprof.load`` reads it."""
    program = ("import os, signal, time, polyprof\nwith polyprof.section('work'):\n    time.sleep(0.7)\n"
               "time.sleep(0.7)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    p = _run(tmp_path, "k.json.gz", program)
    assert p.returncode == -signal.SIGKILL
    assert not (tmp_path / "k.json.gz").exists()
    assert detect(tmp_path / "k.json.gz.partial") == "polyprof-journal"
    assert _has_work(tmp_path / "k.json.gz.partial")
