"""A directory of ranks whose sessions never stopped (killed workers) holds only their
crash journals, ``OUTPUT.partial``: each is its rank's trace, said in one warning (before,
"no trace files in this directory"). A finished ``OUTPUT`` beside its journal wins, and
an earlier run's kept journal (``OUTPUT.partial.1``) is no rank."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import polyprof

SEEDS = Path(__file__).resolve().parent / "data/corpus/seeds"
JOURNAL = SEEDS / "killed.polyprof.partial"  # a SIGKILLed `polyprof run`'s journal: 30 events
#: a finished trace (10 events) to save as a .polyprof
FINISHED = Path(__file__).resolve().parent / "data/traces/kineto/triton_example.json.gz"


def entries(directory: Path) -> list[tuple[int, str, str]]:
    return [(e.rank, e.how, e.label) for e in polyprof.load_ranks(directory).entries]


def test_a_directory_of_crash_journals_is_a_job(tmp_path, caplog):
    for r in (0, 1):
        shutil.copy(JOURNAL, tmp_path / f"worker-{r}.polyprof.partial")
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        assert entries(tmp_path) == [(0, "file name", "worker-0.polyprof.partial"),
                                     (1, "file name", "worker-1.polyprof.partial")]
    said = [r.getMessage() for r in caplog.records if "crash journal" in r.getMessage()]
    assert said == [f"{tmp_path}: worker-0.polyprof.partial, worker-1.polyprof.partial: read from the crash "
                    "journal, no finished trace beside it (the session never stopped: killed?): host data up to "
                    "the last flush only"]
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(tmp_path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "no trace files" not in r.stderr and "read from the crash journal" in r.stderr
    assert "polyprof summary: 2 ranks, 60 events" in r.stdout


def test_a_finished_trace_wins_over_its_journal(tmp_path, caplog):
    polyprof.load(FINISHED).save(tmp_path / "worker-0.polyprof")
    shutil.copy(JOURNAL, tmp_path / "worker-0.polyprof.partial")  # a journal left beside a finished trace
    shutil.copy(JOURNAL, tmp_path / "worker-1.polyprof.partial")  # a worker killed: its journal alone
    shutil.copy(JOURNAL, tmp_path / "worker-2.polyprof.partial.1")  # an earlier run's, kept: not a rank
    (tmp_path / "notes.txt.partial").write_text("not a journal\n")  # another program's .partial: not a rank
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        got = entries(tmp_path)
    assert [label for *_, label in got] == ["worker-0.polyprof", "worker-1.polyprof.partial"]
    assert [rank for rank, *_ in got] == [0, 1]
    said = [r.getMessage() for r in caplog.records if "crash journal" in r.getMessage()]
    assert len(said) == 1 and ": worker-1.polyprof.partial: read from the crash journal" in said[0]
    job = polyprof.load_ranks(tmp_path)
    assert [job.load(i).n_events for i in range(2)] == [10, 30]  # rank 0: the finished trace, not its journal


def test_a_directory_with_a_finished_trace_only_says_nothing_of_journals(tmp_path, caplog):
    for name in ("a", "b"):
        polyprof.load(FINISHED).save(tmp_path / f"{name}.polyprof")
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        assert [label for *_, label in entries(tmp_path)] == ["a.polyprof", "b.polyprof"]
    assert not [r for r in caplog.records if "crash journal" in r.getMessage()]
