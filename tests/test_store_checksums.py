"""Every Parquet file polyprof writes carries a CRC-32 per page, and every read polyprof does
with pyarrow checks them (formats/parquet_pages.py; docs/store.md): a store damaged on
disk reads as damaged, and says so.

Before: a few bytes flipped inside the zstd-compressed ``start_ns`` column of a store's
``events.parquet`` still decompressed and decoded, and ``summary STORE`` printed other
numbers with exit 0 (an audit: 2113 events whose end was no longer start + duration).
Each test below damages a file that way: one byte flipped where pyarrow, not checking
checksums, reads the file without an error and with other values."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_bigrank import _replicate
from test_store_safety import cli, one_error

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.ranks import fits
from polyprof.store import Store
from polyprof.store.rankfiles import _WELL_KNOWN

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests/data/traces/kineto"
SAMPLED = [KINETO / "sampled_rank0.json.gz", KINETO / "sampled_rank1.json.gz"]
V100 = KINETO / "v100_ns_resolution_rank0.json.gz"
#: a real torch DDP rank with flows, counters and text stats
DDP = ROOT / "tests/data/traces/gloo_ddp_compute/fast.rank0.pt.trace.json.xz"


def flip_silently(path: Path, column: str, group: int = 0) -> None:
    """Flip one byte of ``column``'s pages in row group ``group`` of ``path``, the first
    from the middle of the column chunk on (in a page's data, not its header, which the
    checksum does not cover) after which pyarrow, not checking checksums, still reads that
    column without an error, with other values: damage that only the pages' checksums
    reveal."""
    data = path.read_bytes()
    md = pq.ParquetFile(pa.BufferReader(data)).metadata
    cc = next(md.row_group(group).column(i) for i in range(md.num_columns)
              if md.row_group(group).column(i).path_in_schema == column)
    start = cc.dictionary_page_offset or cc.data_page_offset
    end = start + cc.total_compressed_size

    def read(b: bytes) -> pa.Table:
        return pq.ParquetFile(pa.BufferReader(b)).read_row_group(group, columns=[column])

    before = read(data)
    for at in range((start + end) // 2, end):
        b = bytearray(data)
        b[at] ^= 0x5A
        try:
            got = read(bytes(b))
            got.validate(full=True)
        except (pa.ArrowException, OSError):
            continue
        if not got.equals(before):
            path.write_bytes(bytes(b))
            return
    raise AssertionError(f"{path}: no byte of {column} flips silently")


@pytest.fixture()
def store(tmp_path) -> Path:
    return polyprof.load_ranks(SAMPLED).convert(tmp_path / "st")


COMMANDS = {"summary": ["summary", "{s}"], "summary --json": ["summary", "{s}", "--json"],
            "report": ["report", "{s}", "-o", "{s}.html"], "export": ["export", "{s}", "-f", "chrome", "-o", "{s}.json"],
            "critical-path": ["critical-path", "{s}"], "diff": ["diff", "{s}", "{s}"]}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_flipped_byte_in_start_ns_is_a_damaged_store_file(store, command):
    """The audit's case, by every command that reads a store's ranks: one line naming the
    file (before: other numbers, exit 0)."""
    f = store / "rank=1" / "events.parquet"
    flip_silently(f, "start_ns")
    line = one_error(cli(*(a.format(s=store) for a in COMMANDS[command])))
    assert f"{f}: damaged store file (" in line and "CRC checksum verification failed" in line, line


@pytest.mark.parametrize("name, column", [("events.parquet", "dur_ns"), ("events.parquet", "input_row"),
                                          ("events.parquet", "name_id"), ("flows.parquet", "src"),
                                          ("counters.parquet", "value"), ("strings.parquet", "s")])
def test_every_file_of_a_rank_is_checked(tmp_path, name, column):
    """Each Parquet file of a rank (a DDP rank: flows and counters too), read back with
    Store.load: a TraceFormatError naming the file."""
    store = polyprof.load_ranks([DDP]).convert(tmp_path / "st")
    f = store / "rank=0" / name
    flip_silently(f, column)
    with pytest.raises(TraceFormatError, match="damaged store file") as e:
        Store(store).load(0)
    assert e.value.path == str(f) and "CRC checksum" in str(e.value)


def test_a_stat_read_on_first_use_is_checked(tmp_path):
    """A text stat column, read only when first asked for (rankfiles._StoredStats)."""
    store = polyprof.load_ranks([DDP]).convert(tmp_path / "st")
    stats = json.loads((store / "rank=0" / "rank.json").read_text())["stats"]
    f = store / "rank=0" / "events.parquet"
    table = pq.read_table(f)
    lazy = max((s for s in stats if s["kind"] == "s" and s["key"] not in _WELL_KNOWN),
               key=lambda s: len(table) - table.column(s["column"]).null_count)  # the one most events have
    flip_silently(f, lazy["column"])
    trace = Store(store).load(0)  # (the columns read at once are intact)
    with pytest.raises(TraceFormatError, match="damaged store file .*CRC checksum"):
        trace.stats[lazy["key"]]


def test_the_windowed_summary_checks_pages(tmp_path, monkeypatch):
    """A rank summarised window by window (store/window.py: the plan's reads and each
    window's): a page of input_row (read by the windows only) in the second row group."""
    src = _replicate(V100, tmp_path / "rank0.json", 2)
    store = polyprof.load_ranks([src]).convert(tmp_path / "st", chunk_rows=20000)
    f = store / "rank=0" / "events.parquet"
    assert pq.ParquetFile(f).metadata.num_row_groups >= 2
    flip_silently(f, "input_row", group=1)
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", str((fits.BASE_BYTES >> 20) + 1))
    r = cli("summary", store)  # (a warning first: a window larger than this bound allows)
    assert r.returncode == 1 and "internal error" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert f"{f}: damaged store file (" in line and "CRC checksum" in line, line


def test_a_parquet_export_is_checked(tmp_path):
    """``export -f parquet`` writes page checksums, and reading it back checks them."""
    out = tmp_path / "t.parquet"
    polyprof.export(polyprof.load(SAMPLED[0]), out, format="parquet")
    assert polyprof.load(out).n_events == polyprof.load(SAMPLED[0]).n_events
    flip_silently(out, "start_ns")
    with pytest.raises(TraceFormatError, match="damaged Parquet file .*CRC checksum"):
        polyprof.load(out)


def _without_checksums(store: Path) -> None:
    """Every Parquet file of ``store`` written again as polyprof wrote them before: no
    page checksums (the same schema, metadata and row groups)."""
    for f in store.rglob("*.parquet"):
        pf = pq.ParquetFile(f)
        t = pf.read()
        size = max(pf.metadata.row_group(0).num_rows, 1) if pf.metadata.num_row_groups else 1
        pq.write_table(t, f, compression="zstd", row_group_size=size, write_page_checksum=False)


def test_a_store_written_before_checksums_reads_as_before(store, tmp_path):
    """A store without page checksums (every store before) reads the same, and its
    summary is byte for byte the one of the store with them."""
    old = tmp_path / "old"
    shutil.copytree(store, old)
    _without_checksums(old)
    for rank in (0, 1):
        a, b = Store(store).load(rank), Store(old).load(rank)
        assert all((a.events[k] == b.events[k]).all() for k in a.events)
    r1, r2 = cli("summary", store, "--json"), cli("summary", old, "--json")
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    assert r1.stdout == r2.stdout


def test_duckdb_does_not_check_page_checksums(store):
    """What docs/store.md says of ``polyprof sql``: DuckDB reads no page checksum, so the
    damage that summary refuses reads there as other numbers. When this fails, DuckDB
    checks them: say so in docs/store.md."""
    before = Store(store).sql("SELECT sum(start_ns) AS s FROM events WHERE rank = 1").column("s")[0].as_py()
    flip_silently(store / "rank=1" / "events.parquet", "start_ns")
    after = Store(store).sql("SELECT sum(start_ns) AS s FROM events WHERE rank = 1").column("s")[0].as_py()
    assert after != before
