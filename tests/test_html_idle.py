"""The HTML report's "Idle time by cause" under ``--window hta``, as the terminal shows it.

HTA 0.5's idle of a stream sums the gaps between its consecutive activities, negative
where two overlap (kernel-wait), and its per-device row adds up the streams
(``report/idle_text.py``). Before, the report embedded HTA's values as they are: on the
MTIA fixture kernel-wait -145 µs (Stream 1 FW), -9 µs (Stream 102 FW) and -154 µs on a
device row labelled ``(all streams)``, with no note; the chart's hover said
"kernel-wait: -145 µs". Now the page gets the terminal's table (``idle_text.shown``):
no part below zero, the device's row ``(sum of streams)``, and the notes under the chart.
"""

from __future__ import annotations

from pathlib import Path

from polyprof.cli import main
from polyprof.report.idle_text import SUM_OF_STREAMS

from analysis.browser import chromium, page_data

FILE = Path(__file__).parent / "data" / "peers" / "hta_mtia" / "mtia_rank_0_dma_requests.json.gz"
NUMBERS = ("idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns", "gaps")


def _idle_rows(data: dict) -> list[dict]:
    return [dict(zip(data["idle"]["columns"], r)) for r in data["idle"]["rows"]]


def test_hta_idle_in_the_report_is_the_terminals(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["report", "--window", "hta", str(FILE), "-o", str(out)]) == 0
    data = page_data(out)
    rows = _idle_rows(data)
    assert [(r["stream"], r["idle_ns"], r["host_wait_ns"], r["kernel_wait_ns"], r["other_ns"], r["gaps"])
            for r in rows] == [("Stream 1 FW", 265_546_000, 0, 0, 265_691_000, 253),  # kernel-wait was -145_000
                               ("Stream 102 FW", 16_598_000, 0, 0, 16_607_000, 41),  # was -9_000
                               (SUM_OF_STREAMS, 282_144_000, 0, 0, 282_298_000, 294)]  # was "(all streams)", -154_000
    assert all(r[c] >= 0 for r in rows for c in NUMBERS)
    notes = data["idle_notes"]
    assert len(notes) == 2, notes
    assert notes[0].startswith("below zero in HTA's arithmetic, shown as 0: Stream 1 FW kernel-wait -145 µs, "
                               "Stream 102 FW kernel-wait -9 µs (HTA counts activities that overlap on a stream as "
                               "negative gaps, so such a row's parts add up to more than its idle"), notes
    assert notes[1] == ("(sum of streams): the streams' idle added up, as HTA does, not the time no stream was busy; "
                        "the device's idle: 284 ms (96.9% of 293 ms) (Device time, (all streams))")
    if chromium() is None:
        return
    import cdp  # only where Chromium is installed

    with cdp.report_page(out) as page:
        shown = page.eval("[].map.call(document.querySelectorAll('#idle-note > div'), function (e) "
                          "{ return e.textContent; })")
        labels = page.eval("[].map.call(document.querySelectorAll('#idle-chart svg > text'), function (e) "
                           "{ return e.textContent; })")
        hover = page.eval("[].map.call(document.querySelectorAll('#idle-chart rect > title'), function (e) "
                          "{ return e.textContent; })")
    assert shown == notes
    assert "/device:MTIA:9 · " + SUM_OF_STREAMS in labels and not any("(all streams)" in x for x in labels), labels
    assert "/device:MTIA:9 · Stream 1 FW — kernel-wait: 0 ns" in hover, hover  # was "-145 µs"
    assert not any(": -" in x for x in hover), hover


def test_own_window_keeps_all_streams_and_no_note(tmp_path: Path) -> None:
    """polyprof's own window: the device's row is its own idle (no stream busy), no note."""
    out = tmp_path / "r.html"
    assert main(["report", str(FILE), "-o", str(out)]) == 0
    data = page_data(out)
    rows = _idle_rows(data)
    assert [r["stream"] for r in rows][-1] == "(all streams)"
    assert all(r[c] >= 0 for r in rows for c in NUMBERS), rows
    assert data["idle_notes"] == []
