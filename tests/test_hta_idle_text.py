"""``summary --window hta``'s "Idle time by cause" in the terminal.

HTA 0.5's idle time of a stream sums the gaps between its consecutive activities, and a
gap between two that overlap is negative (kernel-wait). Its per-device row adds up the
streams. Before, on HTA's ``mtia_trace_single_rank`` the table printed
``kernel-wait -0.2%`` and an ``(all streams)`` idle of 8.15 s beside the Device time
table's 42.4% of 13.3 s (5.65 s). Now no share or time below zero (shown as 0, a note
says what HTA's figure took off where), the device's row is ``(sum of streams)`` and a
note gives the device's own idle; ``--json`` keeps HTA's values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from polyprof.analyze.frames import frame
from polyprof.report.idle_text import SUM_OF_STREAMS, shown

FILE = Path(__file__).parent / "data" / "peers" / "hta_mtia" / "mtia_rank_0_dma_requests.json.gz"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def _idle_block(text: str) -> list[str]:
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("Idle time by cause"))
    end = next(i for i in range(at + 1, len(lines)) if lines[i].startswith("Kernel-type states"))
    return lines[at:end]


def test_hta_idle_json_keeps_htas_values():
    """HTA's arithmetic, unchanged in --json: the overlapping dma_requests of each stream
    make kernel-wait negative, and the device's row is the streams' sum."""
    r = _cli("summary", "--window", "hta", "--json", str(FILE))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["tables"]["idle_time_breakdown"]["records"]
    got = [(x["stream"], x["idle_ns"], x["kernel_wait_ns"], x["other_ns"]) for x in rows]
    assert got == [("Stream 1 FW", 265_546_000, -145_000, 265_691_000),
                   ("Stream 102 FW", 16_598_000, -9_000, 16_607_000),
                   ("(all streams)", 282_144_000, -154_000, 282_298_000)]


def test_hta_idle_table_shows_nothing_below_zero():
    r = _cli("summary", "--window", "hta", str(FILE))
    assert r.returncode == 0, r.stderr
    block = _idle_block(r.stdout)
    table = [x for x in block if x.startswith("│")]
    assert len(table) == 3 and not any("-" in x for x in table), block  # before: "-0.1%" in every row
    assert [c.strip() for c in table[2].split("│")[1:3]] == ["/device:MTIA:9", SUM_OF_STREAMS], table  # before: "(all streams)"
    notes = " ".join(x.strip() for x in block if not x.startswith(("│", "┏", "┃", "┡", "└", "Idle")))
    assert ("below zero in HTA's arithmetic, shown as 0: Stream 1 FW kernel-wait -145 µs, "
            "Stream 102 FW kernel-wait -9 µs") in notes, notes
    assert ("(sum of streams): the streams' idle added up, as HTA does, not the time no stream was busy; "
            "the device's idle: 284 ms (96.9% of 293 ms)") in notes, notes


def test_own_window_keeps_all_streams_label():
    """polyprof's own window: the device's row is its own idle (no stream busy), equal to
    the Device time table's; the label and the values stay as they are, with no note."""
    r = _cli("summary", str(FILE))
    assert r.returncode == 0, r.stderr
    block = _idle_block(r.stdout)
    assert any("│ (all streams) " in x for x in block) and len([x for x in block if x[0] not in "│┏┃┡└"]) == 1, block


def test_shown_clamps_and_labels():
    """The table the terminal prints from HTA's rows (two devices: each row names its
    plane in the notes), and HTA's idle of a stream below zero shown as 0."""
    it = frame({"plane": np.array(["/d:0", "/d:0", "/d:1", "/d:1"], object),
                "stream": np.array(["s1", "(all streams)", "s2", "(all streams)"], object),
                "idle_ns": np.array([100, 100, -50, -50], np.int64),
                "host_wait_ns": np.array([20, 20, 0, 0], np.int64),
                "kernel_wait_ns": np.array([-30, -30, -60, -60], np.int64),
                "other_ns": np.array([110, 110, 10, 10], np.int64),
                "host_wait_pct": np.array([20.0, 20.0, -0.0, -0.0]),
                "kernel_wait_pct": np.array([-30.0, -30.0, 120.0, 120.0]),
                "other_pct": np.array([110.0, 110.0, -20.0, -20.0])})
    tb = frame({"plane": np.array(["/d:0", "/d:1"], object), "stream": np.array(["(all streams)"] * 2, object),
                "idle_ns": np.array([70, 400], np.int64), "span_ns": np.array([1000, 1000], np.int64)})
    out, notes = shown(it, tb, hta=True)
    assert out["stream"].tolist() == ["s1", SUM_OF_STREAMS, "s2", SUM_OF_STREAMS]
    assert out["idle_ns"].tolist() == [100, 100, 0, 0]
    assert out["kernel_wait_pct"].tolist() == [0.0, 0.0, 120.0, 120.0]
    assert out["other_pct"].tolist() == [110.0, 110.0, 0.0, 0.0]
    assert notes[0].startswith("below zero in HTA's arithmetic, shown as 0: /d:0 s1 kernel-wait -30 ns, "
                               "/d:1 s2 kernel-wait -60 ns ("), notes
    assert notes[1].endswith("the device's idle: /d:0 70 ns (7.0% of 1 µs), /d:1 400 ns (40.0% of 1 µs) "
                             "(Device time, (all streams))"), notes
    same, none = shown(it.take([0]).with_columns(kernel_wait_ns=np.array([5]), kernel_wait_pct=np.array([5.0]),
                                                 idle_ns=np.array([135])), tb, hta=False)
    assert none == [] and same["stream"].tolist() == ["s1"] and same["idle_ns"].tolist() == [135]
