"""A job recorded in profiler cycles (tests/data/traces/gloo_cycles: two ranks, two
torch.profiler cycles each, rank 1 late by 50 ms at every step): the ranks' figures are
of the recorded time, not of the time between the cycles."""

from __future__ import annotations

import json

import pytest

from polyprof.cli import main


@pytest.fixture
def job_json(traces_dir, capsys) -> dict:
    assert main(["summary", str(traces_dir / "gloo_cycles"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_communication_share_is_of_the_recorded_time(job_json):
    """Rank 0 waits in its all-reduces for the late rank 1: 199 ms of 219 ms recorded
    (90.7%); the share was of the 333 ms span, the 113 ms between the cycles in it (59.8%)."""
    rows = {r["rank"]: r for r in job_json["tables"]["rank_overview"]["records"]}
    base_ms = [100 * r["communication_ns"] / r["communication_pct"] / 1e6 for r in rows.values()]
    assert base_ms == pytest.approx([219.3, 219.3], abs=5)  # each rank's recorded time, not its span
    assert rows[0]["communication_pct"] == pytest.approx(90.7, abs=0.5) and rows[1]["communication_pct"] < 5


def test_the_late_rank_is_named_on_its_hosts_clock(job_json):
    """Rank 1, late at every recorded all-reduce, bounds its clock fit from one side only
    (43.7 ms: no arrival told lateness from clock error, and no straggler was named); both
    ranks name one host, whose clock places it within the collectives' bound; the straggler
    analysis tells arrivals apart beyond 10 ms there, not the clock's bound."""
    (al,) = [a for a in job_json["tables"]["rank_alignment"]["records"] if a["rank"] == 1]
    # one clock: the bound is the anchors' (none stated); ties within 10 ms at its collectives
    assert al["method"] == "one host's clock" and al["aligned"] and al["bound_ns"] == 0, al
    (st,) = [s for s in job_json["tables"]["stragglers"]["records"] if s["rank"] == 1]
    assert st["bound_ns"] == 10e6, st
    assert "both on host vm, whose clock the collectives agree with (their bound 43.7 ms)" in al["message"]
    (f,) = [f for f in job_json["findings"] if f["id"] == "straggler"]
    assert f["evidence"]["rank"] == 1 and f["evidence"]["last_count"] == 4
    # of the others' recorded time, not of the span with the time between the cycles
    assert f["evidence"]["wait_share_pct"] == pytest.approx(87.6, abs=0.5)
