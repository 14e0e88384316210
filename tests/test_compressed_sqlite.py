"""SQLite exports shared compressed (``report.sqlite.gz``, ``.xz``) read as the plain
file: Nsight Systems' (tests/data/nsys/saxpy_2022.sqlite, a real export) through the same
temporary copy as nvprof's (tests/test_nvprof.py)."""

from __future__ import annotations

import contextlib
import gzip
import os
import lzma
import tempfile
from pathlib import Path

import numpy as np
import pytest

from polyprof.cli import main
from polyprof.formats.detect import detect

NSYS = Path(__file__).parent / "data" / "nsys" / "saxpy_2022.sqlite"


@pytest.mark.parametrize("suffix, pack", [(".gz", gzip.compress), (".xz", lzma.compress)])
def test_a_compressed_nsys_export_summarises_as_the_plain_one(tmp_path, monkeypatch, capsys, suffix, pack):
    p = tmp_path / f"saxpy_2022.sqlite{suffix}"
    p.write_bytes(pack(NSYS.read_bytes()))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert detect(p) == "nsys"
    assert main(["summary", "--json", str(NSYS)]) == 0
    plain = capsys.readouterr().out
    assert main(["summary", "--json", str(p)]) == 0
    assert capsys.readouterr().out == plain and '"saxpy(double *, double *, double *, double, int)"' in plain
    assert list(scratch.iterdir()) == []


def test_a_directory_lists_compressed_databases_as_ranks(tmp_path):
    """Ranks kept compressed (``rank0.nvvp.xz``, ``rank1.rpd.gz``) are files of the job."""
    from polyprof.ranks.sources import rank_files

    names = ["r0.nvvp.xz", "r1.rpd.gz", "r2.sqlite.gz", "r3.db.xz", "notes.txt"]
    for n in names:
        (tmp_path / n).write_bytes(b"")
    assert [p.name for p in rank_files(tmp_path)] == names[:4]


def test_no_temporary_file_says_so_naming_the_file(tmp_path, monkeypatch):
    """TMPDIR where no file can be made: the compressed database's error names it."""
    import polyprof
    from polyprof.errors import TraceFormatError

    gz = tmp_path / "report.sqlite.gz"
    gz.write_bytes(gzip.compress(NSYS.read_bytes()))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(gz)
    assert str(ei.value).startswith(f"{gz}: cannot make a temporary file in {tmp_path / 'missing'}")


@pytest.mark.parametrize("head", [256 << 10, 4096])
def test_a_compressed_database_is_inflated_once_in_full(tmp_path, monkeypatch, head):
    """Detecting and reading a compressed export inflates it in full once: its sniffs read
    the schema from its first pages (``SCHEMA_HEAD_BYTES``, here 256 KiB of the 373 KiB
    Nsight Systems export, which hold its schema); with a head too short for the
    schema (4 KiB), from the whole: the head, then twice the whole."""
    import polyprof
    from polyprof.formats import inflate, sqlite_db

    plain = polyprof.load(NSYS).n_events
    monkeypatch.setattr(sqlite_db, "SCHEMA_HEAD_BYTES", head)
    sqlite_db._packed_schema.cache_clear()
    p = tmp_path / "report.sqlite.gz"
    p.write_bytes(gzip.compress(NSYS.read_bytes()))
    inflated = []
    blocks = inflate.Decompressed.blocks

    def counted(self):
        for b in blocks(self):
            inflated.append(len(b))
            yield b

    monkeypatch.setattr(inflate.Decompressed, "blocks", counted)
    assert polyprof.load(p).n_events == plain > 0
    size = NSYS.stat().st_size
    want = size + head if head > 4096 else head + 2 * size
    assert sum(inflated) == want, (sum(inflated), size)


def _count_inflations(monkeypatch) -> list[int]:
    """Bytes each inflation of a compressed file gave (one entry per ``Decompressed.blocks``)."""
    from polyprof.formats import inflate

    runs: list[int] = []
    blocks = inflate.Decompressed.blocks

    def counted(self):
        runs.append(0)
        for b in blocks(self):
            runs[-1] += len(b)
            yield b

    monkeypatch.setattr(inflate.Decompressed, "blocks", counted)
    return runs


NVVP_XZ = Path(__file__).parent / "data" / "peers" / "blinkplus_nccl" / "output.nvvp.xz"  # 688 KiB inflated
RPD_GZ = Path(__file__).parent / "data" / "rpd" / "mytrace.rpd.gz"  # 4.07 MiB inflated


