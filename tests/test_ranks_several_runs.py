"""A directory that holds several runs of one job (ranks/sources.py: ``several_runs``), on
real recordings: tests/data/traces/gloo_ddp holds three runs of a 2-rank DDP job on gloo
(``even``, ``late``, ``mid``: each file's ``distributedInfo`` says rank 0 or 1 of
``world_size`` 2), tests/data/traces/gloo_late_ranks two runs of a 4-rank job
(``one_late``, ``two_late``).

Before, ``polyprof summary gloo_ddp`` read the six files as one job of 6 ranks,
numbered by the order of the file names, aligned two of them and named "rank 0" (the
``even`` run's rank 0) the straggler across unrelated runs; the only hint was a log
warning, and ``--json`` said nothing. The ``late`` run's straggler is its rank 1. Now
the job is refused, naming each run's files and how to give one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import PolyprofError

TRACES = Path(__file__).parent / "data" / "traces"
DDP = TRACES / "gloo_ddp"
LATE_RANKS = TRACES / "gloo_late_ranks"


def _summary(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polyprof", "summary", *args, "-j", "1"], capture_output=True,
                          text=True, timeout=300)


def test_a_directory_of_three_runs_is_refused_naming_each_run():
    for json_out in ((), ("--json",)):
        r = _summary(str(DDP), *json_out)
        assert r.returncode != 0 and not r.stdout, (r.stdout[:500], r.stderr[-2000:])
        err = r.stderr
        assert "6 traces name ranks 0-1" in err and "several runs" in err, err
        for run in ("even", "late", "mid"):
            assert f"{run}.rank*.pt.trace.json.gz (ranks 0-1)" in err, err
        assert f"{DDP}/even.rank*.pt.trace.json.gz" in err and "--rank-by order" in err, err
        assert "straggler" not in err


def test_the_api_refuses_two_runs_of_a_4_rank_job():
    with pytest.raises(PolyprofError) as e:
        polyprof.load_ranks(LATE_RANKS)
    msg = str(e.value)
    assert msg.startswith(f"{LATE_RANKS}: 8 traces name ranks 0-3"), msg
    assert "one_late.rank*.polyprof (ranks 0-3), two_late.rank*.polyprof (ranks 0-3)" in msg, msg


def test_one_run_given_is_its_job_and_its_straggler_is_rank_1():
    """What the refusal says to do: the ``late`` run's files (the glob it names) are the
    2-rank job whose rank 1 slept 50 ms in steps 3-5."""
    r = _summary(*sorted(str(p) for p in DDP.glob("late.rank*.pt.trace.json.gz")), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["overview"]["rank_ids"] == [0, 1]
    (s,) = [f for f in doc["findings"] if f["id"] == "straggler"]
    assert s["title"].startswith("rank 1 is the straggler"), s["title"]


def test_rank_by_order_still_reads_them_as_one_job():
    """Asked for explicitly, the order given numbers them: the user's choice, not a guess."""
    ts = polyprof.load_ranks(DDP, rank_by="order")
    assert ts.ranks == list(range(6)) and {e.how for e in ts.entries} == {"order"}


def test_copies_numbered_by_their_file_names_stay_a_job(tmp_path):
    """Files whose names number them apart (tests that make a job of one rank's copies,
    or ranks of two runs renamed ``r0`` ... ``r3``) keep the names' numbers: the user
    numbered them."""
    for r in (0, 1):
        shutil.copy(DDP / "late.rank0.pt.trace.json.gz", tmp_path / f"rank{r}.pt.trace.json.gz")
    ts = polyprof.load_ranks(tmp_path)
    assert ts.ranks == [0, 1] and {e.how for e in ts.entries} == {"file name"}


def test_captures_whose_names_number_no_ranks_are_several_runs(tmp_path):
    """Three captures of one process (each file rank 0), named ``decode_gpu_10``,
    ``_20`` and ``_100`` (nano-vllm's profiles of 10, 20 and 100 decode steps): the names'
    numbers, not counting from 0, are no ranks. Before, a job of ranks 10, 20 and 100,
    "not aligned", each "not joined" on the critical path."""
    for n in (10, 20, 100):
        shutil.copy(DDP / "late.rank0.pt.trace.json.gz", tmp_path / f"decode_gpu_{n}.pt.trace.json.gz")
    with pytest.raises(PolyprofError) as e:
        polyprof.load_ranks(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path}: 3 traces name rank 0, each 3 times (their distributedInfo): several runs"), msg
    assert "the numbers in their file names (10, 20, 100) do not count ranks from 0" in msg, msg
    assert polyprof.load_ranks(tmp_path, rank_by="order").ranks == [0, 1, 2]


