"""Ranks without collectives placed by their wall-clock anchors (Nsight Systems), and
ranks with no anchor not said to be on the wall clock.

Nsight's times count from each session's start (every export's first events are a few
hundred ms in), so ranks kept "as recorded" were stacked at their session starts while
the summary said it had used the wall clock. The job here is made of the real export
``tests/data/nsys/saxpy_2022.sqlite`` (hpcgroup/pipit, MIT: ``tests/data/nsys/LICENSE-pipit``)
twice, the second copy's session started 2.596 s later (its
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` moved, as two runs of one program an
auditor exported were): the same program, one rank after the other on the wall clock. The
``nsys stats`` CSV reports of that export (``tests/data/nsys_csv``) carry no anchor.
"""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

import polyprof
from polyprof.formats import sqlite_db
from polyprof.formats.nsys import schema
from polyprof.formats.nsys.anchor import session_anchor
from polyprof.ranks.align import align_ranks
from polyprof.ranks.collectives import collective_table

DATA = Path(__file__).resolve().parent / "data"
REAL = DATA / "nsys" / "saxpy_2022.sqlite"
CSV = DATA / "nsys_csv" / "saxpy_2022_stats_stdout.txt"
LATER_NS = 2_596_000_000  # the second session's start, after the first's


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(REAL, job / "rank0.sqlite")
    shutil.copy(REAL, job / "rank1.sqlite")
    with sqlite3.connect(job / "rank1.sqlite") as c:
        c.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (LATER_NS,))
    return job


def _alignment(rep) -> dict[int, dict]:
    return {int(r["rank"]): r for r in rep.tables["rank_alignment"].to_pandas().to_dict("records")}


def _summary(*paths: Path) -> str:
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", *map(str, paths)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_nsight_ranks_without_collectives_are_placed_by_their_session_starts(tmp_path):
    """Rank 1 lies 2.596 s after rank 0 on the wall clock: the alignment says so (before:
    offset 0, "recorded clock", "times kept as recorded (wall clock; ...)"), the merged
    trace puts its events there, and a store of the job gives the same."""
    job = _job(tmp_path)
    ts = polyprof.load_ranks(job)
    al = _alignment(ts.analyze("serial"))
    one = al[1]
    assert one["method"] == "wall anchors" and not one["aligned"] and math.isnan(one["bound_ns"]), one
    assert int(one["offset_ns"]) == LATER_NS, one
    assert "placed by their wall-clock anchors, read on one host, nid001608" in one["message"], one["message"]
    assert "wall clock;" not in one["message"]

    m = ts.merged("serial")
    first = {s.rank: int(m.start_ns[m.event_sources() == s.id].min()) for s in m.sources}
    alone = polyprof.load(REAL).span_ns[0]
    assert first == {0: alone, 1: alone + LATER_NS}, first

    head = _summary(job).splitlines()[0]
    assert "so rank 1 is placed by its wall-clock anchor" in head and "(wall clock)" not in head, head

    store = polyprof.load_ranks(job).convert(tmp_path / "store")
    assert int(_alignment(polyprof.load_ranks(store).analyze("serial"))[1]["offset_ns"]) == LATER_NS


def test_nsys_stats_csv_ranks_are_not_said_to_be_on_the_wall_clock(tmp_path):
    """``nsys stats`` CSV reports hold no session start: their ranks stay as recorded and
    the summary says each is on its own clock (before: "... (wall clock)")."""
    for r in (0, 1):
        shutil.copy(CSV, tmp_path / f"rank{r}.txt")
    paths = [tmp_path / f"rank{r}.txt" for r in (0, 1)]
    one = _alignment(polyprof.load_ranks(paths).analyze("serial"))[1]
    assert one["method"] == "own clock" and int(one["offset_ns"]) == 0, one
    assert "ranks 0 and 1 have no wall-clock anchor" in one["message"] and "wall clock;" not in one["message"]
    text = _summary(*paths)
    assert "(wall clock)" not in text and "on its own clock (no wall-clock anchor)" in text.splitlines()[0]


def test_a_rank_on_the_wall_clock_and_an_anchored_one_line_up():
    """A Kineto rank (times are the wall clock: identity anchor) and an Nsight rank (times
    from its session start, anchored): the Nsight rank's times move by its session start."""
    empty = collective_table(polyprof.load(REAL))
    assert not len(empty)
    anchor = polyprof.load(REAL).metadata["wall_anchor"]
    clocks = align_ranks({0: empty, 1: empty}, {1: anchor}, {0: False, 1: True})
    assert clocks[1].fit.method == "wall anchors" and clocks[1].fit.offset_ns == anchor["wall_ns"]
    clocks = align_ranks({0: empty, 1: empty}, {0: anchor}, {0: True, 1: False})
    assert clocks[1].fit.offset_ns == -anchor["wall_ns"]


