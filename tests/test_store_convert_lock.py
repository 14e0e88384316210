"""Converts to one store, and a convert onto a full disk (store/writer.py, docs/store.md).

Before: a second ``convert`` to the same ``-o`` removed the first's half-built
``.NAME.polyprof-new`` as a killed convert's leftover and went on; the first then died
with an internal FileNotFoundError. Now a convert holds an ``flock`` on
``.NAME.polyprof-lock`` beside ``-o`` from before it looks at ``-o`` until its store is in
place (or removed): a second one is refused, naming the store; a killed one's lock goes
with its process, so its leftover is still cleared by the next.

Before: ``convert`` onto a full disk said "rank 0 (a100_nccl_rank0.json.gz): OSError:
[Errno 28] Error writing bytes to file", naming the input; now the store and "the disk
is full"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_store_safety import GLOO, cli, files_of, leftovers, one_error

import polyprof
from polyprof.errors import OutputError, PolyprofError
from polyprof.store import Store, writer

ROOT = Path(__file__).resolve().parents[1]
NCCL = ROOT / "tests/data/traces/kineto/a100_nccl_rank0.json.gz"

#: a process that prepares a store at argv[1] as convert does (taking its lock, making its
#: work folder and a rank's part in it), says so, and waits to be killed or told to end
HOLDER = """
import sys
from pathlib import Path
from polyprof.store import writer
root = Path(sys.argv[1])
writer.prepare(root, overwrite=True)
writer.part(root, 0).mkdir()
(writer.part(root, 0) / "events.parquet").write_bytes(b"half written")
print("ready", flush=True)
sys.stdin.readline()
writer.discard_parts(root)
"""


def _holder(root: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def test_a_second_convert_to_the_same_store_is_refused(tmp_path):
    """While one convert writes -o, another is refused in one line naming the store, and
    the first's work folder is left alone; once the first ends, the next one runs."""
    root = tmp_path / "st"
    first = _holder(root)
    try:
        line = one_error(cli("convert", GLOO[0], "-o", root))
        assert f"{root}: another polyprof convert (pid {first.pid}) is writing this store" in line, line
        assert (writer.part(root, 0) / "events.parquet").read_bytes() == b"half written"
        assert not root.exists()
        with pytest.raises(OutputError, match="another polyprof convert"):  # the API too, overwrite or not
            polyprof.load_ranks(GLOO[:1]).convert(root, overwrite=True)
    finally:
        first.communicate("\n", timeout=60)
    assert first.returncode == 0
    polyprof.load_ranks(GLOO).convert(root)
    assert Store(root).ranks == [0, 1] and leftovers(root) == []


def test_a_killed_converts_leftover_is_cleared(tmp_path):
    """SIGKILL: the lock goes with the process; its work folder and lock file are left,
    and the next convert clears them and writes the store."""
    root = tmp_path / "st"
    first = _holder(root)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    assert leftovers(root) == [".st.polyprof-lock", ".st.polyprof-new"]
    r = cli("convert", *GLOO, "-o", root)
    assert r.returncode == 0, r.stderr
    assert Store(root).ranks == [0, 1] and leftovers(root) == []


def test_a_store_being_converted_is_named_so_not_missing(tmp_path):
    """A command given the store while its first convert writes it (or after that convert
    was killed) says so, naming the work folder (before: "no such file")."""
    root = tmp_path / "st"
    first = _holder(root)
    try:
        for args in (("sql", root, "SELECT 1"), ("summary", root), ("summary", root, GLOO[0])):
            line = one_error(cli(*args))
            assert line.startswith(f"polyprof: error: {root}: no store here yet: a convert is writing it in "
                                   f"{tmp_path / '.st.polyprof-new'}"), line
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    assert "no store here yet" in one_error(cli("report", root, "-o", tmp_path / "r.html"))
    assert not (tmp_path / "r.html").exists()


def test_two_converts_in_one_process(tmp_path, monkeypatch):
    """Two threads of one program converting to one -o: one writes it, the other is
    refused (flock is per open file, so threads of one process exclude each other too)."""
    root = tmp_path / "st"
    errors: list[BaseException] = []
    refused = threading.Event()
    real = writer._prepare

    def held_prepare(*a, **k):  # the first holds the lock until the second has tried
        real(*a, **k)
        refused.wait(timeout=60)

    def convert():
        try:
            polyprof.load_ranks(GLOO).convert(root)
        except OutputError as e:
            errors.append(e)
            refused.set()

    monkeypatch.setattr(writer, "_prepare", held_prepare)
    threads = [threading.Thread(target=convert) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(errors) == 1 and "another polyprof convert" in str(errors[0])
    assert Store(root).ranks == [0, 1] and leftovers(root) == []


def test_a_refused_convert_gives_the_lock_back(tmp_path):
    """A convert refused after taking the lock (a store there, no --overwrite) leaves no
    lock file, and the next convert is not refused as "another convert"."""
    root = polyprof.load_ranks(GLOO[:1]).convert(tmp_path / "st")
    with pytest.raises(OutputError, match="a store is already there"):
        polyprof.load_ranks(GLOO[:1]).convert(root)
    assert leftovers(root) == []
    polyprof.load_ranks(GLOO[1:]).convert(root, overwrite=True)
    assert Store(root).ranks == [1]


# ------------------------------------------------------------------ a full disk
@pytest.fixture
def small_tmpfs(mount_tmpfs):
    """A real full disk: a 1 MiB tmpfs (needs root; skipped with the reason otherwise)."""
    return mount_tmpfs("1m")


def _fill(mnt: Path, leave: int) -> None:
    st = os.statvfs(mnt)
    (mnt / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - leave))


def test_a_full_disk_names_the_store(small_tmpfs):
    """A Kineto rank streamed into the store (store/rankstream.py) onto a full disk: one
    line naming the store and saying the disk is full; the old store as it was."""
    root = polyprof.load_ranks(GLOO[:1]).convert(small_tmpfs / "st")
    before = files_of(root)
    _fill(small_tmpfs, 64 << 10)
    line = one_error(cli("convert", NCCL, "-o", root, "--overwrite"))
    assert f"{root}: the store cannot be written: the disk is full" in line and "No space left" in line, line
    assert "a store already there is left as it was" in line
    assert files_of(root) == before and leftovers(root) == []


def test_a_full_disk_names_the_store_for_a_rank_read_whole(small_tmpfs):
    """A rank written whole (store/rankfiles.write_rank: a Trace given to the API); the
    executor's error names the rank, then the store."""
    root = small_tmpfs / "st"
    with pytest.raises(PolyprofError, match=f"{root}: the store cannot be written: the disk is full "
                                          r"\(.part-0: .*No space left"):
        _fill(small_tmpfs, 64 << 10)
        polyprof.load_ranks([polyprof.load(NCCL)]).convert(root)
    assert not root.exists() and leftovers(root) == []
