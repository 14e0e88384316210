"""The crash journal of a ``--schedule`` run keeps its schedule (a killed scheduled run's
``.partial`` had no schedule metadata, so its summary analysed every step of the run,
the unrecorded steps between the cycles included). The header holds the plan; the
active stretches are journal records written as steps pass (a stretch's row again as
it grows and when it closes); the recovered trace's ``schedule`` has them, and the
summary analyses the recorded stretches as that of the same run stopped normally."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polyprof
from polyprof.trace import metadata_keys as mkeys

SRC = Path(__file__).resolve().parents[1] / "src"
SCHEDULE = "wait=2,warmup=1,active=2,repeat=3"  # cycles of 5 steps: 3-4, 8-9 and 13-14 recorded

#: STEPS polyprof.step() calls (step N begins at the N-th), each after 20 ms of work in a
#: section; the wait steps (0, 1 of each cycle: never recorded) sleep 150 ms more. Then,
#: after a journal flush (every 0.5 s), the program ends, or kills itself by SIGKILL
PROGRAM = """\
import os, signal, sys, time
import polyprof

steps, kill = int(sys.argv[1]), sys.argv[2] == "kill"
t0 = time.perf_counter()
for i in range(steps):
    with polyprof.section("work"):
        t = time.perf_counter() + 0.02
        while time.perf_counter() < t:
            pass
    if i % 5 in (0, 1):
        time.sleep(0.15)
    polyprof.step()
time.sleep(1.2)
if kill:
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_")}, "PYTHONPATH": str(SRC),
            "COLUMNS": "200"}


def _run(tmp_path: Path, out: str, steps: int, how: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "prog.py").write_text(PROGRAM)
    return subprocess.run([sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--schedule", SCHEDULE,
                           "--no-summary", "-o", out, "prog.py", str(steps), how], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=120)


def _overview(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(path)], capture_output=True,
                         text=True, env=_env(), timeout=240)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ss = doc["tables"]["section_stats"]["records"]
    return {**doc["overview"], "sections": {r["name"]: r["count"] for r in ss},
            "step_numbers": [r["step"] for r in doc["tables"]["step_stats"]["records"]]}


def _steps(t: polyprof.Trace) -> dict[int, tuple[int, int]]:
    """Step number -> (start, end) of a trace's step events."""
    return {int(n.split()[1]): (s, s + d) for n, s, d in zip(t.names().tolist(), t.events["start_ns"].tolist(),
                                                            t.events["dur_ns"].tolist()) if n.startswith("step ")}


def test_a_killed_scheduled_run_is_analysed_over_its_recorded_stretches(tmp_path: Path) -> None:
    """Killed by SIGKILL after two whole cycles (in the third's wait): the recovered
    trace's schedule is the finished run's, and its summary's analysed span, recorded
    share, steps and section counts are those of the same run stopped there normally,
    not the whole run's (before: steps 1-11, 11 sections, no recorded share)."""
    assert _run(tmp_path, "clean.polyprof", 12, "end").returncode == 0
    killed = _run(tmp_path, "killed.polyprof", 12, "kill")
    assert killed.returncode == -9, killed.stderr
    part = tmp_path / "killed.polyprof.partial"
    t, clean = polyprof.load(part), polyprof.load(tmp_path / "clean.polyprof")
    got, want = t.metadata.get(mkeys.SCHEDULE), clean.metadata[mkeys.SCHEDULE]
    assert isinstance(got, dict), t.metadata  # before: none
    assert got["recorded_steps"] == want["recorded_steps"] == [3, 4, 8, 9]
    assert {k: got[k] for k in ("wait", "warmup", "active", "repeat", "skip_first")} == \
        {"wait": 2, "warmup": 1, "active": 2, "repeat": 3, "skip_first": 0}
    assert len(got["windows_ns"]) == 2 and all(b > a > 0 for a, b in got["windows_ns"])
    ov, cov = _overview(part), _overview(tmp_path / "clean.polyprof")
    assert ov["sections"] == cov["sections"] == {"work": 4}  # before: 11 (every step's)
    assert ov["step_numbers"] == cov["step_numbers"] == [3, 4, 8, 9]
    # the span from step 3's start to step 9's end, of which the two stretches (steps 3-4
    # and 8-9) are recorded, in each trace (the two runs' times differ with the machine's load)
    for trace, o in ((t, ov), (clean, cov)):
        steps = _steps(trace)
        assert o["analysed_span_ns"] == steps[9][1] - steps[3][0]
        assert o["recorded_in_span_ns"] == steps[4][1] - steps[3][0] + steps[9][1] - steps[8][0]
        assert o["recorded_in_span_ns"] < 0.6 * o["analysed_span_ns"]
        assert "the steps the schedule recorded; the " in o["window"]
        assert "between its 2 recorded stretches is not analysed" in o["window"]
    # the whole run, as the journal read without its schedule was analysed
    del t.metadata[mkeys.SCHEDULE]
    polyprof.export(t, tmp_path / "whole.polyprof", format="polyprof")
    whole = _overview(tmp_path / "whole.polyprof")
    assert whole["sections"]["work"] == 11 and "recorded_in_span_ns" not in whole
    assert whole["analysed_span_ns"] > 1.8 * ov["analysed_span_ns"]


