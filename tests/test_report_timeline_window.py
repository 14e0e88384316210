"""The HTML report's timeline draws the critical path of the steps the summary analyses
(``analyze.window.view``: AUTO, ``--steps``, a time window, a schedule's stretches), as
``polyprof critical-path`` and ``export --critical-path`` do. Before, a job's timeline
took every rank's raw trace: ``report`` of the two gloo ranks drew 3.33 s of path (the
warm-up step's 3 s in it) where ``critical-path`` printed 335 ms for the steps the summary
analyses; and each rank's view must not stay alive beside the rank (a big job's timeline
holds one rank at a time). Real traces: torchrun gloo DDP ranks (tests/data), OpenCL on
PoCL under ``polyprof run``."""

from __future__ import annotations

import base64
import gc
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import critical_path, step_windows
from polyprof.analyze.critical_path_track import TRACK
from polyprof.cli import main

DATA = Path(__file__).parent / "data" / "traces" / "gloo_ddp"
SRC = Path(__file__).resolve().parents[1] / "src"


def _late() -> list[str]:
    return sorted(str(p) for p in DATA.glob("late.rank*.pt.trace.json.gz"))


def _page(html: Path) -> dict:
    """The timeline's data as the page reads it: its JSON and its inflated columns."""
    text = html.read_text()
    data = json.loads(re.search(r'<script type="application/json" id="tl-data">(.*?)</script>', text, re.S).group(1))
    blob = re.search(r'<script type="application/octet-stream" id="tl-blob">(.*?)</script>', text, re.S).group(1)
    data["blob"] = blob
    return data


def _paths(data: dict) -> dict[tuple[str, int], int]:
    """The critical path tracks' slices summed per (group, ``step`` stat): what the page
    draws of each step's path (the group: the rank's, or the one trace's plane)."""
    raw = zlib.decompress(base64.b64decode(data["blob"]))
    types = {"u2": "<u2", "i4": "<i4", "f8": "<f8"}
    cols = {c["name"]: np.frombuffer(raw, types[c["dtype"]], c["length"], c["offset"]) for c in data["layout"]}
    dur = cols["dur"].astype(np.int64) * data["quantum"]
    step_of: dict[int, int] = {}
    for key, (pos, values) in zip(data["args"]["keys"], data["args"]["cols"]):
        if key == "step":
            step_of.update(zip(pos, values))
    out: dict[tuple[str, int], int] = {}
    for t in data["tracks"]:
        if t["label"].startswith(TRACK):
            group = t["group"].split(" · ")[0]
            for p in range(t["lanes"][0], t["lanes"][-1]):
                key = (group, int(step_of[p]))
                out[key] = out.get(key, 0) + int(dur[p])
    return out


def _command(files: list[str], *more: str) -> dict[int, int]:
    """``critical-path --json``'s length per step number (its steps are positions among
    the first rank's steps)."""
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", *files, "--json", *more],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(SRC)})
    assert r.returncode == 0, r.stderr[-3000:]
    numbers = step_windows(polyprof.load(files[0]))[0].tolist()
    rows = json.loads(r.stdout)["critical_path"]
    return {numbers[int(x["step"])] if numbers else -1: int(x["path_ns"]) for x in rows}


@pytest.mark.parametrize("more", [[], ["--steps", "2:5"]])
def test_a_jobs_timeline_draws_the_commands_path_of_the_analysed_steps(tmp_path: Path, more: list[str]) -> None:
    """Two gloo DDP ranks (8 steps): the joined path drawn on the page is, step by step,
    the one ``critical-path`` prints for the same window (AUTO leaves the warm-up step 0
    out; ``--steps 2:5``). Before: every step, 3.33 s in all against 335 ms."""
    files = _late()
    out = tmp_path / "job.html"
    assert main(["report", *files, "-o", str(out), "-j", "1", *more]) == 0
    drawn = _paths(_page(out))
    assert {g for g, _ in drawn} == {"rank 0"}  # one joined path, on the first rank's plane
    want = _command(files, *more)
    assert sorted(want) == ([1, 2, 3, 4, 5, 6, 7] if not more else [2, 3, 4])
    got = {k: v for (_, k), v in drawn.items()}
    assert got == want


def test_a_big_jobs_timeline_draws_each_ranks_analysed_steps_one_rank_at_a_time(monkeypatch) -> None:
    """A job above the joined path's size (the bound lowered to 1,000 events): each rank's
    own path is drawn, of the steps the summary analyses on it (its ``critical_path``
    table, AUTO: not the warm-up step), while at most 3 traces are alive at each rank
    drawn (the rank in detail, the one drawn and its copy with its path): the rank's view
    is made for its path and let go, not kept on the rank."""
    from polyprof.analyze.window import view
    from polyprof.ranks.traceset import load_ranks
    from polyprof.report import timeline, timeline_job
    from polyprof.report.timeline import timeline_data
    from polyprof.trace.core import Trace

    monkeypatch.setattr(timeline_job, "MAX_CRITICAL_PATH_EVENTS", 1000)
    ts = load_ranks(_late())
    job = ts.analyze("serial")
    lanes = timeline._lanes
    gc.collect()
    known = {id(o) for o in gc.get_objects() if isinstance(o, Trace)}
    alive: list[int] = []

    def counting(*a: object) -> object:  # called once per part drawn
        gc.collect()
        alive.append(sum(isinstance(o, Trace) and id(o) not in known for o in gc.get_objects()))
        return lanes(*a)

    monkeypatch.setattr(timeline, "_lanes", counting)
    ref = ts.load(job.ranks[0])
    parts, marks = timeline_job.job_parts(job, ts.load, [(job.ranks[0], ref)], "auto")
    data = timeline_data(parts, marks)
    monkeypatch.setattr(timeline, "_lanes", lanes)
    assert len(alive) == 2 and max(alive) <= 3, alive
    drawn = _paths(data)
    for r in job.ranks:
        table = critical_path(view(ts.load(r), "auto"))
        want = dict(zip(np.asarray(table["step"]).tolist(), np.asarray(table["path_ns"]).tolist()))
        assert sorted(want) == [1, 2, 3, 4, 5, 6, 7]
        got = {k: v for (g, k), v in drawn.items() if g == f"rank {r}"}
        assert got == want, (r, got, want)


@pytest.mark.opencl
def test_one_traces_timeline_draws_the_time_windows_path(tmp_path: Path) -> None:
    """A 50 ms window (``run --delay 1 --duration 0.05``) of ~100 ms OpenCL steps, no
    whole step in it: the page's path is the window's, as the command's (49.9 ms), under
    ``--all-steps`` too (it analyses the time window, as the default: before, the 1.8 s
    of the whole loop). (One trace's page drew its window's path before too: its
    timeline is the report's view.)"""
    from opencl_programs import EPOCH, record  # pytest puts tests/ on sys.path

    record(tmp_path, "win", EPOCH, ["--delay", "1.0", "--duration", "0.05"], ["16", "0.1"], summary=False)
    f = str(tmp_path / "win.polyprof")
    for more in ([], ["--all-steps"]):
        out = tmp_path / "win.html"
        assert main(["report", f, "-o", str(out), *more]) == 0
        got = {k: v for (_, k), v in _paths(_page(out)).items()}
        want = _command([f], *more)
        assert got == want and list(got) == [-1], (more, got, want)
    assert got[-1] <= 50_000_000  # --all-steps: the window's path too (before: the whole trace's)
