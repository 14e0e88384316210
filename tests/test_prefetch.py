"""Reading ranks ahead while the analyses import (ranks/executor.py), on ranks made from
the real A100 NCCL trace: what the reader hands over is the trace a worker would read,
the ranks it read are only analysed, what it cannot read is read and reported by the
pool as before, and it leaves nothing behind."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import PolyprofError
from polyprof.ranks import executor as prefetch
from polyprof.ranks import load_ranks, traceset
from rankmaker import make_ranks
from test_kineto_differential import assert_same_trace


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory, traces_dir):
    out = tmp_path_factory.mktemp("prefetch")
    return make_ranks(traces_dir / "kineto" / "a100_nccl_rank0.json.gz", out, [0, 2_000_000, -1_500_000, 900_000],
                      {1: 250.0}, jitter_us=10.0)


def _wait_for(pre: prefetch.ReadAhead, n: int, timeout: float = 120.0) -> None:
    """Until the reader has finished ``n`` ranks (bounded)."""
    end = time.monotonic() + timeout
    while len(list(pre.dir.glob("*.pickle"))) < n:
        assert time.monotonic() < end, "the reader finished too few ranks in time"
        assert pre.proc.is_alive() or len(list(pre.dir.glob("*.pickle"))) >= n
        time.sleep(0.02)


def test_the_reader_hands_over_the_traces_a_worker_would_read(four_ranks):
    ts = load_ranks(four_ranks)
    pre = traceset.read_ahead(ts.entries)
    try:
        _wait_for(pre, 2)
        got = pre.take()
        assert len(got) >= 2
        prefetch.use(got)
        for e in ts.entries:
            if str(e.path) in got:
                read = prefetch.read_ahead(e.path)
                assert read is not None and read.stats.pending == 1  # the args came over as text
                assert not got[str(e.path)].exists()  # a pickle goes once loaded
                assert prefetch.read_ahead(e.path) is None  # and is loaded once
                direct = traceset.load_rank(e)
                assert_same_trace(read, direct)
                assert [(s.rank, s.label) for s in read.sources] == [(s.rank, s.label) for s in direct.sources]
    finally:
        prefetch.release()
        pre.close()
    assert not pre.dir.exists()


def test_a_pickle_gone_or_broken_is_read_from_the_file(four_ranks):
    want = [load_ranks(four_ranks).load(r).n_events for r in range(4)]
    ts = load_ranks(four_ranks)
    ts._ahead = pre = traceset.read_ahead(ts.entries)
    _wait_for(pre, 2)
    (pre.dir / "1.pickle").write_bytes(b"not a pickle")
    assert ts.table(_n_events, "serial")["n"].tolist() == want
    assert not pre.dir.exists() and not prefetch._READ
    pre = traceset.read_ahead(ts.entries)
    try:
        _wait_for(pre, 1)
        got = pre.take()
        prefetch.use(got)
        got[str(ts.entries[0].path)].unlink()
        assert prefetch.read_ahead(ts.entries[0].path) is None
    finally:
        prefetch.release()
        pre.close()


def test_the_ranks_read_ahead_are_only_analysed_and_agree(four_ranks, monkeypatch):
    fn = polyprof.analyze.kernel_breakdown
    plain = load_ranks(four_ranks).table(fn, "serial")
    ts = load_ranks(four_ranks)
    ts._ahead = traceset.read_ahead(ts.entries)  # pandas is imported here: worth_it() would say no
    _wait_for(ts._ahead, 2)
    reads = []
    real = traceset.load_rank
    monkeypatch.setattr(traceset, "load_rank", lambda e: reads.append(e.rank) or real(e))
    ahead = ts.table(fn, "serial")
    assert ahead.equals(plain)
    assert len(reads) <= 2  # at least two ranks came from the reader, not from a read here
    assert not prefetch._READ and ts._ahead is None


def test_the_reader_stops_at_its_budget_and_its_folder_goes_with_it(four_ranks, monkeypatch):
    monkeypatch.setattr(prefetch, "MAX_BYTES", 1)  # one rank's pickle is over it
    pre = traceset.read_ahead(load_ranks(four_ranks).entries)
    folder = pre.dir
    pre.proc.join(timeout=120)
    assert pre.proc.exitcode == 0 and sorted(p.name for p in folder.iterdir()) == ["0.pickle"]
    del pre  # never taken nor closed: the folder is removed when the prefetch goes
    import gc

    gc.collect()
    assert not folder.exists()


def _n_events(trace):
    import pandas as pd

    return pd.DataFrame({"n": [trace.n_events]})


def test_a_file_the_reader_cannot_read_is_read_and_reported_by_the_pool(tmp_path, four_ranks):
    bad = tmp_path / "rank-1.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "ts": '))
    ts = load_ranks([four_ranks[0], bad, four_ranks[2]])
    ts._ahead = pre = traceset.read_ahead(ts.entries)
    _wait_for(pre, 1)
    pre.proc.join(timeout=120)  # it stops at the bad file, having read the one before
    assert pre.proc.exitcode == 0 and len(list(pre.dir.glob("*.pickle"))) == 1
    with pytest.raises(PolyprofError, match=r"rank 1 \(rank-1.json.gz\)"):
        ts.map(_n_events, "serial")  # rank 1 is read from its file, and fails
    assert not pre.dir.exists()


def test_no_reader_where_it_cannot_help(four_ranks):
    """Only before pandas is imported (the window it fills), for two ranks or more read
    from files, and for executors that see this process's memory."""
    code = ("import sys\nfrom polyprof.ranks import load_ranks\nfrom polyprof.ranks import executor as prefetch\n"
            f"ts = load_ranks({[str(p) for p in four_ranks]!r})\n"
            "one = load_ranks([ts.entries[0].path])\n"
            "print(prefetch.worth_reading_ahead([e.path for e in ts.entries]), "
            "prefetch.worth_reading_ahead([e.path for e in one.entries]))\n"
            "from concurrent.futures import ProcessPoolExecutor\nimport multiprocessing as mp\n"
            "ex = ProcessPoolExecutor(2, mp_context=mp.get_context('forkserver'))\n"
            "ts.prefetch(ex); print(ts._ahead is None)\n"
            "import pandas\nprint(prefetch.worth_reading_ahead([e.path for e in ts.entries]))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "False", "True", "False"]


def test_summary_of_ranks_reads_ahead_agrees_and_leaves_nothing(four_ranks, tmp_path):
    shm = Path("/dev/shm")
    p = subprocess.Popen([sys.executable, "-m", "polyprof", "-vv", "summary", *map(str, four_ranks), "--json",
                          "--all-steps"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert "ranks read ahead" in err  # the reader ran (how many it read depends on the machine)
    # its folder is named by its pid (other processes on the machine may be reading ahead now)
    for where in (shm, Path(tempfile.gettempdir())):
        assert not list(where.glob(f"polyprof-prefetch-{p.pid}-*")), where
    from polyprof.report.tables import to_json

    from polyprof.analyze.window import Window

    # --all-steps: every step, up to the last one's end
    want = json.loads(to_json(load_ranks(four_ranks).analyze("serial", window=Window(skip_first=0))))
    got = json.loads(out)
    assert got["tables"].keys() == want["tables"].keys()
    for name, table in want["tables"].items():
        assert got["tables"][name] == table, name


@pytest.mark.parametrize("kind", ["xspace", "native"])
def test_other_formats_come_over_whole(tmp_path, traces_dir, four_ranks, kind):
    """An XSpace rank (its deferred stats do not pickle: decoded first) and a .polyprof
    rank come over from the reader as the trace a worker reads from the file."""
    import shutil

    if kind == "xspace":
        paths = [tmp_path / f"rank-{i}.xplane.pb" for i in range(2)]
        for p in paths:
            shutil.copy(traces_dir / "xspace" / "tpu_inference_2.xplane.pb", p)
    else:
        paths = [tmp_path / f"rank-{i}.polyprof" for i in range(2)]
        for src, p in zip(four_ranks, paths):
            polyprof.export(polyprof.load(src), p)
    ts = load_ranks(paths)
    pre = traceset.read_ahead(ts.entries)
    try:
        _wait_for(pre, 2)
        got = pre.take()
        prefetch.use(got)
        for e in ts.entries:
            read = prefetch.read_ahead(e.path)
            assert read is not None
            assert_same_trace(read, traceset.load_rank(e))
    finally:
        prefetch.release()
        pre.close()
