"""Ranks whose times are one machine's monotonic clock (their recordings' ``clock_domain``:
the kernel's boot id, ``collect/clock.py``) are aligned by it where their collectives do
not align them (``ranks/align.py: _one_clock``).

Before, such a rank was "not aligned", placed by its wall anchor with no bound: a rank with
no collective at all (two processes of one machine recorded side by side), one whose
collectives are all rooted (a broadcast bounds a receiver from one side only), and, once
in a CI run on a loaded 2-core machine, rank 1 of a 4-rank gloo job run under torchrun
(tests/test_align_rooted.py), whose collectives' constraints did not agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.collectives import collective_table
from polyprof.collect.clock import clock_domain
from polyprof.ranks.align import ONE_HOST, ONE_HOST_BOUND_NS, align_ranks
from polyprof.ranks.result import anchor_of

ROOTED = Path(__file__).parent / "data" / "traces" / "gloo_rooted"
SRC = Path(__file__).parents[1] / "src"

#: two steps of a section, then the step mark; no collective
PROGRAM = """
import time, polyprof
for i in range(4):
    with polyprof.section("work"):
        time.sleep(0.005)
    polyprof.step()
"""


def _broadcasts() -> dict[int, object]:
    """Ranks 0 and 1 of the recorded broadcast job, their broadcasts alone (from rank 0:
    each bounds rank 1's clock from one side only)."""
    tables = {r: collective_table(polyprof.load(ROOTED / f"bcast.rank{r}.pt.trace.json.gz")) for r in (0, 1)}
    return {r: t.take(np.asarray(t["op"], object) == "broadcast") for r, t in tables.items()}


def _anchor(wall_minus_mono: int, domain: str | None, uncertainty: int = 100) -> dict[str, object]:
    a: dict[str, object] = {"mono_ns": 5_000_000_000, "wall_ns": 5_000_000_000 + wall_minus_mono,
                            "uncertainty_ns": uncertainty, "host": "h"}
    return {**a, "clock_domain": domain} if domain else a


def test_the_domain_names_this_machines_clock():
    """The boot id the kernel gives, which every process of this boot reads alike."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    if not boot.exists():
        pytest.skip("no /proc/sys/kernel/random/boot_id here")
    assert clock_domain() == f"boot {boot.read_text().strip()}"
    other = subprocess.run([sys.executable, "-c", "from polyprof.collect.clock import clock_domain as d; print(d())"],
                           env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True, timeout=60)
    assert other.stdout.strip() == clock_domain(), other.stderr


def test_rooted_collectives_on_one_clock_align_by_it():
    """The broadcasts bound rank 1 from one side only; both ranks' anchors name one
    domain: rank 1 is aligned by the anchors (offset their difference, bound their
    uncertainties), its 6 broadcasts paired with the reference rank's (shift 0), ties at
    them within 10 ms; the message says why the collectives did not place it."""
    tables = _broadcasts()
    anchors = {0: _anchor(1_000, "boot x"), 1: _anchor(1_250, "boot x", 60)}
    c = align_ranks(tables, anchors, {0: True, 1: True})[1]
    assert c.aligned and c.fit.method == ONE_HOST and (c.matched, c.shift) == (6, 0), c
    assert c.fit.offset_ns == 250 and c.fit.bound_ns == 160 and c.tolerance_ns == ONE_HOST_BOUND_NS
    assert c.message.startswith("no collective bound its clock from both sides: its 6 collective(s)")
    assert c.message.endswith("placed by host h's monotonic clock, which both ranks' times are (boot x)"), c.message


@pytest.mark.parametrize("domains, session", [(("boot x", "boot y"), True), (("boot x", None), True),
                                              (("boot x", "boot x"), False)])
def test_without_one_clock_the_rank_stays_unaligned(domains, session):
    """Two boots (two machines, or one rebooted), an anchor without a domain (a trace
    recorded before it was kept, another tool's), or times that are the wall clock: not
    aligned, as before."""
    anchors = {r: _anchor(1_000, d) for r, d in enumerate(domains)}
    c = align_ranks(_broadcasts(), anchors, {0: session, 1: session})[1]
    assert not c.aligned and c.fit.method != ONE_HOST, c


def test_anchor_of_a_recording_names_its_domain(tmp_path):
    """A polyprof recording's source keeps its session's domain, which the rank's anchor
    carries; times moved off that clock (a Kineto export: wall clock) do not."""
    (tmp_path / "w.py").write_text(PROGRAM)
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "w.polyprof", "w.py"],
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    trace = polyprof.load(tmp_path / "w.polyprof")
    assert trace.metadata["session"]["clock_domain"] == clock_domain() != ""
    anchor, own = anchor_of(trace)
    assert own and anchor is not None and anchor["clock_domain"] == clock_domain()
    polyprof.export(trace, tmp_path / "w.json", format="kineto")
    anchor, own = anchor_of(polyprof.load(tmp_path / "w.json"))
    assert not own and "clock_domain" not in (anchor or {})


def test_two_processes_without_collectives_are_aligned(tmp_path):
    """Two ranks recorded here one after the other, no collective between them: ``polyprof
    summary`` puts rank 1 on rank 0's clock by this machine's clock, within the anchors'
    bound of the truth (0: one clock), and the headline says so (before: "not aligned",
    placed by its wall-clock anchor, bound unknown)."""
    (tmp_path / "w.py").write_text(PROGRAM)
    for rank in (0, 1):
        env = {**os.environ, "PYTHONPATH": str(SRC), "RANK": str(rank), "WORLD_SIZE": "2"}
        r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "w.polyprof", "w.py"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
    files = sorted(tmp_path.glob("w.rank*.polyprof"))
    assert len(files) == 2, files
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", *map(str, files), "--json"],
                       env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    (a,) = [x for x in doc["tables"]["rank_alignment"]["records"] if x["rank"] == 1]
    assert a["aligned"] and a["method"] == ONE_HOST and abs(a["offset_ns"]) <= a["bound_ns"] < 1e6, a
    assert a["message"].startswith("rank 1 recorded no collective: placed by host "), a
    assert not [f for f in doc["findings"] if f["id"] == "ranks_not_aligned"], [f["id"] for f in doc["findings"]]


def test_two_pods_of_one_node_are_placed_by_its_clock(traces_dir):
    """tests/data/traces/gloo_cycles (rank 1 late at every collective: its collectives
    bound its clock from one side, 43.7 ms): ranks whose host names differ but whose
    anchors name one domain (two containers or pods of one node) are placed by that
    machine's clock, as two ranks naming one host are; two domains stay on the
    collectives' fit."""
    ts = polyprof.load_ranks(traces_dir / "gloo_cycles")
    tables = {r: collective_table(ts.load(r)) for r in ts.ranks}
    alone = align_ranks(tables)[1]
    assert alone.fit.method == "collectives" and alone.fit.bound_ns > ONE_HOST_BOUND_NS, alone
    pods = {0: {**_anchor(0, "boot x"), "host": "pod-a"}, 1: {**_anchor(0, "boot x"), "host": "pod-b"}}
    c = align_ranks(tables, pods, {0: True, 1: True})[1]
    assert c.aligned and c.fit.method == ONE_HOST and c.fit.bound_ns == 200 and c.matched == alone.matched, c
    assert "both on one machine (boot x), whose clock the collectives agree with (their bound 43.7 ms)" in c.message
    apart = {0: pods[0], 1: {**pods[1], "clock_domain": "boot y"}}
    assert align_ranks(tables, apart, {0: True, 1: True})[1].fit.method == "collectives"
