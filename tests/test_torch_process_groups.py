"""polyprof's own torch recordings carry the job's process groups (``distributedInfo``:
``pg_config`` with each group's ranks, ``pg_count``, backend), as torch.profiler's own
export does (plugins/torch/groups.py), so a subgroup's collectives are told apart and its
root mapped to the global rank (analyze/process_groups.py, collective_roots.py).

Before: torch reads them once, when its recording starts, and polyprof's starts before
the program's ``init_process_group`` and ends after its ``destroy_process_group``: a
``polyprof run`` rank's recording had no process groups (its export only the launcher's
rank and world size), a subgroup broadcast's root was unknown (-1) and its wait charged
to the rank that waited for the late root."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.collectives import collective_table
from polyprof.plugins.torch.groups import merged
from live import Recordings, checked

SRC = Path(__file__).resolve().parents[1] / "src"

#: tests/data/traces/gloo_rooted's subgroup job: group [1, 3] broadcasts from rank 3,
#: 25 ms late in steps 2 and 4; the program destroys its groups before polyprof stops
SUBGROUP = r"""
import time, torch, torch.distributed as dist, polyprof
dist.init_process_group("gloo"); r = dist.get_rank()
g = dist.new_group([1, 3])
t = torch.zeros(16); big = torch.ones(1 << 15)
for step in range(6):
    if r == 3 and step in (2, 4):
        time.sleep(0.025)
    if r in (1, 3):
        dist.broadcast(t, src=3, group=g)
    dist.all_reduce(big)
    polyprof.step()
dist.destroy_process_group()
"""

WORLD = [0, 1, 2, 3]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}


def _run_job(d: Path) -> Path:
    """The subgroup job run under torchrun in ``d``, 4 ranks on 127.0.0.1 (about 20 s on 2
    cores): ``d``, holding the 4 ranks' recordings."""
    (d / "sub.py").write_text(SUBGROUP)
    with socket.socket() as sock:  # a free port on loopback for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    r = subprocess.run([str(shutil.which("torchrun")), "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
                        "--master-port", port, "-m", "polyprof", "run", "--no-summary", "--plugins", "host,torch",
                        "sub.py"], cwd=d, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(_files(d)) == 4
    return d


def _files(d: Path) -> list[Path]:
    return sorted(d.glob("sub.rank*.polyprof"))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Recordings:
    """Recordings of the subgroup job (tests/live.py), made on demand."""
    pytest.importorskip("torch")
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not on PATH")
    return Recordings(_run_job, tmp_path_factory.mktemp("subgroup"))


@pytest.fixture(scope="module")
def job(jobs) -> list[Path]:
    """The first recording's rank files."""
    return _files(jobs[0])


def test_the_recording_carries_the_groups(job):
    """Each rank's recording: the groups it is in (the world; ranks 1 and 3 also [1, 3]),
    the two the job made, the backend; in the Kineto export too."""
    for rank, f in enumerate(job):
        info = polyprof.load(f).metadata["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"], info["pg_count"]) == (rank, 4, "gloo", 2), info
        ranks = [c["ranks"] for c in info["pg_config"]]
        assert ranks == ([WORLD, [1, 3]] if rank in (1, 3) else [WORLD]), info
    out = job[1].with_name("rank1.json")
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(job[1]), "-f", "kineto", "-o", str(out)],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    info = json.loads(out.read_text())["distributedInfo"]
    assert info["rank"] == 1 and info["pg_count"] == 2 and [c["ranks"] for c in info["pg_config"]] == [WORLD, [1, 3]]


def test_the_subgroup_root_is_the_global_rank(job):
    """The broadcasts' root: group [1, 3]'s rank 1, global rank 3 (before: -1, unknown:
    gloo's ranges name no group and the rank worked in two); the key tells the group."""
    for rank in (1, 3):
        t = collective_table(polyprof.load(job[rank]))
        ops, roots = np.asarray(t["op"], object), np.asarray(t["root"], np.int64)
        assert (ops == "broadcast").sum() == 6 and (roots[ops == "broadcast"] == 3).all(), roots
        assert set(np.asarray(t["key"], object)[ops == "broadcast"].tolist()) == {"1/broadcast"}


