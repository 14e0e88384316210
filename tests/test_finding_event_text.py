"""A finding's events in the terminal say sizes as sizes (the copy findings' totals read
``total_bytes=2621440000`` where the evidence above said ``moved=3.7 GiB``)."""

from __future__ import annotations

from polyprof.report.terminal import _event_text


def test_sizes_and_times_of_a_findings_event_read_as_such() -> None:
    e = {"name": "Memcpy HtoD", "total_ns": 186_000_000, "total_bytes": 2_621_440_000, "bytes": 512, "count": 3,
         "mean_bytes": None}
    assert _event_text(e) == ("Memcpy HtoD total=186 ms total_bytes=2.4 GiB bytes=512 B count=3 "
                              "mean_bytes=None")