def test_one_run_in_a_directory_is_not_refused(tmp_path):
    """One run's files, each naming its own rank, are one job, as before."""
    for r in (0, 1):
        shutil.copy(DDP / f"mid.rank{r}.pt.trace.json.gz", tmp_path / f"mid.rank{r}.pt.trace.json.gz")
    ts = polyprof.load_ranks(tmp_path)
    assert ts.ranks == [0, 1] and {e.how for e in ts.entries} == {"distributedInfo"}


def test_runs_whose_names_number_nothing_are_named_by_rank(tmp_path):
    """Files whose names hold no rank number: the refusal lists the files that name each
    rank more than once."""
    for run, name in (("even", "first"), ("late", "second")):
        shutil.copy(DDP / f"{run}.rank0.pt.trace.json.gz", tmp_path / f"{name}.pt.trace.json.gz")
    with pytest.raises(PolyprofError) as e:
        polyprof.load_ranks(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path}: 2 traces name rank 0, each twice"), msg
    assert "rank 0: first.pt.trace.json.gz, second.pt.trace.json.gz. Give one run's files" in msg, msg


def test_traces_in_memory_given_as_a_list_are_numbered_as_given():
    """A list of Traces (a test's two copies of one rank) has no file names: the order
    given numbers them, as before, and nothing is refused."""
    t = polyprof.load(DDP / "late.rank0.pt.trace.json.gz")
    ts = polyprof.load_ranks([t, t])
    assert ts.ranks == [0, 1] and {e.how for e in ts.entries} == {"order"}


def test_workers_numbered_by_their_names_keep_them_beside_a_driver_file(tmp_path, capsys):
    """A Dask job as docs/capture.md writes it: ``worker-0.polyprof`` and
    ``worker-1.polyprof`` from the workers and the driver's ``driver.polyprof`` beside
    them, none naming a rank in its data. Before, one name without a number put every
    file in the order given: the driver rank 0, the workers renumbered 1 and 2."""
    src = TRACES / "kineto" / "triton_example.json.gz"
    for name in ("driver", "worker-0", "worker-1"):
        shutil.copy(src, tmp_path / f"{name}.json.gz")
    from polyprof.cli import main

    assert main(["summary", str(tmp_path), "--json", "-j", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)["tables"]["rank_overview"]["records"]
    assert [(r["rank"], Path(r["file"]).name, r["rank_from"]) for r in rows] == [
        (0, "worker-0.json.gz", "file name"), (1, "worker-1.json.gz", "file name"), (2, "driver.json.gz", "order")]


def test_a_directory_of_job_directories_names_them(tmp_path):
    """``polyprof summary runs/`` where runs/a/ and runs/b/ each hold a job: "no trace files
    in this directory" alone before; now it names them and how to read them."""
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        shutil.copy(TRACES / "kineto" / "triton_example.json.gz", tmp_path / run / "rank0.json.gz")
    r = _summary(str(tmp_path))
    assert r.returncode == 1 and f"{tmp_path}: no trace files in this directory, but its subdirectories a/, b/ hold " \
        "some: give one of them (a job's ranks), or two to `polyprof diff`" in r.stderr, r.stderr


def test_ranks_of_two_runs_given_as_one_job_are_said_not_to_overlap(capsys):
    """Rank 0 of one run and rank 1 of another (gloo_ddp's even and late runs, minutes
    apart): their collectives match none of each other's, and the advice was to record
    the same steps on every rank (same profiler schedule), which would not help."""
    from polyprof.cli import main

    assert main(["summary", str(DDP / "even.rank0.pt.trace.json.gz"), str(DDP / "late.rank1.pt.trace.json.gz"),
                 "--json", "-j", "1"]) == 0
    (f,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "ranks_not_aligned"]
    assert "the collectives of rank 1 were recorded at other times than the reference rank's (their recordings " \
        "do not overlap: files of different runs given as one job)" in f["suggestion"], f["suggestion"]
    assert "same profiler schedule" not in f["suggestion"]
