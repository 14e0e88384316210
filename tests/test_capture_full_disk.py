"""A capture whose output cannot be written (a full disk) is written into the temporary
directory instead, as ``polyprof run`` falls back, and said: it cannot be taken again.
Before, ``polyprof capture -o FULL/c.polyprof`` said "No space left on device" and the
capture was gone (an auditor, on a 300 KiB tmpfs). The full disk is stood in for by a
write that fails with ENOSPC (a tmpfs cannot be mounted in a test)."""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

import pytest

import polyprof
from polyprof.capture import output
from polyprof.capture.client import Captured
from polyprof.errors import OutputError

XSPACE = Path(__file__).parent / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"


@pytest.fixture
def full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory whose writes fail as on a full disk; the temporary directory is fine."""
    disk = tmp_path / "full"
    disk.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    write = output.write_file

    def failing(path: Path, fill: object) -> Path:
        if Path(path).parent == disk:
            raise OutputError(f"cannot write {path}: {errno.errorcode[errno.ENOSPC]} No space left on device")
        return write(path, fill)  # type: ignore[arg-type]

    monkeypatch.setattr(output, "write_file", failing)
    return disk


@pytest.mark.parametrize("fmt", ["polyprof", "xplane"])
def test_a_capture_that_cannot_be_written_goes_to_the_temporary_directory(full: Path, fmt: str, caplog) -> None:
    c = Captured("127.0.0.1:9012", data=XSPACE.read_bytes())
    target = full / f"c{output.FORMATS[fmt]}"
    with caplog.at_level("ERROR", logger="polyprof"):
        written = output.write_one(c, target, fmt)
    assert len(written) == 1 and c.error is None, c.error
    _, path, events = written[0]
    assert path.parent == Path(tempfile.gettempdir()) and path.name.startswith("c")
    assert polyprof.load(path).n_events == events > 0
    assert "No space left on device; the capture was written to" in caplog.text and str(path) in caplog.text
    assert not list(full.iterdir())


def test_neither_written_says_both_and_leaves_nothing(full: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(full))  # (the fallback on the full disk too)
    c = Captured("127.0.0.1:9012", data=XSPACE.read_bytes())
    assert output.write_one(c, full / "c.polyprof", "polyprof") == []
    assert c.error is not None and "the fallback failed too" in c.error
    assert not list(full.iterdir())


def test_durations_out_of_range_are_said_alike() -> None:
    """``-d 0`` said "must be positive" and ``-d -5`` "a whole number, 0 or more"; a
    duration past the request's int64 read "cancelled (Value out of range ...)", as if
    the server had cancelled (an auditor)."""
    import subprocess
    import sys

    for d, said in (("0", "expected a whole number, 1 or more"), ("-5", "expected a whole number, 1 or more"),
                    (str(10**23), "expected a whole number of milliseconds from 1 to 2**63 - 1")):
        r = subprocess.run([sys.executable, "-m", "polyprof", "capture", "127.0.0.1:1", "-d", d],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and said in r.stderr, (d, r.stderr)


@pytest.mark.parametrize("name,head", [("c.json.gz", b"\x1f\x8b"), ("c.parquet", b"PAR1")])
def test_a_capture_is_written_in_the_format_its_name_asks_for(tmp_path: Path, name: str, head: bytes) -> None:
    """``polyprof capture -o c.json.gz`` wrote polyprof's archive under that name, as
    ``run -o`` did (collect/output.saver: both now pick the format by the ending)."""
    c = Captured("127.0.0.1:9012", data=XSPACE.read_bytes())
    written = output.write_one(c, tmp_path / name, output.format_for(tmp_path / name))
    assert len(written) == 1 and c.error is None, c.error
    _, path, events = written[0]
    assert path == tmp_path / name and path.read_bytes()[:len(head)] == head
    assert polyprof.load(path).n_events == events > 0


@pytest.mark.parametrize("name,content", [("cfg.json", b'{"lr": 0.1}\n'), ("notes.txt", b"my notes\n")])
def test_a_users_file_at_the_output_is_refused_before_capturing(tmp_path: Path, name: str, content: bytes) -> None:
    """``polyprof capture -o cfg.json`` replaced the user's config with the trace, where
    ``polyprof run -o cfg.json`` refuses it (an auditor): refused now, before any server
    is asked (none listens at 127.0.0.1:1), the file unchanged."""
    import subprocess
    import sys

    out = tmp_path / name
    out.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "polyprof", "capture", "127.0.0.1:1", "-d", "100", "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "is there and is not" in r.stderr and "refusing to replace it" in r.stderr, r.stderr
    assert out.read_bytes() == content
