"""A finding's events in the terminal say sizes as sizes (the copy findings' totals read
``total_bytes=2621440000`` where the evidence above said ``moved=3.7 GiB``); long values
are shortened in the terminal and the HTML report, whole in the JSON and the page's
tooltips."""

from __future__ import annotations

from pathlib import Path

import polyprof
from polyprof.analyze.finding import Finding
from polyprof.report import html
from polyprof.report.tables import build
from polyprof.report.terminal import _event_text, _finding_lines
from polyprof.report.textout import Boxed, Terminal, render

from analysis.browser import chromium, page_data

KINETO = Path(__file__).parent / "data" / "traces" / "kineto"


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


def test_long_values_of_a_finding_are_shortened_in_the_html_report(tmp_path: Path) -> None:
    """The HTML report showed a fused chain of 486 ops whole in a finding's "top:" line (and a
    C++ kernel's name, a job's list of ranks): now each value past 120 characters is cut
    with an ellipsis, the whole text in its tooltip; the page's data keeps it whole."""
    chain = " → ".join(["aten::add_", "aten::mul_"] * 243)
    kernel = "void at::native::elementwise_kernel<" + "int, " * 60 + "float>(int, at::native::Loop)"
    trace = polyprof.load(KINETO / "a100_alexnet_small.json.gz")
    report = build(trace)
    report.findings = [Finding(id="chain", severity="medium", plane="/device:GPU:0", title="a long chain",
                               suggestion="Fuse it.",
                               evidence={"ranks": list(range(0, 400, 2)), "ops": 486},
                               events=[{"name": kernel, "chain": chain, "share_pct": 50.97777773702112},
                                       {"name": "aten::mm", "total_ns": 1_500_000}])]
    out = html.write(trace, tmp_path / "r.html", report=report)
    data = page_data(out)  # what the page embeds: whole
    assert data["findings"][0]["events"][0] == {"name": kernel, "chain": chain, "share_pct": 50.97777773702112}
    if chromium() is None:
        return
    import cdp  # only where Chromium is installed

    with cdp.report_page(out) as page:
        lines = page.eval("Array.from(document.querySelectorAll('#findings-list .finding .ev'))"
                          ".map(e => e.textContent)")
        tips = page.eval("Array.from(document.querySelectorAll('#findings-list .clipped')).map(e => e.title)")
    evidence, top = lines
    assert evidence.startswith("ranks = 0, 2, 4") and evidence.endswith("…, ops = 486") and len(evidence) < 140, \
        evidence
    assert top.startswith("top: void at::native::elementwise_kernel<int, ") and " chain=aten::add_ → " in top, top
    assert "share_pct=51.0%" in top and " | aten::mm total_ns=1.50 ms" in top and len(top) < 300, top
    assert tips[1:] == [kernel, "chain=" + chain], tips[1:]
    assert tips[0].startswith("ranks = 0, 2, 4, ") and tips[0].endswith("396, 398"), tips[0]
