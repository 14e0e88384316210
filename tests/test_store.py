"""The on-disk store: convert real traces, read them back rank by rank as the traces they
were, the job's analyses of a store equal to those of its files, DuckDB over the store,
Dask as the executor, damaged stores."""

from __future__ import annotations

import concurrent.futures as cf
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

import polyprof
from polyprof.analyze.registry import PER_EVENT
from polyprof.errors import PolyprofError, TraceFormatError
from polyprof.ranks.traceset import load_rank
from polyprof.report.tables import build, to_json
from polyprof.store import Store
from polyprof.store.manifest import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted(p for p in (ROOT / "tests/data/traces").glob("*/*") if p.suffix in (".gz", ".pb"))
KINETO = ROOT / "tests/data/traces/kineto"


def convert(inputs, output, rank_by="auto", executor=None, **options) -> Path:
    """``polyprof convert``: the ranks of ``inputs`` written as a store."""
    return polyprof.load_ranks(inputs, rank_by=rank_by).convert(output, executor, **options)


def summary(store, executor="serial", **options):
    return polyprof.load_ranks(store).analyze(executor, **options)


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def all_store(tmp_path_factory) -> Path:
    """Every real trace as one rank each (rank = position in TRACES)."""
    out = tmp_path_factory.mktemp("store") / "all"
    convert(TRACES, out, rank_by="order", chunk_rows=4096)
    return out


@pytest.fixture(scope="module")
def all_report(all_store):
    return summary(all_store)


@pytest.fixture(scope="module")
def all_summary(all_report):
    return orjson.loads(to_json(all_report))


def _same(a, b) -> bool:
    """Equal (NaN equal to NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _dense(trace, key):
    col = trace.stats[key]
    out = np.full(trace.n_events, None, object)
    out[col.rows] = col.values.tolist()
    return out


@pytest.mark.parametrize("rank", range(len(TRACES)), ids=[p.name for p in TRACES])
def test_rank_reads_back_as_the_trace_it_was(all_store, rank):
    """Event for event in the input's order (the files hold them in time order), with
    the source the job gave it (rank, label)."""
    job = polyprof.load_ranks(TRACES, rank_by="order")
    orig = load_rank(job.entry(rank))
    got = Store(all_store).load(rank)
    assert got.n_events == orig.n_events
    for k in ("track", "name", "category", "start_ns", "dur_ns"):
        assert got.events[k].dtype == orig.events[k].dtype and np.array_equal(got.events[k], orig.events[k]), k
    assert got.names().tolist() == orig.names().tolist()
    assert [(p.name, p.kind, p.vendor, p.pid, p.source) for p in got.planes] == \
        [(p.name, p.kind, p.vendor, p.pid, p.source) for p in orig.planes]
    assert got.sources == orig.sources
    assert [(t.plane, t.name, t.kind, t.tid) for t in got.tracks] == [(t.plane, t.name, t.kind, t.tid)
                                                                      for t in orig.tracks]
    assert set(got.stats) == set(orig.stats)
    for key in orig.stats:
        assert np.array_equal(got.stats[key].rows, orig.stats[key].rows), key
        want, have = _dense(orig, key), _dense(got, key)
        same = [a == b or (isinstance(b, bytes) and a == b) for a, b in zip(have.tolist(), want.tolist())]
        assert all(same), key
    for k in ("src", "dst", "id", "category"):
        assert np.array_equal(got.flows[k], orig.flows[k]), k
    for k in ("plane", "ts_ns", "value"):
        assert np.array_equal(got.counters[k], orig.counters[k])
    assert orjson.loads(orjson.dumps(got.metadata, default=str)) == \
        orjson.loads(orjson.dumps(orig.metadata, default=str, option=orjson.OPT_NON_STR_KEYS))


@pytest.mark.parametrize("rank", range(len(TRACES)), ids=[p.name for p in TRACES])
def test_summary_of_each_rank_equals_the_single_file_summary(all_summary, all_report, rank):
    """Every number, event rows included: a store's rank is the trace it was."""
    single = orjson.loads(to_json(build(polyprof.load(TRACES[rank]))))
    single["overview"]["window"] = all_summary["overview"]["per_rank"][str(rank)]["window"]
    assert _same(all_summary["overview"]["per_rank"][str(rank)], single["overview"])
    mine = orjson.loads(orjson.dumps([f.to_dict() for f in all_report.results[rank].findings],
                                     option=orjson.OPT_SERIALIZE_NUMPY))
    assert _same(mine, single["findings"])
    for name, table in single["tables"].items():
        if name in PER_EVENT:  # one row per event: left with the rank (docs/ranks.md)
            assert name not in all_summary["tables"]
            continue
        if name in ("collective_stats", "transfers"):  # the job's own, over every rank (docs/ranks.md)
            continue
        stacked = all_summary["tables"][name]
        assert stacked["columns"] == ["rank", *table["columns"]]
        mine = [{k: v for k, v in r.items() if k != "rank"} for r in stacked["records"] if r["rank"] == rank]
        assert _same(mine, table["records"]), name


