"""A finding's events in the terminal say sizes as sizes (the copy findings' totals read
``total_bytes=2621440000`` where the evidence above said ``moved=3.7 GiB``)."""

from __future__ import annotations

from polyprof.analyze.finding import Finding
from polyprof.report.terminal import _event_text, _finding_lines
from polyprof.report.textout import Boxed, Terminal, render


def test_sizes_and_times_of_a_findings_event_read_as_such() -> None:
    e = {"name": "Memcpy HtoD", "total_ns": 186_000_000, "total_bytes": 2_621_440_000, "bytes": 512, "count": 3,
         "mean_bytes": None}
    assert _event_text(e) == ("Memcpy HtoD total=186 ms total_bytes=2.4 GiB bytes=512 B count=3 "
                              "mean_bytes=None")


def test_shares_are_rounded_and_long_values_shortened() -> None:
    """A memory finding's share read ``share_pct=50.97777773702112``; a fused chain of
    486 ops filled forty lines of the box (the JSON and HTML keep both whole)."""
    chain = " → ".join(["aten::add_", "aten::mul_"] * 243)
    e = {"name": "aten::cudnn_convolution", "share_pct": 50.97777773702112, "chain": chain, "ops": 486}
    text = _event_text(e)
    assert "share_pct=50.98 " in text and "ops=486" in text
    assert "chain=aten::add_ → aten::mul_ → " in text and len(text) < 130, text


def test_a_wrapped_title_hangs_under_its_finding() -> None:
    """A finding's title that wraps goes on two spaces in, under the title, not at the
    box's edge under the severity mark."""
    f = Finding(id="x", severity="medium", plane="/device:GPU:0", title="62% of 7310 kernels run under 10 µs (median 2.0 µs, launch call "
                "9.0 µs), device idle 42%", evidence={"kernels": 7310}, suggestion="Fuse small ops.")
    lines = render([Boxed("Findings", tuple(_finding_lines([f])))], Terminal(80, False, False)).splitlines()
    assert lines[1].startswith("│ ● medium 62% of 7310 kernels") and lines[2].startswith("│   µs), device idle 42%")
