"""A rank read from its crash journal (killed: ``OUTPUT.partial``) has no collective
because the journal keeps host data only: the advice says its collectives were lost with
the kill, not that it recorded none polyprof recognises.

Real parts: a program run under ``polyprof run`` and killed by SIGKILL leaves its
journal (renamed ``prog.rank1.polyprof.partial``, as a killed rank 1 of a job leaves it),
beside a real gloo rank 0 with collectives (tests/data/traces/gloo_world_late). Before:
"rank 1 recorded no collective polyprof recognises (communication kernels, gloo or MPI
ranges, XLA collective ops), so there is nothing to match", though the rank ran its
collectives (an audited 2-rank DDP job killed at step 100: 135 all-reduces)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import polyprof

RANK0 = Path(__file__).parent / "data" / "traces" / "gloo_world_late" / "worldlate.rank0.pt.trace.json.gz"

KILLED = """
import os, signal, time
import polyprof
for i in range(5):
    with polyprof.section("work"):
        time.sleep(0.005)
    polyprof.step()
time.sleep(1.0)  # the journal flushes (every 0.2 s here)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_rank_is_said_to_have_lost_its_collectives(tmp_path):
    script, out = tmp_path / "prog.py", tmp_path / "run" / "prog.polyprof"
    script.write_text(KILLED)
    out.parent.mkdir()
    code = ("import sys; from polyprof.cli import main; from polyprof.plugins import host; "
            "host.HostPlugin.default_journal_interval_s = 0.2; "
            f"sys.exit(main(['run', '--plugins', 'host', '-o', {str(out)!r}, {str(script)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(out.parent / "prog.polyprof.partial", job / "prog.rank1.polyprof.partial")
    shutil.copy(RANK0, job / "prog.rank0.pt.trace.json.gz")
    rep = polyprof.load_ranks([job]).analyze("serial", progress=None)
    found = [f for f in rep.findings if f.id == "ranks_not_aligned"]
    assert len(found) == 1 and found[0].evidence["ranks"] == [1], [f.title for f in rep.findings]
    said = found[0].suggestion
    assert "rank 1 was read from a crash journal" in said and "its collectives were lost with the kill" in said, said
    assert "recorded no collective polyprof recognises" not in said, said
