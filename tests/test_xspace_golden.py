"""Golden cases for the XSpace reader, in the manner of Perfetto's diff tests: each case
is a small XSpace built inline with the protobuf classes, a SQL query (DuckDB, over the
tables ``polyprof sql`` shows) on what polyprof reads, and the expected table written
out by hand from the XSpace/XProf conventions (not from polyprof's output). Each runs
with the compiled decoder and with the pure-Python one.

Expected tables: one row per line, cells separated by `` | ``; NULL for a missing stat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest

from polyprof.cli.sql import query
from polyprof.formats import xplane_pb2, xspace
from polyprof.formats.xspace import decode


class Space:
    """A small XSpace under construction: planes, lines, events, stats by name."""

    def __init__(self) -> None:
        self.msg = xplane_pb2.XSpace()

    def plane(self, name: str, pid: int = 0, **stats: Any) -> "Plane":
        p = self.msg.planes.add()
        p.name, p.id = name, pid
        plane = Plane(p)
        for k, v in stats.items():
            plane.stat(p.stats.add(), k, v)
        return plane

    def bytes(self) -> bytes:
        return self.msg.SerializeToString()


@dataclass
class Ref:
    """A ``ref_value`` stat: the name of another stat metadata."""

    name: str


class Plane:
    def __init__(self, msg: Any):
        self.msg = msg

    def stat_id(self, name: str) -> int:
        for i, m in self.msg.stat_metadata.items():
            if m.name == name:
                return int(i)
        i = len(self.msg.stat_metadata) + 1
        self.msg.stat_metadata[i].id = i
        self.msg.stat_metadata[i].name = name
        return i

    def stat(self, st: Any, key: str, v: Any) -> None:
        st.metadata_id = self.stat_id(key)
        if isinstance(v, Ref):
            st.ref_value = self.stat_id(v.name)
        elif isinstance(v, float):
            st.double_value = v
        elif isinstance(v, bytes):
            st.bytes_value = v
        elif isinstance(v, str):
            st.str_value = v
        elif v >= 2**63:
            st.uint64_value = v
        else:
            st.int64_value = v

    def metadata(self, mid: int, name: str, display_name: str = "", **stats: Any) -> None:
        m = self.msg.event_metadata[mid]
        m.id, m.name, m.display_name = mid, name, display_name
        for k, v in stats.items():
            self.stat(m.stats.add(), k, v)

    def line(self, name: str, timestamp_ns: int = 0, lid: int = 0) -> "Line":
        ln = self.msg.lines.add()
        ln.name, ln.timestamp_ns, ln.id = name, timestamp_ns, lid
        return Line(self, ln)


class Line:
    def __init__(self, plane: Plane, msg: Any):
        self.plane, self.msg = plane, msg

    def event(self, mid: int, offset_ps: int | None = 0, duration_ps: int = 0, occurrences: int | None = None,
              **stats: Any) -> "Line":
        e = self.msg.events.add()
        e.metadata_id = mid
        if occurrences is not None:
            e.num_occurrences = occurrences
        else:
            e.offset_ps = offset_ps or 0
        e.duration_ps = duration_ps
        for k, v in stats.items():
            self.plane.stat(e.stats.add(), k, v)
        return self


@dataclass
class Case:
    name: str
    build: Callable[[], bytes]
    sql: str
    expected: str


def _times() -> bytes:
    s = Space()
    p = s.plane("/device:GPU:0")
    p.metadata(1, "k")
    # starts round down, ends up: no event turns into an instant, nesting holds
    p.line("Stream #1", timestamp_ns=1000).event(1, 0, 1).event(1, 1500, 1000).event(1, 2999, 2).event(1, -500, 250)
    return s.bytes()


def _names_and_categories() -> bytes:
    s = Space()
    host = s.plane("/host:CPU", 7)
    host.metadata(1, "long::name(int)", "short")
    host.metadata(2, "$train.py:10 step")
    host.metadata(3, "TrainStep")
    t = host.line("python", lid=3)
    t.event(1, 0, 1000).event(2, 2000, 1000).event(3, 4000, 5000, step_num=3).event(9, 9000, 0)
    dev = s.plane("/device:TPU:2")
    dev.metadata(1, "fusion.1")
    dev.metadata(2, "jit_f(123)")
    dev.line("XLA Ops").event(1, 0, 1000)
    dev.line("XLA Modules").event(2, 0, 2000)
    dev.line("Something else").event(1, 0, 10)
    return s.bytes()


def _stat_kinds() -> bytes:
    s = Space()
    p = s.plane("/device:TPU:0")
    # metadata-level stats apply to every event of that metadata; the event's own win
    p.metadata(1, "op", flops=100, hlo_category="convolution")
    p.metadata(2, "other")
    line = p.line("XLA Ops")
    line.event(1, 0, 1000, bytes_accessed=2**64 - 1, ratio=0.5, shape="f32[8]", kind=Ref("convolution"))
    line.event(1, 1000, 1000, flops=7, bytes_accessed=12)
    line.event(2, 2000, 1000, ratio=2.0)
    return s.bytes()


def _aliases_and_occurrences() -> bytes:
    s = Space()
    p = s.plane("/device:GPU:0")
    p.metadata(1, "kernel")
    line = p.line("Stream #7", lid=7)
    line.event(1, 0, 1000, stream_id=7, device_id=0, tf_op="dense/MatMul", hlo_module="jit_f", correlation_id=5)
    line.event(1, None, 0, occurrences=4)
    return s.bytes()


def _xprof_flows() -> bytes:
    s = Space()
    host = s.plane("/host:CPU")
    host.metadata(1, "launch")
    dev = s.plane("/device:GPU:0")
    dev.metadata(1, "kernel")
    # XProf's flow stat: direction in bits 0-1, the flow id from bit 2
    host.line("t", lid=1).event(1, 0, 1000, flow=(42 << 2) | 1).event(1, 5000, 1000, flow=(43 << 2) | 1)
    dev.line("Stream #1").event(1, 2000, 500, flow=(42 << 2) | 2).event(1, 9000, 500, flow=(44 << 2) | 2)
    return s.bytes()


def _planes_and_tracks() -> bytes:
    s = Space()
    s.plane("/host:CPU", 11, hostname="h1").line("main", lid=5)
    dev = s.plane("/device:TPU:3", 4)
    dev.line("Steps")
    dev.line("XLA Ops")
    dev.line("Stream #2", lid=2)
    s.plane("/device:CUSTOM:1")
    return s.bytes()


CASES = [
    Case("times: ps offsets to ns, starts down, ends up", _times,
         "SELECT start_ns, dur_ns, end_ns FROM events ORDER BY start_ns, dur_ns",
         """
         999 | 1 | 1000
         1000 | 1 | 1001
         1001 | 2 | 1003
         1002 | 2 | 1004
         """),
    Case("names (display name first) and categories by plane and line", _names_and_categories,
         "SELECT plane, track, name, category, step FROM events ORDER BY plane, track, start_ns",
         """
         /device:TPU:2 | Something else | fusion.1 |  | NULL
         /device:TPU:2 | XLA Modules | jit_f(123) | xla_module | NULL
         /device:TPU:2 | XLA Ops | fusion.1 | xla_op | NULL
         /host:CPU | python | short | traceme | NULL
         /host:CPU | python | $train.py:10 step | python_function | NULL
         /host:CPU | python | TrainStep | step | 3
         /host:CPU | python |  | traceme | NULL
         """),
    Case("every XStat value kind; metadata stats inherited, event stats win", _stat_kinds,
         "SELECT name, flops, hlo_category, bytes_accessed, ratio, shape, kind FROM events ORDER BY start_ns",
         """
         op | 100 | convolution | 18446744073709551615 | 0.5 | f32[8] | convolution
         op | 7 | convolution | 12 | NULL | NULL | NULL
         other | NULL | NULL | NULL | 2.0 | NULL | NULL
         """),
    Case("XProf stat names copied to polyprof's keys; num_occurrences", _aliases_and_occurrences,
         "SELECT stream, device, op, module, correlation_id, num_occurrences, dur_ns FROM events ORDER BY start_ns, "
         "dur_ns DESC",
         """
         7 | 0 | dense/MatMul | jit_f | 5 | NULL | 1
         NULL | NULL | NULL | NULL | NULL | 4 | 0
         """),
    Case("XProf flow stats: events sharing a flow id, linked in time order", _xprof_flows,
         "WITH e AS (SELECT row_number() OVER () - 1 AS row, * FROM events) "
         "SELECT s.name, s.start_ns, d.name, d.start_ns, f.id, f.category FROM flows f "
         "JOIN e s ON s.row = f.src JOIN e d ON d.row = f.dst",
         """
         launch | 0 | kernel | 2 | 42 | xflow
         """),
    Case("planes and tracks: kinds and indices from the names", _planes_and_tracks,
         "SELECT p.name, p.kind, p.index, t.name, t.kind, t.tid FROM tracks t JOIN planes p ON p.id = t.plane "
         "ORDER BY p.name, t.name",
         """
         /device:TPU:3 | device | 3 | Steps | steps | 0
         /device:TPU:3 | device | 3 | Stream #2 | stream | 2
         /device:TPU:3 | device | 3 | XLA Ops | line | 0
         /host:CPU | host | 0 | main | thread | 5
         """),
]


def _cell(v: Any) -> str:
    return "NULL" if v is None else str(v)


def _table(text: str) -> list[str]:
    return [" | ".join(c.strip() for c in ln.split("|")) for ln in text.strip().splitlines()]


@pytest.fixture(params=["compiled", "python"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "compiled" and decode.IMPLEMENTATION != "c":
        pytest.skip("the compiled XSpace decoder is not built")
    if request.param == "python":
        monkeypatch.setattr(decode, "_wire", None)
    return request.param


@pytest.mark.parametrize("case", CASES, ids=[c.name.split(":")[0] for c in CASES])
def test_golden(case: Case, implementation: str) -> None:
    trace = xspace.from_bytes(case.build(), source=f"<{case.name}>")
    table = query(trace, case.sql)
    got = [" | ".join(_cell(v) for v in row) for row in zip(*(c.to_pylist() for c in table.columns))]
    assert got == _table(case.expected), "\n".join(got)


def test_golden_task_environment_anchors_wall_clock(implementation: str) -> None:
    """JAX/XProf: times are relative to ``profile_start_time`` (wall-clock ns) of the
    "Task Environment" plane."""
    s = Space()
    s.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000, profile_stop_time=1_700_000_001_000_000_000)
    p = s.plane("/host:CPU")
    p.metadata(1, "e")
    p.line("t").event(1, 5000, 1000)
    trace = xspace.from_bytes(s.bytes())
    assert trace.metadata["wall_anchor"] == {"mono_ns": 0, "wall_ns": 1_700_000_000_000_000_000, "uncertainty_ns": 0}
    assert trace.metadata["xspace"]["profile_stop_time_ns"] == 1_700_000_001_000_000_000
    assert trace.metadata["clock"] == "xspace (ns since profile_start_time)"


def test_extension_built_where_a_compiler_exists() -> None:
    """`pip install -e .` (CI) builds the XSpace decoder into src/; a missing build would
    silently fall back to the slower pure-Python decoder (and skip its cross-checks)."""
    import os
    import shutil
    import subprocess
    import sys
    import sysconfig

    if os.environ.get("POLYPROF_PURE_PYTHON", "") not in ("", "0"):
        pytest.skip("POLYPROF_PURE_PYTHON is set")
    if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None:
        pytest.skip("no C compiler: the fallback is expected")
    assert decode.IMPLEMENTATION == "c" and decode._wire is not None
    code = "from polyprof.formats.xspace import IMPLEMENTATION as I; print(I)"
    env = {**os.environ, "POLYPROF_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.strip() == "python", out.stderr