def test_events_sorted_within_row_groups_and_strings_dictionary_encoded(all_store):
    st = Store(all_store)
    rank = next(i for i, p in enumerate(TRACES) if p.name == "v100_ns_resolution_rank0.json.gz")
    f = pq.ParquetFile(st.path(rank) / "events.parquet")
    # streamed a chunk of about 4096 events at a time (whole slices of the file): a row
    # group per chunk, each in start order (docs/store.md)
    assert f.metadata.num_row_groups >= f.metadata.num_rows // (2 * 4096) > 1
    for i in range(f.metadata.num_row_groups):
        starts = f.read_row_group(i, columns=["start_ns"]).column(0).to_numpy()
        assert len(starts) and np.all(np.diff(starts) >= 0)
    name_col = f.metadata.row_group(0).column(f.schema_arrow.get_field_index("name"))
    assert "RLE_DICTIONARY" in str(name_col.encodings) or "PLAIN_DICTIONARY" in str(name_col.encodings)
    m = json.loads((all_store / "manifest.json").read_text())
    assert m["schema_version"] == SCHEMA_VERSION and [r["rank"] for r in m["ranks"]] == list(range(len(TRACES)))
    assert m["ranks"][rank]["events"] == f.metadata.num_rows
    assert m["ranks"][rank]["format"] == "chrome-json"
    assert m["ranks"][rank]["input"].endswith(TRACES[rank].name)
    assert m["ranks"][rank]["sources"][0]["rank"] == rank  # the job's numbering (here: the order)
    assert m["ranks"][rank]["rank_from"] == "order" and m["ranks"][rank]["label"] == TRACES[rank].name


def test_sql_over_every_rank_matches_the_traces(all_store):
    st = Store(all_store)
    res = st.sql("SELECT rank, count(*) AS n, sum(dur_ns)::BIGINT AS d, count(DISTINCT name) AS names "
                 "FROM events GROUP BY rank ORDER BY rank").to_pylist()
    want = []
    for i, p in enumerate(TRACES):
        t = polyprof.load(p)
        if t.n_events:
            want.append({"rank": i, "n": t.n_events, "d": int(t.events["dur_ns"].sum()),
                         "names": len(set(t.names().tolist()))})
    assert res == want
    con = st.connect(memory_limit="200MB")
    assert con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] in ("190.7 MiB", "200.0 MB", "200MB")
    flows = con.execute("SELECT rank, count(*) FROM flows GROUP BY rank ORDER BY rank").fetchall()
    assert flows == [(i, len(polyprof.load(p).flows["src"])) for i, p in enumerate(TRACES)
                     if len(polyprof.load(p).flows["src"])]
    con.close()


