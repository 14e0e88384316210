"""A store's SQL tables join and read as a trace file's: flows' src and dst name the
events' ``input_row`` in both (before, a store's flows held rows of ``events.parquet``,
which its events view did not show, so a join on ``input_row`` paired unrelated events:
aten::empty -> aten::as_strided for aten::t -> TBackward0), and flows have ``category``,
counters ``name``, as a file's do (before: ``category_id`` and ``name_id`` only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.cli.sql import query
from polyprof.store import Store
from polyprof.trace import TraceBuilder

ROOT = Path(__file__).resolve().parents[1]
#: flows of one category (139, ac2g), of two (ac2g, fwdbwd), and counters without flows
FILES = [ROOT / "tests/data/traces/kineto/a100_alexnet_small.json.gz",
         ROOT / "tests/data/traces/kineto/mi250_rocm_minitoy.json.gz",
         ROOT / "tests/data/corpus/seeds/host_session.polyprof"]

PAIRS = ("SELECT s.name AS src_name, d.name AS dst_name, f.category, count(*) AS n FROM flows f "
         "JOIN events s ON s.input_row = f.src JOIN events d ON d.input_row = f.dst GROUP BY ALL ORDER BY ALL")
#: the same over a store's ranks: the rank conditions added, one rank asked
RANK_PAIRS = ("SELECT s.name AS src_name, d.name AS dst_name, f.category, count(*) AS n FROM flows f "
              "JOIN events s ON s.rank = f.rank AND s.input_row = f.src "
              "JOIN events d ON d.rank = f.rank AND d.input_row = f.dst WHERE f.rank = {r} GROUP BY ALL ORDER BY ALL")
COUNTERS = "SELECT plane, name, count(*) AS n, sum(value) AS v, min(ts_ns) AS t0 FROM counters GROUP BY ALL ORDER BY ALL"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("joins") / "job.store"
    return polyprof.load_ranks(FILES, rank_by="order").convert(out)


def rows(table) -> list[tuple]:
    return [tuple(r.values()) for r in table.to_pylist()]


@pytest.mark.parametrize("rank", range(len(FILES)))
def test_a_flow_join_pairs_the_same_events_on_a_file_and_its_store(store, rank):
    trace = polyprof.load(FILES[rank])
    on_file = rows(query(trace, PAIRS))
    on_store = rows(Store(store).sql(RANK_PAIRS.format(r=rank)))
    assert on_store == on_file
    assert sum(r[-1] for r in on_file) == len(trace.flows["src"])  # every flow found both its events
    if rank == 1:  # the forward -> backward flows pair an op with its own backward
        assert ("aten::t", "TBackward0", "fwdbwd", 1) in on_file


def test_flows_src_dst_and_category_are_the_files(store):
    """Row for row: the store's flows are the file's (src, dst, id, category), rank added."""
    for rank, path in enumerate(FILES):
        want = rows(query(polyprof.load(path), "SELECT src, dst, id, category FROM flows ORDER BY ALL"))
        got = rows(Store(store).sql(f"SELECT src, dst, id, category FROM flows WHERE rank = {rank} ORDER BY ALL"))
        assert got == want
    cats = rows(Store(store).sql("SELECT rank, category, count(*) FROM flows GROUP BY ALL ORDER BY ALL"))
    assert cats == [(0, "ac2g", 139), (1, "ac2g", 16), (1, "fwdbwd", 4)]


def test_counters_have_their_names_as_in_a_file(store):
    want = rows(query(polyprof.load(FILES[2]), COUNTERS))
    assert want and {r[1] for r in want} >= {"process.rss_bytes"}
    assert rows(Store(store).sql(COUNTERS.replace("GROUP BY", "WHERE rank = 2 GROUP BY"))) == want


def test_the_same_query_text_on_a_file_and_on_a_store_of_it(tmp_path):
    """``polyprof sql`` given the file and given the store made from it (one rank): the
    same statement, the same lines; ``SELECT category FROM flows`` runs on both."""
    st = tmp_path / "one.store"
    assert cli("convert", str(FILES[1]), "-o", str(st)).returncode == 0
    a, b = cli("sql", "--csv", str(FILES[1]), PAIRS), cli("sql", "--csv", str(st), PAIRS)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout
    assert '"aten::t","TBackward0","fwdbwd",1' in a.stdout.splitlines()
    for target in (FILES[1], st):
        r = cli("sql", "--csv", str(target), "SELECT category, count(*) AS n FROM flows GROUP BY 1 ORDER BY 1")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ['"category","n"', '"ac2g",16', '"fwdbwd",4']


def test_a_files_events_have_input_row_and_a_stat_of_that_name_is_kept():
    b = TraceBuilder()
    t = b.track(b.plane("/host:CPU", "host"), "main", "thread", 1)
    first = b.event(t, "a", 100, 10, "cpu_op", input_row=7)
    second = b.event(t, "b", 50, 10, "cpu_op")
    b.flow(first, second, 1, "fwdbwd")
    table = query(b.build(), "SELECT * FROM events")
    assert table.column_names[:9] == ["plane", "track_id", "track", "name", "category", "start_ns", "dur_ns",
                                      "end_ns", "input_row"]
    assert table.column("input_row").to_pylist() == [0, 1]
    assert table.column("stat.input_row").to_pylist() == [7, None]
    got = rows(query(b.build(), "SELECT s.name AS a, d.name AS b FROM flows f JOIN events s ON s.input_row = f.src "
                                "JOIN events d ON d.input_row = f.dst"))
    assert got == [("a", "b")]
    assert np.array_equal(query(b.build(), "SELECT input_row FROM events ORDER BY start_ns").column(0), [1, 0])