CLOVER = DATA / "nsys" / "cloverleaf_2024.sqlite"  # its META_DATA_EXPORT states how its times were written


def _variant(src: Path, dst: Path, move_ns: int, *sql: str) -> Path:
    """A copy of ``src`` with every event time moved by ``move_ns`` and ``sql`` run."""
    shutil.copy(src, dst)
    with sqlite3.connect(dst) as c:
        for (t,) in list(c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")):
            cols = {r[1] for r in c.execute(f'PRAGMA table_info("{t}")')}
            if {"start", "end"} <= cols:
                c.execute(f'UPDATE "{t}" SET start = start + ?, "end" = "end" + ?', (move_ns, move_ns))
        for q in sql:
            c.execute(q)
    return dst


def _on_wall(t) -> np.ndarray:
    an = t.metadata["wall_anchor"]
    return np.sort(t.start_ns - an["mono_ns"] + an["wall_ns"])


def test_a_capture_begun_late_keeps_the_session_start_at_time_0(tmp_path):
    """An export counts from the session start whatever ``systemClockNs`` (the start on
    the system clock) is: a capture begun 30 min into the session (a capture range,
    ``--delay``) on a node booted 25 min before the session is not on the system clock
    (before: its first event, past ``systemClockNs``, made the anchor pair ``systemClockNs``
    with the start, and put the capture 5 min after the session start instead of 30)."""
    plain = polyprof.load(CLOVER)
    late = 30 * 60 * 1_000_000_000 - int(plain.start_ns.min())
    boot = 25 * 60 * 1_000_000_000
    t = polyprof.load(_variant(CLOVER, tmp_path / "late.sqlite", late,
                               "ALTER TABLE TARGET_INFO_SESSION_START_TIME ADD COLUMN systemClockNs INTEGER",
                               f"UPDATE TARGET_INFO_SESSION_START_TIME SET systemClockNs = {boot}"))
    wall = plain.metadata["wall_anchor"]["wall_ns"]
    assert t.metadata["wall_anchor"] == {"mono_ns": 0, "wall_ns": wall, "uncertainty_ns": 0}
    assert int(_on_wall(t)[0]) - wall == 30 * 60 * 1_000_000_000
    assert t.metadata["clock"] == "nsys session time (ns since the session start)"


def test_an_export_normalized_or_shifted_is_anchored_as_its_metadata_says(tmp_path):
    """``nsys export --ts-normalize=true`` writes UTC times, ``--ts-shift`` moves every
    time; the export's metadata says so (``EXPORT_PARAM_TIME_NORMALIZE``,
    ``EXPORT_PARAM_TIME_SHIFT``) and the anchor follows: every event at the same
    wall-clock time as in the export as written by default."""
    plain = polyprof.load(CLOVER)
    wall = plain.metadata["wall_anchor"]["wall_ns"]
    assert plain.metadata["wall_anchor"] == {"mono_ns": 0, "wall_ns": wall, "uncertainty_ns": 0}
    shift = 123_456_789
    param = "UPDATE META_DATA_EXPORT SET value = '{}' WHERE name = 'EXPORT_PARAM_TIME_{}'"
    utc = polyprof.load(_variant(CLOVER, tmp_path / "utc.sqlite", wall + shift, param.format("true", "NORMALIZE"),
                                 param.format(shift, "SHIFT")))
    moved = polyprof.load(_variant(CLOVER, tmp_path / "moved.sqlite", -shift, param.format(-shift, "SHIFT")))
    assert utc.metadata["wall_anchor"] == {"mono_ns": wall + shift, "wall_ns": wall, "uncertainty_ns": 0}
    assert utc.metadata["clock"] == f"nsys UTC time (ns since the epoch), shifted by {shift} ns"
    assert moved.metadata["wall_anchor"]["mono_ns"] == -shift
    assert all(s.clock["wall_anchor"] == utc.metadata["wall_anchor"] for s in utc.sources)
    for t in (utc, moved):
        assert t.n_events == plain.n_events and np.array_equal(_on_wall(t), _on_wall(plain))
    with sqlite3.connect(f"file:{REAL}?mode=ro", uri=True) as c:  # 2022: no such metadata, the default
        assert session_anchor(c, schema.inspect(c, sqlite_db.schema(c)))["mono_ns"] == 0