def test_ranks_from_distributed_info_and_repeated_ranks(tmp_path):
    a, b = KINETO / "sampled_rank0.json.gz", KINETO / "sampled_rank1.json.gz"
    st = Store(convert([b, a], tmp_path / "s"))  # the traces say rank 1 and rank 0
    assert st.ranks == [0, 1]
    assert st.entry(0)["input"].endswith("sampled_rank0.json.gz")
    assert [st.entry(r)["sources"][0]["rank"] for r in (0, 1)] == [0, 1]
    with pytest.raises(PolyprofError, match="repeats rank 0.*by order"):
        convert([a, a], tmp_path / "t", rank_by="trace")
    assert not (tmp_path / "t" / "manifest.json").exists()
    with pytest.raises(PolyprofError, match="name rank 0, each twice.*--rank-by order"):  # auto: several runs
        convert([a, a], tmp_path / "u")  # (ranks/sources.several_runs: before, numbered by order)
    assert Store(convert([a, a], tmp_path / "u", rank_by="order")).ranks == [0, 1]
    r = cli("convert", str(a), str(a), "-o", str(tmp_path / "v"), "--rank-by", "trace")
    assert r.returncode == 1 and "repeats rank 0" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_existing_store_is_not_overwritten_unless_asked(tmp_path):
    a = KINETO / "cpu_only_rank34.json.gz"
    convert([a], tmp_path / "s")
    with pytest.raises(PolyprofError, match="--overwrite"):
        convert([a], tmp_path / "s")
    convert([a, a], tmp_path / "s", overwrite=True, rank_by="order")
    assert Store(tmp_path / "s").ranks == [0, 1]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(PolyprofError, match="not a store"):
        convert([a], tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_bad_input_names_the_file_and_leaves_no_manifest(tmp_path):
    bad = tmp_path / "rank1.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1},')
    with pytest.raises(PolyprofError, match=r"rank 1 \(rank1.json\): .*rank1.json"):
        convert([KINETO / "cpu_only_rank34.json.gz", bad], tmp_path / "s", rank_by="order")
    # nothing half-written is left: the next convert needs no --overwrite (it refused:
    # "a store is already there"), and a store left by a killed convert names the flag
    assert not (tmp_path / "s").exists()
    convert([KINETO / "cpu_only_rank34.json.gz"], tmp_path / "s")
    shutil.rmtree(tmp_path / "s")
    (tmp_path / "s" / ".part-0").mkdir(parents=True)
    with pytest.raises(TraceFormatError, match="incomplete store.*with --overwrite"):
        Store(tmp_path / "s")


@pytest.fixture()
def small_store(tmp_path) -> Path:
    return convert([KINETO / "sampled_rank0.json.gz", KINETO / "sampled_rank1.json.gz"], tmp_path / "s")


def test_newer_schema_is_refused_with_a_clear_message(small_store):
    m = json.loads((small_store / "manifest.json").read_text())
    m["schema_version"] = SCHEMA_VERSION + 1
    (small_store / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(TraceFormatError, match=f"schema version {SCHEMA_VERSION + 1} is newer"):
        Store(small_store)
    r = cli("summary", str(small_store))
    assert r.returncode == 1 and "newer" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("path, says", [("rank=0", "rank 1's path is 'rank=0'"),
                                         ("../other/rank=1", "a store reads only its own rank folders"),
                                         ("/tmp/rank=1", "not 'rank=1'")])
def test_a_manifest_pointing_elsewhere_is_refused(small_store, path, says):
    """A manifest whose rank path named rank 0's folder read rank 0 twice (labelled rank
    1); one naming another store's folder read that store: a store reads its own
    rank=N folders only."""
    m = json.loads((small_store / "manifest.json").read_text())
    m["ranks"][1]["path"] = path
    (small_store / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(TraceFormatError, match="damaged store") as e:
        Store(small_store)
    assert says in str(e.value)


@pytest.mark.parametrize("value, says", [("1", "schema_version is '1', not an integer"),
                                          (None, "has no schema_version")])
def test_a_schema_version_that_is_not_an_integer_says_so(small_store, value, says):
    m = json.loads((small_store / "manifest.json").read_text())
    m["schema_version"] = value
    (small_store / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(TraceFormatError, match=says):
        Store(small_store)


def test_sql_on_a_store_is_stopped_by_its_timeout_and_streamed(small_store):
    """`sql STORE` ran its statement without a timer and held the whole result: a cross
    join ran on past --timeout (killed at 20 s), and --max-rows did not bound memory."""
    import time

    t0 = time.monotonic()
    r = cli("sql", str(small_store), "--timeout", "2", "SELECT count(*) FROM events a, events b, events c")
    assert r.returncode == 1 and "stopped after 2 s" in r.stderr and time.monotonic() - t0 < 60, r.stderr
    schema, batches = Store(small_store).stream("SELECT a.rank FROM events a, events b LIMIT 200000")
    assert schema.names == ["rank"] and sum(len(b) for b in batches) == 200000


@pytest.mark.parametrize("damage", ["manifest", "missing rank", "truncated events", "rank.json", "events count"])
def test_damaged_store_says_what_and_where(small_store, damage):
    rank1 = small_store / "rank=1"
    if damage == "manifest":
        (small_store / "manifest.json").write_text('{"format": "polyprof-store", "schema_')
        where = "manifest.json"
    elif damage == "missing rank":
        shutil.rmtree(rank1)
        where = "rank=1"
    elif damage == "truncated events":
        data = (rank1 / "events.parquet").read_bytes()
        (rank1 / "events.parquet").write_bytes(data[: len(data) // 2])
        where = "events.parquet"
    elif damage == "rank.json":
        (rank1 / "rank.json").write_text("{")
        where = "rank.json"
    else:
        h = json.loads((rank1 / "rank.json").read_text())
        h["events"] += 1
        (rank1 / "rank.json").write_text(json.dumps(h))
        where = "events.parquet"
    with pytest.raises(TraceFormatError, match="damaged") as e:
        Store(small_store).load(1)
    assert where in str(e.value)
    r = cli("summary", str(small_store), "--json")
    assert r.returncode == 1 and "damaged" in r.stderr and "Traceback" not in r.stderr


def test_a_ranks_folder_given_for_a_trace_says_how_to_take_that_rank(small_store):
    """``STORE/rank=1`` (what a user sees in the store) given to a command: the error names
    it as rank 1's folder and the commands that take that rank, each of which works
    (before: summary read its counters.parquet as an event table and failed on it; sql
    said to convert the folder into a store)."""
    folder = small_store / "rank=1"
    for args in (["summary", str(folder)], ["report", str(folder), "-o", str(small_store.parent / "r.html")],
                 ["sql", str(folder), "SELECT 1"]):
        r = cli(*args)
        assert r.returncode != 0 and r.stderr.count("\n") == 1, r.stderr
        assert f"{folder}: rank 1's folder in the store {small_store}" in r.stderr, r.stderr
        assert "--rank 1" in r.stderr and "WHERE rank = 1" in r.stderr
    r = cli("sql", str(small_store), "SELECT count(*) AS n FROM events WHERE rank = 1", "--csv")
    rank1 = load_rank(polyprof.load_ranks(small_store).entry(1))
    assert r.returncode == 0 and int(r.stdout.split()[1]) == len(rank1.events["name"]), r.stderr
    with pytest.raises(PolyprofError, match="rank 1's folder in the store"):
        polyprof.load_ranks(folder)


def test_any_concurrent_futures_executor(small_store):
    base = to_json(summary(small_store))
    with cf.ThreadPoolExecutor(2) as ex:
        assert to_json(summary(small_store, ex)) == base
    assert to_json(summary(small_store, None, jobs=2)) == base  # local processes
    with pytest.raises(PolyprofError, match="not an executor"):
        summary(small_store, object())


def test_cli_convert_summary_and_dask_local(tmp_path):
    """8 ranks made from one real trace; the store's summary with and without a Dask
    LocalCluster of 2 workers; rank 0 equals the single-file summary."""
    src = KINETO / "sampled_rank0.json.gz"
    ranks = [tmp_path / f"rank-{i}.json.gz" for i in range(8)]
    for r in ranks:
        shutil.copy(src, r)
    store = tmp_path / "store"
    r = cli("convert", *map(str, ranks), "-o", str(store))
    assert r.returncode == 0, r.stderr
    plain = cli("summary", str(store), "--json")
    assert plain.returncode == 0, plain.stderr
    doc = json.loads(plain.stdout)
    assert doc["overview"]["rank_ids"] == list(range(8))
    job = {"rank_alignment", "stragglers", "straggler_collectives", "collective_stats",
           "transfers"}  # the job's, not per rank
    assert cli("summary", *map(str, ranks), "--json").stdout == plain.stdout  # the files: the same document
    assert job <= set(doc["tables"])
    assert all(t["columns"][0] == "rank" for name, t in doc["tables"].items() if name not in job)
    assert {r["rank"] for r in doc["tables"]["rank_alignment"]["records"]} == set(range(8))
    single = json.loads(cli("summary", str(src), "--json").stdout)
    k = doc["tables"]["kernel_breakdown"]
    assert _same([{c: v for c, v in rec.items() if c != "rank"} for rec in k["records"] if rec["rank"] == 0],
                 single["tables"]["kernel_breakdown"]["records"])
    dask = cli("summary", str(store), "--json", "--dask", "local", timeout=240)
    assert dask.returncode == 0, dask.stderr
    assert json.loads(dask.stdout) == doc
    again = cli("convert", *map(str, ranks[:2]), "-o", str(tmp_path / "d"), "--dask", "local", timeout=240)
    assert again.returncode == 0, again.stderr
    assert "INFO" not in again.stderr and "INFO" not in dask.stderr  # Dask's own log lines only with -v
    assert Store(tmp_path / "d").ranks == [0, 1]


def test_cli_sql_report_export_on_a_store(small_store, tmp_path):
    r = cli("sql", str(small_store), "SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank", "--csv")
    assert r.returncode == 0, r.stderr
    n0, n1 = (polyprof.load(KINETO / f"sampled_rank{i}.json.gz").n_events for i in (0, 1))
    assert r.stdout.split() == ['"rank","n"', f"0,{n0}", f"1,{n1}"]
    out = tmp_path / "r1.polyprof"
    r = cli("export", str(small_store), "--rank", "1", "-f", "polyprof", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert polyprof.load(out).n_events == n1
    r = cli("report", str(small_store), "--rank", "5", "-o", str(tmp_path / "x.html"))
    assert r.returncode == 1 and "--rank 5" in r.stderr
    r = cli("summary", str(small_store))
    assert r.returncode == 0 and "2 ranks" in r.stdout


def test_cli_diff_of_stores_equals_diff_of_rank_files(tmp_path):
    a_files = tmp_path / "a"
    a_files.mkdir()
    for i in (0, 1):
        shutil.copy(KINETO / f"sampled_rank{i}.json.gz", a_files / f"rank{i}.json.gz")
    b_file = KINETO / "sampled_rank1.json.gz"
    convert(sorted(a_files.iterdir()), tmp_path / "sa")
    convert([b_file], tmp_path / "sb")
    by_files = cli("diff", str(a_files), str(b_file), "--json")
    by_store = cli("diff", str(tmp_path / "sa"), str(tmp_path / "sb"), "--json")
    assert by_files.returncode == 0 and by_store.returncode == 0, by_store.stderr
    x, y = json.loads(by_files.stdout), json.loads(by_store.stdout)
    for doc in (x, y):
        for side in ("a", "b"):
            doc["overview"][side].pop("paths")
    assert x["overview"]["a"]["traces"] == 2
    assert x == y


def test_summary_leaves_text_stats_undecoded(small_store):
    """A rank's stats other than the well-known keys are read only when something asks for
    them, key by key (a summary reads only what its analyses look up, for their rows)."""
    trace = Store(small_store).load(0)
    assert trace.stats.pending == 1
    build(trace)
    assert trace.stats.pending == 1, "the summary decoded every text stat of a store rank"
    assert "correlation_id" in trace.stats.loaded() and "Sequence number" not in trace.stats.loaded()
    want = polyprof.load(KINETO / "sampled_rank0.json.gz").stats["Ev Idx"]
    got = trace.stats["Ev Idx"]  # that column alone
    assert np.array_equal(got.rows, want.rows) and got.values.tolist() == want.values.tolist()
    assert "Sequence number" not in trace.stats.loaded() and trace.stats.pending == 1
    rows = want.rows[::7]
    mask, values = trace.stats.lookup_rows(["Sequence number"], rows)["Sequence number"]
    orig = polyprof.load(KINETO / "sampled_rank0.json.gz").stats["Sequence number"]
    inside = set(rows.tolist())
    assert int(mask.sum()) == len(values) > 0
    assert values.tolist() == [v for r, v in zip(orig.rows.tolist(), orig.values.tolist()) if r in inside]
    assert len(trace.stats) and trace.stats.pending == 0 and "Sequence number" in trace.stats.loaded()


def test_load_ranks_of_a_store_equals_load_ranks_of_the_files(small_store):
    """One job type over both: the same ranks, labels, per-rank tables (event rows
    included), alignment and straggler tables, findings and overview."""
    files = [KINETO / "sampled_rank0.json.gz", KINETO / "sampled_rank1.json.gz"]
    a = polyprof.load_ranks(files).analyze("serial")
    b = polyprof.load_ranks(small_store).analyze("serial")
    assert [(e.rank, e.how, e.label) for e in polyprof.load_ranks(small_store).entries] == \
        [(e.rank, e.how, e.label) for e in polyprof.load_ranks(files).entries]
    assert set(a.tables) == set(b.tables) and len(a.tables) > 5
    for name in a.tables:
        assert _columns(a.tables[name]) == _columns(b.tables[name]), name
    assert [f.to_dict() for f in a.findings] == [f.to_dict() for f in b.findings]
    assert orjson.dumps(a.overview, option=orjson.OPT_NON_STR_KEYS) == \
        orjson.dumps(b.overview, option=orjson.OPT_NON_STR_KEYS)


def _columns(table) -> dict:
    """A table (a Table or a DataFrame, through the Table API) as plain column lists."""
    from polyprof.analyze.frames import column, labels

    return {c: [None if isinstance(v, float) and v != v else v for v in column(table, c).tolist()]
            for c in labels(table)}


def test_summary_and_report_of_a_directory_and_of_its_store_are_the_same(tmp_path):
    """What a user sees: `summary DIR --json` and `summary STORE --json` (the same ranks,
    converted) are one document, byte for byte; the terminal summary and the HTML page too."""
    d = tmp_path / "job"
    d.mkdir()
    for i in (0, 1):
        shutil.copy(KINETO / f"sampled_rank{i}.json.gz", d)
    store = tmp_path / "job.store"
    assert cli("convert", str(d), "-o", str(store)).returncode == 0
    for args in (["--json"], ["--json", "--all-steps", "-j", "1"], []):
        x, y = cli("summary", str(d), *args), cli("summary", str(store), *args)
        assert x.returncode == 0 and y.returncode == 0, (x.stderr, y.stderr)
        assert x.stdout == y.stdout, args
    doc = json.loads(cli("summary", str(store), "--json").stdout)
    assert [r["file"] for r in doc["tables"]["rank_overview"]["records"]] == \
        ["sampled_rank0.json.gz", "sampled_rank1.json.gz"]
    assert cli("report", str(d), "-o", str(tmp_path / "d.html")).returncode == 0
    assert cli("report", str(store), "-o", str(tmp_path / "s.html")).returncode == 0
    assert (tmp_path / "d.html").read_bytes() == (tmp_path / "s.html").read_bytes()


def test_the_store_is_the_format_only():
    """store/ imports nothing of the job (ranks/) nor of the command line (cli/), not even
    inside a function: it writes, reads a rank and gives SQL views, nothing else."""
    import ast

    pkg = ROOT / "src" / "polyprof" / "store"
    for f in sorted(pkg.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = ("." * node.level) + (node.module or "")
                assert not mod.startswith(("..ranks", "..cli", "polyprof.ranks", "polyprof.cli")), (f.name, mod)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith(("polyprof.ranks", "polyprof.cli")) for a in node.names), f.name


def test_a_rank_is_written_a_row_group_at_a_time_with_every_stat(tmp_path):
    """``write_rank`` builds events.parquet one row group at a time: stats that are
    sparse, texts, bytes and numbers, one named like a base column ("track") and one
    named like its renamed column ("stat.track"), each land on their events across row
    groups, and the rank reads back as the trace it was, in any row-group size."""
    from polyprof.store.rankfiles import read_rank, write_rank
    from polyprof.trace.builder import TraceBuilder

    b = TraceBuilder()
    t = b.track(b.plane("/host:CPU"), "main")
    n = 23
    start = np.array([(7 * i) % n for i in range(n)], np.int64) * 10  # not in time order
    b.events(t, np.array(["op"] * n, object), start, np.full(n, 5, np.int64))
    b.add_stat("stat.track", np.array([0, 5]), np.array(["a", "b"], object))  # before "track" here
    b.add_stat("track", np.array([1, 4, 22]), np.array([10, 40, 220]))
    b.add_stat("blob", np.array([3]), np.array([b"\x00\x01"], object))
    b.add_stat("ratio", np.arange(n), np.linspace(0, 1, n))
    trace = b.build()
    for rows in (4, 23, 1000):
        d = tmp_path / f"r{rows}"
        info = write_rank(trace, d, chunk_rows=rows)
        assert pq.ParquetFile(d / "events.parquet").metadata.num_row_groups == -(-n // rows)
        got = read_rank(d)
        assert sorted(got.stats) == sorted(trace.stats) and info["events"] == n
        for key in trace.stats:
            assert _dense(got, key).tolist() == _dense(trace, key).tolist(), (rows, key)
        assert np.array_equal(got.events["start_ns"], trace.events["start_ns"])


def test_polars_and_pandas_read_a_ranks_events(all_store):
    """A rank's events.parquet (here in row groups of 4096 events) read by polars and
    pandas: every event, the per-name totals polyprof has, and as categories of each
    text column only the values it holds."""
    pl = pytest.importorskip("polars")
    import pandas as pd

    rank = next(i for i, p in enumerate(TRACES) if p.name == "a100_nccl_rank0.json.gz")
    trace = polyprof.load(TRACES[rank])
    path = Store(all_store).path(rank) / "events.parquet"
    assert pq.ParquetFile(path).metadata.num_row_groups > 1
    want: dict[str, tuple[int, int]] = {}
    for name, dur in zip(trace.names().tolist(), trace.events["dur_ns"].tolist()):
        n, d = want.get(name, (0, 0))
        want[name] = (n + 1, d + dur)
    for df in (pl.read_parquet(path), pl.scan_parquet(path).collect()):
        assert df.height == trace.n_events
        got = df.group_by("name").agg(pl.len(), pl.col("dur_ns").sum())
        assert {r[0]: (r[1], r[2]) for r in got.iter_rows()} == want
    df = pd.read_parquet(path)
    assert sorted(df["category"].cat.categories) == sorted(set(trace.categories().tolist()))
    assert sorted(df["name"].cat.categories) == sorted(want)