def test_a_stretch_open_at_the_kill_is_closed_at_the_journals_end(tmp_path: Path) -> None:
    """Killed in the third cycle's second active step: its stretch, open in the journal
    (written as it began and grew), ends at the recovered trace's end; its steps are
    recorded steps, those that ended before the kill analysed."""
    assert _run(tmp_path, "k.polyprof", 14, "kill").returncode == -9
    t = polyprof.load(tmp_path / "k.polyprof.partial")
    got = t.metadata[mkeys.SCHEDULE]
    assert got["recorded_steps"] == [3, 4, 8, 9, 13, 14]
    (a, b), = got["windows_ns"][2:]
    assert b == t.metadata[mkeys.SESSION]["stop_ns"] > a
    ov = _overview(tmp_path / "k.polyprof.partial")
    assert ov["step_numbers"] == [3, 4, 8, 9, 13] and ov["sections"] == {"work": 5}
    assert "between its 3 recorded stretches is not analysed" in ov["window"]


def _holding(out: Path, snap: Path, steps: int, closed: bool) -> polyprof.Trace:
    """A copy of ``out``'s live journal at ``snap`` once its schedule names ``steps``
    recorded steps (and the stretch's end, if ``closed``), as loaded (the journal's
    thread writes when the machine lets it)."""
    from polyprof.collect import journal

    deadline = time.monotonic() + 60
    while True:
        shutil.copy(journal.path_for(out), snap)
        t = polyprof.load(snap)
        sched = t.metadata.get(mkeys.SCHEDULE, {})
        if len(sched.get("recorded_steps", ())) >= steps and (
                not closed or sched["windows_ns"][-1][1] < t.metadata[mkeys.SESSION]["stop_ns"]):
            return t
        assert time.monotonic() < deadline, t.metadata.get(mkeys.SCHEDULE)
        time.sleep(0.05)


def test_the_journal_has_each_stretch_as_steps_pass(tmp_path: Path) -> None:
    """A live session's journal, copied while the program runs: the first cycle's stretch
    is there open once its first active step began, then closed, before the run ends."""
    out, snap = tmp_path / "live.polyprof", tmp_path / "snap.partial"

    def cycle(n: int) -> None:
        for _ in range(n):
            with polyprof.section("work"):
                pass
            polyprof.step()

    with polyprof.profile(["host"], schedule=SCHEDULE, output=out, options={"host": {"journal_interval_s": 0.05}}):
        cycle(3)  # step 3, active, began
        opened = _holding(out, snap, 1, False)
        cycle(3)  # steps 4 (active) and 5 (wait) began: the stretch closed
        closed = _holding(out, snap, 2, True)
    (a, b), = opened.metadata[mkeys.SCHEDULE]["windows_ns"]
    assert opened.metadata[mkeys.SCHEDULE]["recorded_steps"] == [3]
    assert b == opened.metadata[mkeys.SESSION]["stop_ns"]  # still open: to the journal's end
    (a2, b2), = closed.metadata[mkeys.SCHEDULE]["windows_ns"]
    assert closed.metadata[mkeys.SCHEDULE]["recorded_steps"] == [3, 4] and a2 == a < b2
    steps = _steps(closed)
    assert (a2, b2) == (steps[3][0], steps[4][1])  # steps 3 and 4, the active ones


def test_damaged_stretch_records_are_dropped_and_said(tmp_path: Path) -> None:
    """Stretch records whose steps run backwards, overlap an earlier stretch's or lie past
    the steps begun, or that end before they start, are left out, with one warning; a
    stretch written open, then grown and closed, is its last record."""
    from polyprof.collect.journal import JournalWriter
    from polyprof.collect.recorder import Recorder

    rec = Recorder()
    rec.steps.extend([1_000, 2_000, 3_000, 4_000, 5_000, 6_000])  # steps 1-6 begin here
    rows = [(1_000, -1, 1, 1)]
    w = JournalWriter(tmp_path / "t.partial", {"start_ns": 0, "schedule": {"wait": 0, "active": 2, "repeat": True}},
                      rec, interval=3600.0, stretches=lambda since: rows[since:])
    w.flush()
    rows[0] = (1_000, 3_000, 1, 2)  # grown and closed
    rows += [(3_500, 3_600, 2, 2),  # overlaps the first's steps
             (4_000, 3_900, 4, 4),  # ends before it starts
             (4_500, 4_600, 4, 3),  # its steps backwards
             (5_000, 6_000, 5, 5),  # whole
             (6_000, -1, 6, 9)]  # past the steps begun
    w.close(delete=False)
    t = polyprof.load(tmp_path / "t.partial")
    got = t.metadata[mkeys.SCHEDULE]
    assert got == {"wait": 0, "active": 2, "recorded_steps": [1, 2, 5], "windows_ns": [[1_000, 3_000], [5_000, 6_000]]}
    assert "4 damaged schedule stretch record(s) in the journal: ignored" in t.metadata[mkeys.WARNINGS]
