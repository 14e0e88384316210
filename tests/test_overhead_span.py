"""The analysed span of a trace without steps leaves out the profiler's own work (category
``overhead``: rocpd's ``rpdflush`` and table writes after the program's last event), which
had made an RPD trace's device 16.4% idle where it was 8.0% over the program's span."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.common import analysed_span

RPD = Path(__file__).parent / "data" / "rpd" / "mytrace.rpd.gz"


def test_the_profilers_flush_does_not_stretch_the_analysed_span(tmp_path: Path) -> None:
    path = tmp_path / "mytrace.rpd"
    path.write_bytes(gzip.decompress(RPD.read_bytes()))
    t = polyprof.load(path)
    ev = t.events
    end = ev["start_ns"] + ev["dur_ns"]
    overhead = t.categories() == "overhead"
    assert overhead.any() and int(end[overhead].max()) == int(end.max())  # the flush is the trace's end
    t0, t1 = analysed_span(t)
    assert (t0, t1) == (int(ev["start_ns"][~overhead].min()), int(end[~overhead].max()))
    assert int(end.max()) - t1 > 40_000_000  # 41.8 ms of flush and table writes left out
    assert np.count_nonzero(overhead) == 21
