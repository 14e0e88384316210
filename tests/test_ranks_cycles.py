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
