"""A store's ``flows`` view reads flows.parquet alone (store schema 2): the file holds,
beside the rows of events.parquet its flows join, those events' ``input_row`` and the
flow's category, written at convert time, so ``SELECT count(*) FROM flows`` no longer
joins every rank's events.parquet (before: 9.8 s and 2.7 GB on 600 ranks, 6.65M flows).
A schema 1 store (flows.parquet without them) is still read, through the join."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

import polyprof
from polyprof.cli.sql import query
from polyprof.store import Store
from polyprof.store.manifest import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
#: a Kineto rank streamed in 6 chunks (26935 events, 4317 flows), a small one in one
#: chunk (flows of two categories), and a rank read whole (a .polyprof file: 6210
#: events in two row groups, 1048 flows)
FILES = [ROOT / "tests/data/traces/kineto/a100_nccl_rank0.json.gz",
         ROOT / "tests/data/traces/kineto/mi250_rocm_minitoy.json.gz",
         ROOT / "tests/data/h200/torch_copies_cupti.polyprof"]
FLOWS = "SELECT src, dst, id, category FROM flows{} ORDER BY ALL"
PAIRS = ("SELECT f.rank, s.name, d.name, f.category, count(*) FROM flows f "
         "JOIN events s ON s.rank = f.rank AND s.input_row = f.src "
         "JOIN events d ON d.rank = f.rank AND d.input_row = f.dst GROUP BY ALL ORDER BY ALL")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("flows") / "job.store"
    return polyprof.load_ranks(FILES, rank_by="order").convert(out, chunk_rows=4096)


def rows(table) -> list[tuple]:
    return [tuple(r.values()) for r in table.to_pylist()]


def copy(store: Path, to: Path) -> Path:
    shutil.copytree(store, to)
    return to


def test_flows_parquet_holds_its_events_input_rows_and_category(store):
    """Each rank's flows.parquet: src_input_row / dst_input_row are the ``input_row`` of
    the events.parquet rows src / dst (across the 6 chunks of the streamed rank too), and
    category the string at category_id."""
    assert orjson.loads((store / "manifest.json").read_bytes())["schema_version"] == SCHEMA_VERSION == 2
    assert [pq.ParquetFile(store / f"rank={r}" / "events.parquet").metadata.num_row_groups for r in (0, 2)] == [6, 2]
    for r in range(len(FILES)):
        folder = store / f"rank={r}"
        fl = pq.read_table(folder / "flows.parquet").to_pydict()
        input_row = pq.read_table(folder / "events.parquet", columns=["input_row"]).column(0).to_pylist()
        strings = pq.read_table(folder / "strings.parquet").column("s").to_pylist()
        assert fl["src"], r
        assert fl["src_input_row"] == [input_row[i] for i in fl["src"]]
        assert fl["dst_input_row"] == [input_row[i] for i in fl["dst"]]
        assert fl["category"] == [strings[i] for i in fl["category_id"]]


def test_the_flows_view_reads_flows_parquet_alone(store, tmp_path):
    """With every events.parquet and strings.parquet gone after the views are made, the
    flows view still gives each file's flows (before, it joined both, and failed)."""
    st = copy(store, tmp_path / "s")
    con = Store(st).connect()
    try:
        for r in range(len(FILES)):
            (st / f"rank={r}" / "events.parquet").unlink()
            (st / f"rank={r}" / "strings.parquet").unlink()
        assert con.execute("SELECT count(*) FROM flows").fetchone()[0] == 4317 + 20 + 1048
        for r, path in enumerate(FILES):
            got = con.execute(FLOWS.format(f" WHERE rank = {r}")).fetchall()
            assert got == rows(query(polyprof.load(path), FLOWS.format(""))), path
    finally:
        con.close()


def test_a_flow_joins_its_events_as_on_the_file(store):
    got = rows(Store(store).sql(PAIRS))
    for r, path in enumerate(FILES):
        want = rows(query(polyprof.load(path), PAIRS.replace("f.rank, ", "").replace("s.rank = f.rank AND ", "")
                          .replace("d.rank = f.rank AND ", "")))
        assert [g[1:] for g in got if g[0] == r] == want, path


def _as_schema_1(store: Path, to: Path) -> Path:
    """``store`` as a polyprof of store schema 1 wrote it: flows.parquet src, dst, id,
    category_id only, and the manifest's schema_version 1."""
    st = copy(store, to)
    for f in st.glob("rank=*/flows.parquet"):
        pq.write_table(pq.read_table(f, columns=["src", "dst", "id", "category_id"]), f, compression="zstd")
    m = orjson.loads((st / "manifest.json").read_bytes())
    m["schema_version"] = 1
    (st / "manifest.json").write_bytes(orjson.dumps(m))
    return st


def test_a_schema_1_store_reads_as_before(store, tmp_path):
    """A store written before the input rows were in flows.parquet: its flows view joins
    events.parquet as it did, and gives the same rows; its ranks read back the same."""
    old = _as_schema_1(store, tmp_path / "old")
    assert pq.read_schema(old / "rank=0" / "flows.parquet").names == ["src", "dst", "id", "category_id"]
    for q in (FLOWS.format(""), PAIRS, "SELECT rank, count(*) FROM flows GROUP BY ALL ORDER BY ALL"):
        assert rows(Store(old).sql(q)) == rows(Store(store).sql(q)), q
    for r in range(len(FILES)):
        a, b = Store(old).load(r), Store(store).load(r)
        assert all((a.flows[k] == b.flows[k]).all() for k in a.flows)
