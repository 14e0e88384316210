"""What-ifs on an event with children (ranks/critical_path.py ``with_factors``): a section
sleeping before its one op, on a real 3-rank gloo job (tests/data/traces/gloo_sections:
rank 2 sleeps 80 ms in its ``load`` section in steps 3 and 4) and on a real torch program
of one process recorded here under ``polyprof run``.

Before, a what-if changed only the edges into the event's end (a section's stretch after
its last op) by its duration's share, so the sleep before the op, on the path as the
section's own time, never changed: ``--what-if 1:load:0`` predicted -19.1 µs (and the
same for x0.5) where ``load`` held 80.5 ms of a 90.8 ms path; on one process -13.1 µs
for a 64.2 ms ``load``. Now every edge the path gives to the event (each stretch of its
own time) is scaled: -77.1 and -79.7 ms on the job, the ops inside keeping theirs.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import step_windows
from polyprof.analyze.longest_path import longest_path
from polyprof.ranks.critical_path import align, job_graph, path_table
from polyprof.ranks.what_if import what_if, what_if_op

#: rank 2's sleep in its ``load`` section, steps 3 and 4
SLEEP_NS = 80_000_000


@pytest.fixture(scope="module")
def job(traces_dir: Path) -> dict[int, polyprof.Trace]:
    d = traces_dir / "gloo_sections"
    return {r: polyprof.load(d / f"sections3.rank{r}.pt.trace.json.gz") for r in (0, 1, 2)}


def test_what_if_on_a_section_scales_all_its_own_time(job):
    clocks = align(job)
    numbers = step_windows(job[2])[0].tolist()
    for k in (numbers.index(3), numbers.index(4)):
        jg = job_graph(job, k, clocks)
        p = longest_path(jg.graph)
        t = path_table(jg, p)
        rank, name, on = np.asarray(t["rank"]), t["name"], np.asarray(t["on_path_ns"])
        load = int(on[(rank == 2) & (name == "load")].sum())
        assert load > 0.95 * SLEEP_NS
        change, n = what_if_op(jg, 2, "load", 0.0)
        assert n == 1 and abs(change + SLEEP_NS) < 0.2 * SLEEP_NS  # the sleep, less what then holds the step
        assert -load <= change
        half, _ = what_if_op(jg, 2, "load", 0.5)
        assert abs(half + SLEEP_NS / 2) < 0.2 * SLEEP_NS / 2
        # the same event by row and duration: shorter by all of it is x0
        tr = job[2]
        rows = [int(jg.graph.rows[e]) for e in np.flatnonzero(jg.rank == 2).tolist()
                if tr.names()[jg.graph.rows[e]] == "load"]
        (row,) = rows
        assert what_if(jg, 2, row, -int(tr.events["dur_ns"][row])) == change
        # every name on the path, each of its events' own time to 0: the step shortens by at
        # most that name's time on the path (the path's own edges lose no more), never grows
        for r, nm in sorted(set(zip(rank.tolist(), name.tolist()))):
            held = int(on[(rank == r) & (name == nm)].sum())
            c, _ = what_if_op(jg, r, nm, 0.0)
            assert -held <= c <= 0, (r, nm, held, c)


PROGRAM = r"""
import time, torch, polyprof
torch.set_num_threads(1)
m = torch.nn.Linear(256, 256)
for step in range(6):
    with polyprof.section("load"):
        time.sleep(0.04)              # 40 ms data loading, before the section's one op
        x = torch.randn(64, 256)
    m(x).sum().backward()
    polyprof.step()
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_single_process_what_if_on_a_section(tmp_path):
    """``polyprof critical-path FILE --what-if 0:load:0`` of one process: the same joined
    graph of one rank (ranks/critical_path.py), so the same rule."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    out = tmp_path / "out.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), "prog.py"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(out), "--what-if", "0:load:0",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    for w in doc["what_if"]:
        rows = [x for x in doc["critical_path"] if x["step"] == w["step"] and x["name"] == "load"]
        assert w["events"] == 1 and len(rows) == 1
        held = rows[0]["on_path_ns"]
        assert held > 0.95 * 40_000_000  # the sleep is the section's own time on the path
        assert -held <= w["change_ns"] < -0.8 * 40_000_000
