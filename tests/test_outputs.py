"""No output is ever destroyed (issue 34): every writer writes beside its target and
renames; on a full disk or any failure the previous file is byte-identical and the
message names the path; a symlink planted at the output is refused without --force."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import OutputError, PolyprofError
from polyprof.outfile import replacing

DATA = Path(__file__).parent / "data" / "traces" / "kineto"
TRACE = DATA / "cpu_only_rank34.json.gz"
BIG = DATA / "a100_alexnet_small.json.gz"  # its exports need more than the small tmpfs below


def _cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *argv], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


@pytest.fixture
def small_tmpfs(mount_tmpfs):
    """A real full disk: a 256 KiB tmpfs (needs root; skipped with the reason otherwise)."""
    mnt = mount_tmpfs("256k")
    st = os.statvfs(mnt)  # leave 16 KiB free: less than any export of BIG takes
    (mnt / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - (16 << 10)))
    return mnt


@pytest.mark.parametrize("fmt,name", [("chrome", "out.json"), ("perfetto", "out.pftrace"),
                                      ("polyprof", "out.polyprof"), ("kineto", "out.pt.trace.json")])
def test_export_onto_a_full_disk_leaves_the_previous_file(small_tmpfs: Path, fmt: str, name: str):
    target = small_tmpfs / name
    before = b"the previous output, which must survive\n" * 10
    target.write_bytes(before)
    # (--force: the stand-in for the previous output is no trace, which export would not replace)
    r = _cli("export", str(BIG), "-f", fmt, "-o", str(target), "--force")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(target) in lines[0] and "No space left" in lines[0], r.stderr
    assert target.read_bytes() == before
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["filler", name]  # no temporary file left behind


def test_report_onto_a_full_disk_leaves_the_previous_file(small_tmpfs: Path):
    target = small_tmpfs / "r.html"
    old = "<!DOCTYPE html><title>polyprof report — old</title><p>old report</p>"  # (a page report replaces)
    target.write_text(old)
    r = _cli("report", str(BIG), "-o", str(target))
    assert r.returncode == 1 and str(target) in r.stderr and "No space left" in r.stderr, r.stderr
    assert target.read_text() == old


def test_a_failing_writer_leaves_the_previous_file(tmp_path: Path, monkeypatch):
    # the same as a full disk, where none can be mounted: the writer fails half-way
    target = tmp_path / "t.json"
    target.write_bytes(b"old")
    trace = polyprof.load(TRACE)
    import polyprof.formats.chrome as chrome

    real = chrome.write

    def half(trace, path):
        real(trace, path)
        with open(path, "ab") as f:
            f.write(b"garbage")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(chrome, "write", half)
    with pytest.raises(OutputError, match=f"cannot write {target}: No space left on device"):
        polyprof.export(trace, target, format="chrome")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


@pytest.mark.parametrize("command", ["export", "report"])
def test_a_planted_symlink_is_refused(tmp_path: Path, command: str):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / ("out.json" if command == "export" else "out.html")
    link.symlink_to(victim)
    r = _cli(command, str(TRACE), "-o", str(link))
    assert r.returncode == 1 and "symbolic link" in r.stderr and str(link) in r.stderr, r.stderr
    assert victim.read_text() == "precious" and link.is_symlink()
    r = _cli(command, str(TRACE), "-o", str(link), "--force")
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and victim.read_text() != "precious"  # written through the link, as asked


def test_the_api_refuses_a_symlink_too(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "x.pftrace").symlink_to(victim)
    with pytest.raises(PolyprofError, match="symbolic link"):
        polyprof.export(polyprof.load(TRACE), tmp_path / "x.pftrace")
    assert victim.read_text() == "precious"


def test_gzip_is_chosen_by_the_target_name_not_the_temporary_one(tmp_path: Path):
    out = tmp_path / "t.json.gz"
    polyprof.export(polyprof.load(TRACE), out, format="chrome")
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert polyprof.load(out).n_events == polyprof.load(TRACE).n_events


def test_replacing_keeps_the_old_file_on_any_exception(tmp_path: Path):
    target = tmp_path / "f"
    target.write_text("old")
    with pytest.raises(OutputError, match=f"cannot write {target}: ValueError: boom"):
        with replacing(target) as tmp:
            tmp.write_text("half")
            raise ValueError("boom")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f"]
    with pytest.raises(OutputError, match="is a directory"):
        with replacing(tmp_path):
            pass


def test_a_writers_error_names_the_target_not_the_temporary_file(tmp_path: Path):
    """A writer's own error names the file it wrote (pyarrow: ``.polyprof-xxxx-t.parquet:
    ...``): the user is told the target's name, never the hidden temporary one."""
    target = tmp_path / "t.parquet"
    with pytest.raises(OutputError) as err:
        with replacing(target) as tmp:
            raise ValueError(f"failed to open {tmp}: bad")
    assert str(err.value) == (f"cannot write {target}: ValueError: failed to open {target}: bad "
                              "(any previous file there is unchanged)")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_fallback_leaves_no_empty_file(tmp_path, monkeypatch, caplog):
    """Where neither the output nor the fallback in the temporary directory can be
    written (a full disk), the empty file the fallback's name was taken with is removed:
    zero-byte ``NAME-PID-*.polyprof`` files were left in /tmp (an auditor)."""
    import tempfile

    from polyprof.collect import output

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))

    def full(*args: object, **kw: object) -> Path:
        raise OutputError("cannot write: No space left on device")

    monkeypatch.setattr(output, "write_atomic", full)
    with caplog.at_level("ERROR", logger="polyprof"):
        got = output.save(polyprof.load(Path(__file__).parent / "data" / "traces" / "gloo" / "gloo_rank0.json.gz"),
                          tmp_path / "t.polyprof")
    assert got.path is None and "the fallback failed too" in caplog.text
    assert list(tmpdir.iterdir()) == []
