"""A Chrome export keeps its trace's wall anchor (formats/chrome.py), and polyprof's
Chrome/Kineto reader takes it back (formats/kineto/build.py): before, a ``.polyprof``
exported with ``-f chrome`` read back with no anchor (``anchor_of`` None, times relative
to ``otherData.origin_ns`` on a clock of their own), so a job of exported ranks could
not be aligned by anchors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.ranks.result import anchor_of

DATA = Path(__file__).resolve().parent / "data" / "corpus" / "seeds"


def _wall(trace: polyprof.Trace, name: str) -> int:
    """The wall time of the last start of events called ``name``, by the trace's anchor."""
    anchor, _ = anchor_of(trace)
    assert anchor is not None
    names = np.array(trace.names(range(trace.n_events)), dtype=object)
    start = int(trace.events["start_ns"][names == name].max())
    return start - int(anchor["mono_ns"]) + int(anchor["wall_ns"])


def _exported(src: Path, tmp_path: Path) -> tuple[polyprof.Trace, dict]:
    out = tmp_path / "x.json"
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(src), "-f", "chrome", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return polyprof.load(out), json.loads(out.read_text())["otherData"]


@pytest.mark.parametrize("name, event", [("host_session", "tick"),  # a live session: its monotonic clock
                                         ("kineto_converted", "Record Window End")])  # Kineto's: wall clock
def test_an_exported_trace_reads_back_with_its_wall_anchor(tmp_path, name, event):
    src = DATA / f"{name}.polyprof"
    before = polyprof.load(src)
    back, other = _exported(src, tmp_path)
    assert "wall_anchor" in other and "origin_ns" in other
    assert anchor_of(back)[0] is not None
    assert _wall(back, event) == _wall(before, event)
    # the anchor is clean metadata (integers): the reader adds no warning to the recording's own
    assert back.metadata.get("warnings") == before.metadata.get("warnings")


def test_a_recorded_session_keeps_its_anchor_and_host(tmp_path):
    with polyprof.profile() as prof:
        with polyprof.section("work"):
            sum(range(10_000))
    src = tmp_path / "s.polyprof"
    prof.trace.save(src)
    before = polyprof.load(src)
    back, _ = _exported(src, tmp_path)
    assert _wall(back, "work") == _wall(before, "work")
    assert anchor_of(back)[0].get("host") == anchor_of(before)[0].get("host")
    assert anchor_of(back)[0]["uncertainty_ns"] == anchor_of(before)[0]["uncertainty_ns"]
