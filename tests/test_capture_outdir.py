"""`polyprof capture A,B -o DIR`: the directory is one capture's files, the ranks of one
job. A directory that holds anything is refused before capturing, unless --overwrite
and it holds only an earlier capture's files, which the new set then replaces.

Before, an earlier capture's files stayed: capturing `A,B` then `B,A` into one directory
left 4 files (the rank is part of each name) that `polyprof summary DIR` read as a
4-rank job of 2 processes from two windows; `A,C` with C not answering left B's file
of the earlier window beside A's new one.

The servers answer every Profile with a real XSpace
(tests/data/corpus/seeds/polyprof_written.xplane.pb), as in tests/test_capture_partial.py."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")

import polyprof  # noqa: E402
from polyprof.capture import output  # noqa: E402
from polyprof.capture.client import Captured  # noqa: E402
from polyprof.cli import main  # noqa: E402
from capture_helpers import free_port  # noqa: E402
from test_capture_partial import GOOD, _Handler  # noqa: E402


@pytest.fixture
def two():
    """Two servers on loopback answering the same XSpace: their addresses."""
    started, addresses = [], []
    for _ in range(2):
        s = grpc.server(futures.ThreadPoolExecutor(2))
        s.add_generic_rpc_handlers((_Handler(GOOD),))
        port = s.add_insecure_port("127.0.0.1:0")
        s.start()
        started.append(s)
        addresses.append(f"127.0.0.1:{port}")
    yield tuple(addresses)
    for s in started:
        s.stop(grace=None)


def _capture(*args: str) -> int:
    return main(["capture", *args, "-d", "100", "--grace", "20"])


def _files(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(d.iterdir())}


def test_a_directory_that_holds_a_capture_is_refused_before_capturing(two, tmp_path: Path, capsys) -> None:
    a, b = two
    out = tmp_path / "m3"
    assert _capture(f"{a},{b}", "-o", str(out)) == 0
    before = _files(out)
    assert len(before) == 2
    capsys.readouterr()
    assert _capture(f"{b},{a}", "-o", str(out)) == 1  # before: 4 files, a "4-rank job"
    err = capsys.readouterr().err
    assert f"{out}: is not empty" in err and "--overwrite" in err and "captured" not in err
    assert _files(out) == before


def test_overwrite_replaces_the_earlier_capture_and_keeps_one_job(two, tmp_path: Path, capsys) -> None:
    a, b = two
    out = tmp_path / "m3"
    assert _capture(f"{a},{b}", "-o", str(out)) == 0
    first = set(_files(out))
    assert _capture(f"{b},{a}", "-o", str(out), "--overwrite") == 0
    second = set(_files(out))
    assert len(second) == 2 and second != first  # the ranks swapped: other names, the earlier ones gone
    assert len(polyprof.load_ranks(out)) == 2
    # one address that no server answers: the earlier set's other file is not left beside the new one
    gone = f"127.0.0.1:{free_port()}"
    capsys.readouterr()
    assert _capture(f"{a},{gone}", "-o", str(out), "--overwrite") == 1
    (only,) = _files(out)
    assert only == f"127.0.0.1-port{a.rsplit(':', 1)[1]}-rank0.polyprof"
    # nothing received at all: the earlier capture's file stays
    assert _capture(f"{gone},127.0.0.1:{free_port()}", "-o", str(out), "--overwrite") == 1
    assert list(_files(out)) == [only]


def test_overwrite_never_removes_a_file_that_is_not_a_capture(two, tmp_path: Path, capsys) -> None:
    a, b = two
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "results.polyprof").write_text("not a trace\n")
    assert _capture(f"{a},{b}", "-o", str(out), "--overwrite") == 1
    err = capsys.readouterr().err
    assert "holds files that are not a capture's (notes.txt, results.polyprof)" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "results.polyprof"]


def test_a_logdir_session_folder_is_one_capture_too(two, tmp_path: Path, capsys) -> None:
    a, b = two
    logs = tmp_path / "logs"
    assert _capture(f"{a},{b}", "--logdir", str(logs), "--session-id", "r") == 0
    assert _capture(f"{b},{a}", "--logdir", str(logs), "--session-id", "r") == 1
    assert "is not empty" in capsys.readouterr().err
    assert _capture(f"{b},{a}", "--logdir", str(logs), "--session-id", "r", "--overwrite") == 0
    assert len(list((logs / "plugins" / "profile" / "r").iterdir())) == 2


def test_a_directory_filled_during_the_capture_gets_the_set_beside_it(tmp_path: Path) -> None:
    """Checked before the capture; something written there meanwhile: the set goes to
    the first free <dir>.N (a capture cannot be taken again)."""
    out = tmp_path / "set"
    out.mkdir()
    (out / "late.txt").write_text("x")
    written = output.write_set([Captured("127.0.0.1:1", data=GOOD), Captured("127.0.0.1:2", data=GOOD)], out,
                               "polyprof")
    assert {p.parent for _, p, _ in written} == {tmp_path / "set.1"} and len(written) == 2
    assert sorted(p.name for p in out.iterdir()) == ["late.txt"]
