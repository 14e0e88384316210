"""SQLite exports shared compressed (``report.sqlite.gz``, ``.xz``) read as the plain
file: Nsight Systems' (tests/data/nsys/saxpy_2022.sqlite, a real export) through the same
temporary copy as nvprof's (tests/test_nvprof.py)."""

from __future__ import annotations

import gzip
import lzma
import tempfile
from pathlib import Path

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