@pytest.mark.parametrize("name, make, unpack", [
    ("saxpy_2022.sqlite.gz", lambda: gzip.compress(NSYS.read_bytes()), gzip.decompress),
    ("saxpy_2022.sqlite.xz", lambda: lzma.compress(NSYS.read_bytes()), lzma.decompress),
    ("two_members.sqlite.gz", lambda: gzip.compress(NSYS.read_bytes()[:100_000]) + gzip.compress(
        NSYS.read_bytes()[100_000:]), gzip.decompress),
    ("output.nvvp.xz", NVVP_XZ.read_bytes, lzma.decompress),
    ("mytrace.rpd.gz", RPD_GZ.read_bytes, gzip.decompress),
])
def test_a_database_within_its_sniffs_head_is_inflated_once(tmp_path, monkeypatch, name, make, unpack):
    """A compressed database that ends within ``SCHEMA_HEAD_BYTES`` inflated (373 KiB and
    688 KiB of 4 MiB), or within the block that crosses them (RPD's 4.07 MiB), is inflated
    whole by its sniff: the read after takes those bytes instead of inflating it again,
    and reads what the plain file gives."""
    import polyprof
    from polyprof.formats import sqlite_db

    p = tmp_path / name
    p.write_bytes(make())
    plain_path = tmp_path / name.rsplit(".", 1)[0]
    plain_path.write_bytes(unpack(p.read_bytes()))
    plain = polyprof.load(plain_path)
    sqlite_db._packed_schema.cache_clear()
    runs = _count_inflations(monkeypatch)
    got = polyprof.load(p)
    assert runs == [plain_path.stat().st_size]  # once, all of it (before: twice)
    assert got.n_events == plain.n_events > 0 and got.strings == plain.strings
    for k in ("start_ns", "dur_ns", "name"):
        assert np.array_equal(got.events[k], plain.events[k])
    assert sqlite_db._WHOLE == {}  # taken by the read: nothing kept
    polyprof.load(p)  # read again (its sniff's schema cached): inflated for the read only
    assert runs == [plain_path.stat().st_size] * 2


def test_the_sniffs_bytes_are_not_taken_for_another_file_or_other_limits(tmp_path, monkeypatch):
    """The bytes a sniff kept are the file's as it was, under the limits then: a file
    changed since, or a read under other limits, inflates the file again."""
    from polyprof.formats import safety, sqlite_db
    from polyprof.formats.nsys import load as read_nsys

    sqlite_db._packed_schema.cache_clear()
    p = tmp_path / "report.sqlite.gz"
    p.write_bytes(gzip.compress(NSYS.read_bytes()))
    assert detect(p) == "nsys" and len(sqlite_db._WHOLE) == 1
    runs = _count_inflations(monkeypatch)
    with safety.override(max_inflate_ratio=150.0):
        assert read_nsys(p).n_events > 0
    assert len(runs) == 1 and len(sqlite_db._WHOLE) == 1  # other limits: inflated again, the sniff's kept
    p.write_bytes(gzip.compress(NSYS.read_bytes(), compresslevel=1))  # another file (its size)
    assert read_nsys(p).n_events > 0
    assert len(runs) == 2
    sqlite_db._WHOLE.clear()


def test_a_head_that_ends_where_the_stream_goes_on_is_not_the_whole(tmp_path, monkeypatch):
    """A sniff's head that stops inside the stream (here 64 KiB of the 373 KiB, its
    schema in them or not) keeps nothing: the read inflates the whole."""
    import polyprof
    from polyprof.formats import sqlite_db

    p = tmp_path / "report.sqlite.xz"
    p.write_bytes(lzma.compress(NSYS.read_bytes()))
    monkeypatch.setattr(sqlite_db, "SCHEMA_HEAD_BYTES", 64 << 10)
    sqlite_db._packed_schema.cache_clear()
    parts, whole = sqlite_db._inflate_head(p, 64 << 10)
    assert not whole and sum(map(len, parts)) >= 64 << 10
    parts, whole = sqlite_db._inflate_head(p, 4 << 20)
    assert whole and b"".join(parts) == NSYS.read_bytes()
    assert polyprof.load(p).n_events == polyprof.load(NSYS).n_events
    assert sqlite_db._WHOLE == {}


