"""Step numbers that do not fit int64 (issue 34): a Kineto ``ProfilerStep#`` with 20
digits and XSpace step stats of ``"1e400"``, ``inf``, 2**64-1 are left out of the steps
with one warning line, in summary, report and every export; never an internal error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.derive.steps import find_steps
from polyprof.formats import xplane_pb2


def _kineto(path: Path) -> Path:
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#99999999999999999999", "pid": 1, "tid": 1,
           "ts": 0, "dur": 100},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1, "ts": 200, "dur": 100},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50}]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def _xspace(path: Path, value: object) -> Path:
    space = xplane_pb2.XSpace()
    p = space.planes.add()
    p.name, p.id = "/host:CPU", 1
    p.stat_metadata[1].id, p.stat_metadata[1].name = 1, "step_num"
    p.event_metadata[1].id, p.event_metadata[1].name = 1, "train_step"
    line = p.lines.add()
    line.name, line.id, line.timestamp_ns = "python", 1, 1000
    for i, v in enumerate([value, 3]):
        e = line.events.add()
        e.metadata_id, e.offset_ps, e.duration_ps = 1, i * 10**6, 5 * 10**5
        st = e.stats.add()
        st.metadata_id = 1
        if isinstance(v, str):
            st.str_value = v
        elif isinstance(v, float):
            st.double_value = v
        else:
            st.uint64_value = v
    path.write_bytes(space.SerializeToString())
    return path


COMMANDS = [("summary",), ("summary", "--json"), ("report", "-o", "{out}.html"),
            ("export", "-f", "xspace", "-o", "{out}.xplane.pb"), ("export", "-f", "kineto", "-o", "{out}.pt.trace.json"),
            ("export", "-f", "perfetto", "-o", "{out}.pftrace"), ("export", "-f", "chrome", "-o", "{out}.json")]


@pytest.mark.parametrize("make", ["kineto", "1e400", "inf", "uint64"])
def test_out_of_range_step_numbers_give_one_clean_line(tmp_path: Path, make: str):
    if make == "kineto":
        src = _kineto(tmp_path / "t.json")
    else:
        src = _xspace(tmp_path / "t.xplane.pb", {"1e400": "1e400", "inf": float("inf"), "uint64": 2**64 - 1}[make])
    for cmd in COMMANDS:
        argv = [a.format(out=tmp_path / "o") for a in cmd]
        r = subprocess.run([sys.executable, "-m", "polyprof", argv[0], str(src), *argv[1:]], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, (cmd, r.stderr)
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr
        warnings = [ln for ln in r.stderr.splitlines() if "step marker" in ln]
        assert len(warnings) == (1 if cmd[0] != "export" else len(warnings)) <= 1, (cmd, r.stderr)
        assert all("ignored" in w for w in warnings)
    assert find_steps(polyprof.load(src)).number.tolist() == [7 if make == "kineto" else 3]
