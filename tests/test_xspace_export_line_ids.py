"""XProf shows every line of polyprof's XSpace export, whatever the source's thread ids.

XProf's trace viewer keys a line's row by its id cut to 32 bits (``uint32``, or the
display id where one is set), and takes ``0xFFFFFFFF`` (line id -1) to mean "no row": a
Kineto trace's string-named track ("Spans/PyTorch Profiler", synthetic tid -1) written
with line id -1 came out as an empty row and its event (the 43.46 s profiler span of the
A100 trace) was lost. Two ids equal in their low 32 bits would also share one row. The
writer gives such lines another id and keeps the thread id for polyprof's read-back.
These tests run XProf's own converters (``trace_viewer@`` and ``trace_viewer``, in a subprocess: a C++ library
that logs to stderr) on the export and look for the event there.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import polyprof
from polyprof.formats.xspace.wire import pb
from polyprof.trace.core import Trace
from polyprof.writers import xspace as xspace_writer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("xprof") is None,
                                reason="xprof is not installed (pip install xprof)")

_DRIVER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
res = {}
for tool in ("trace_viewer@", "trace_viewer"):
    data, _ = r.xspace_to_tool_data([sys.argv[1]], tool, {"use_saved_result": False})
    ev = json.loads(data)["traceEvents"]
    tn = {(e["pid"], e.get("tid")): e["args"]["name"] for e in ev
          if e.get("ph") == "M" and e.get("name") == "thread_name"}
    res[tool] = [[tn.get((e["pid"], e.get("tid"))), e["name"], e.get("dur", 0)] for e in ev if e.get("ph") == "X"]
json.dump(res, open(sys.argv[2], "w"))
"""

#: (trace, the Spans line's event, its duration in µs as `polyprof sql` gives it)
SPANS = [("a100_alexnet_small", 43458523.0), ("mi250_rocm_minitoy", 9761.878)]


def xprof_viewer(xplane: Path) -> dict[str, list[tuple[str, str, float]]]:
    """XProf's complete events of the file, (thread name, name, dur µs), from its streaming
    trace viewer (``trace_viewer@``, what the XProf and TensorBoard UI open) and from
    the plain one (``trace_viewer``)."""
    out = xplane.with_suffix(".viewer.json")
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(xplane.resolve()), str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {tool: [tuple(x) for x in ev] for tool, ev in json.loads(out.read_text()).items()}


def track_events(t: Trace) -> Counter:
    """(plane, track, tid) -> events on it."""
    n = Counter(t.events["track"].tolist())
    return Counter({(t.planes[tr.plane].name, tr.name, int(tr.tid)): n[tr.id] for tr in t.tracks if n[tr.id]})


def assert_line_ids_xprof_keeps(xplane: Path) -> None:
    """Per plane, the 32-bit keys XProf gives the lines are distinct and never 0xFFFFFFFF."""
    space = pb().XSpace()
    space.ParseFromString(xplane.read_bytes())
    for p in space.planes:
        keys = [(line.display_id or line.id) & 0xFFFFFFFF for line in p.lines]
        assert 0xFFFFFFFF not in keys, (p.name, [(line.name, line.id) for line in p.lines])
        assert len(set(keys)) == len(keys), (p.name, [(line.name, line.id) for line in p.lines])


@pytest.mark.parametrize("name,dur_us", SPANS)
def test_kineto_spans_line_is_shown_by_xprof(traces_dir: Path, tmp_path: Path, name: str, dur_us: float) -> None:
    src = traces_dir / "kineto" / f"{name}.json.gz"
    t = polyprof.load(src)
    spans = [tr for tr in t.tracks if tr.name == "Spans/PyTorch Profiler"]
    assert len(spans) == 1 and int(spans[0].tid) == -1  # the case: Kineto's string tid
    out = xspace_writer.write(t, tmp_path / f"{name}.xplane.pb")
    for tool, viewer in xprof_viewer(out).items():
        got = [d for line, _, d in viewer if line == "Spans/PyTorch Profiler"]
        assert got == [pytest.approx(dur_us, abs=1e-3)], (tool, sorted({line for line, _, _ in viewer}))
        if tool == "trace_viewer@":  # every event of every host line on a row of its name (the plain
            per_line = Counter(line for line, _, _ in viewer)  # viewer drops some by its resolution filter)
            for (plane, track, _), n in track_events(t).items():
                if plane.startswith("/host"):
                    assert per_line[track] >= n, (tool, track, n, per_line[track])
    assert_line_ids_xprof_keeps(out)
    # polyprof's own read-back keeps the thread ids and the events
    back = polyprof.load(out)
    assert track_events(back) == track_events(t)
    assert back.n_events == t.n_events
    assert sorted(back.events["dur_ns"].tolist()) == sorted(t.events["dur_ns"].tolist())


def test_tensorboard_export_spans_line_is_shown_by_xprof(traces_dir: Path, tmp_path: Path) -> None:
    """`polyprof export -f tensorboard` (the same writer, a run directory)."""
    src = traces_dir / "kineto" / "mi250_rocm_minitoy.json.gz"
    proc = subprocess.run([sys.executable, "-m", "polyprof", "export", "-f", "tensorboard", "-o", str(tmp_path / "tb"),
                           str(src)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted((tmp_path / "tb").rglob("*.xplane.pb"))
    assert len(files) == 1, files
    for tool, viewer in xprof_viewer(files[0]).items():
        got = [d for line, _, d in viewer if line == "Spans/PyTorch Profiler"]
        assert got == [pytest.approx(9761.878, abs=1e-3)], tool
    assert_line_ids_xprof_keeps(files[0])