def test_a_file_rewritten_in_place_with_its_old_time_is_read_again(tmp_path, monkeypatch):
    """A compressed database sniffed, then rewritten in place with another database of
    the same size (a kernel's end moved 777 µs) and its modification time set back
    (``os.utime``): its change time differs (utime cannot set it), so the read inflates
    the file as it is now, not the sniff's bytes (before: the old database, 3.885 ms less
    kernel time), and a new sniff inflates it again (before: the old schema, cached)."""
    import os
    import shutil
    import sqlite3
    import time

    import polyprof
    from polyprof.formats import sqlite_db

    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(NSYS, a)
    shutil.copy(NSYS, b)
    with contextlib.closing(sqlite3.connect(b)) as c:
        c.execute("update CUPTI_ACTIVITY_KIND_KERNEL set end = end + 777000")
        c.commit()
    old, new = (gzip.compress(p.read_bytes(), compresslevel=0, mtime=0) for p in (a, b))
    assert len(old) == len(new) and old != new
    sqlite_db._packed_schema.cache_clear()
    sqlite_db._WHOLE.clear()
    p = tmp_path / "t.sqlite.gz"
    p.write_bytes(old)
    st = p.stat()
    assert detect(p) == "nsys" and len(sqlite_db._WHOLE) == 1
    time.sleep(0.05)  # (past the coarse clock's tick the change time is taken from)
    with open(p, "r+b") as f:  # in place: the same inode, the same size
        f.write(new)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    runs = _count_inflations(monkeypatch)
    dur = int(polyprof.load(p).events["dur_ns"].sum())
    assert len(runs) == 1  # sniffed again (the new bytes, all of it: the read takes them)
    assert dur == int(polyprof.load(b).events["dur_ns"].sum()) == int(polyprof.load(a).events["dur_ns"].sum()) + \
        3_885_000
    sqlite_db._WHOLE.clear()


def test_a_sniff_with_no_read_keeps_its_bytes_a_few_seconds(tmp_path, monkeypatch):
    """The bytes of a sniff no read takes (detect alone) are dropped when a later SQLite
    sniff or compressed read finds them older than ``_WHOLE_SECONDS``, and past
    ``_WHOLE_KEPT`` files (before: kept until four newer ones pushed them out, up to 32
    MiB in a long-lived process)."""
    from polyprof.formats import sqlite_db

    sqlite_db._packed_schema.cache_clear()
    sqlite_db._WHOLE.clear()
    clock = [1000.0]
    monkeypatch.setattr(sqlite_db, "_now", lambda: clock[0])
    files = []
    for i in range(6):
        p = tmp_path / f"r{i}.sqlite.gz"
        p.write_bytes(gzip.compress(NSYS.read_bytes(), compresslevel=1 + i % 2, mtime=i))
        files.append(p)
    assert detect(files[0]) == "nsys" and [k[0] for k in sqlite_db._WHOLE] == [str(files[0])]
    clock[0] += sqlite_db._WHOLE_SECONDS + 1
    assert sqlite_db._sniffed(files[5]) is None  # a read of another file: the old bytes dropped
    assert sqlite_db._WHOLE == {}
    sqlite_db._packed_schema.cache_clear()
    for p in files[:5]:  # sniffed together (ranks read in threads): the latest four kept
        assert detect(p) == "nsys"
    assert [k[0] for k in sqlite_db._WHOLE] == [str(p) for p in files[1:5]]
    clock[0] += sqlite_db._WHOLE_SECONDS - 1
    assert sqlite_db._sniffed(files[4]) is not None and len(sqlite_db._WHOLE) == 3  # in time: taken
    clock[0] += 2
    assert detect(NSYS) == "nsys" and sqlite_db._WHOLE == {}  # a plain database's sniff drops them too
    clock[0] += 1
    assert detect(files[5]) == "nsys" and [k[0] for k in sqlite_db._WHOLE] == [str(files[5])]
    sqlite_db._WHOLE.clear()


SLOW_INFLATE = """
import contextlib, sys, time
import polyprof.formats.sqlite_db as db
orig = db.inflated
@contextlib.contextmanager
def slow(path, data=None):
    with orig(path, data) as p:
        time.sleep(0.3)  # a large database still inflating when the reader ahead is stopped
        yield p
db.inflated = slow
sys.argv = ["polyprof", "summary", "-j", "1", sys.argv[1]]
from polyprof.cli import entry
entry()
"""


def test_ranks_read_ahead_leave_no_inflated_database_behind(tmp_path):
    """A job's reader ahead (ranks/executor.py ReadAhead) is killed when the ranks are
    taken; killed inside an inflation, its database stayed in TMPDIR (a 17 MB
    ``polyprof-*.sqlite`` per multi-rank read of compressed Nsight files, on success
    too). Its temporary files now go to a folder its parent removes."""
    import subprocess
    import sys

    job = tmp_path / "job"
    job.mkdir()
    for r in range(6):  # stored, not packed: over the 2 MiB of a job worth reading ahead
        (job / f"rank{r}.sqlite.gz").write_bytes(gzip.compress(NSYS.read_bytes(), compresslevel=0))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "slow.py"
    script.write_text(SLOW_INFLATE)
    r = subprocess.run([sys.executable, str(script), str(job)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in tmp.iterdir()) == []