def test_summary_names_the_late_root(jobs):
    """``polyprof summary``: rank 3, the late root, is the straggler, and rank 1's wait
    for it is charged to it (before: "3.0x what rank 1 caused": rank 1 reached the
    all-reduce last, by a hair, having waited for rank 3, and was charged the others'
    wait). The charge is checked per collective of steps 2 and 4, not by the title: on a
    loaded 2-core machine (4 ranks beside the suite's other worker) rank 1 can hold the
    others up in other steps by its scheduling alone, and the title then names it (CI:
    "5.6x what rank 1 caused", rank 3's 161 ms against 29 ms). The claims rest on how the
    4 ranks were scheduled: a recording that fails them is taken again (tests/live.py; a
    CI run once had broadcast 2 or 4 not last reached by rank 3 by 20 ms)."""
    def check(d: Path) -> None:
        r = subprocess.run([sys.executable, "-m", "polyprof", "summary", *map(str, _files(d)), "--json"],
                           env=_env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        doc = json.loads(r.stdout)
        found = [f for f in doc["findings"] if f["id"] == "straggler"]
        assert [f["evidence"]["rank"] for f in found] == [3], [f["title"] for f in doc["findings"]]
        sc = doc["tables"]["straggler_collectives"]["records"]
        assert {r["key"] for r in sc if r["op"] == "broadcast"} == {"1/broadcast"}, sc  # the group's, told apart
        late = {r["seq"]: r for r in sc if r["key"] == "1/broadcast" and r["seq"] in (2, 4)}
        assert all(r["last_rank"] == 3 and r["spread_ns"] > 20e6 for r in late.values()) and len(late) == 2, \
            [(r["seq"], r["last_rank"], r["spread_ns"]) for r in late.values()]
        # the all-reduces just after: held by rank 3, whichever of 1 and 3 came last (by a hair);
        # what rank 1 caused (charged by held_by) is none of those steps' waiting
        held = [(r["key"], r["seq"], r["held_by"]) for r in sc if r["seq"] in (2, 4)]
        assert {k for k, _, _ in held} == {"1/broadcast", "allreduce"} and all(h == 3 for _, _, h in held), held
        ev = found[0]["evidence"]
        assert ev.get("next_rank") != 1 or ev["next_caused_wait_ns"] < ev["caused_wait_ns"] / 2, ev

    checked(jobs, check)


def test_groups_seen_are_merged():
    """A group destroyed before the session stopped stays; the larger ``pg_count``."""
    world = {"pg_name": "0", "ranks": WORLD}
    sub = {"pg_name": "1", "ranks": [1, 3]}
    old = {"rank": 1, "pg_count": 2, "pg_config": [world, sub]}
    assert merged(old, {"rank": 1, "pg_count": 1, "pg_config": [world]}) == old
    assert merged(None, {"rank": 1}) == {"rank": 1} and merged(old, None) == old and merged(None, None) is None


ONE = r"""
import os, sys, tempfile, torch, torch.distributed as dist, polyprof
store = tempfile.mktemp()
with polyprof.profile(plugins=["torch"]) as p:
    dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
    g = dist.new_group([0])
    dist.all_reduce(torch.ones(4), group=g)
    dist.destroy_process_group(g)
    dist.all_reduce(torch.ones(4))
    dist.destroy_process_group()
info = p.trace.metadata.get("distributedInfo")
print(info["pg_count"], [c["ranks"] for c in info["pg_config"]], file=sys.stdout)
"""


def test_groups_destroyed_inside_a_profile():
    """``with polyprof.profile()``, one gloo process: the group destroyed first and the
    world destroyed last are both kept (seen just before each ``destroy_process_group``)."""
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", ONE], env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "2 [[0], [0]]", r.stdout
