"""Step numbers that repeat in one trace (several profiler sessions or schedule cycles in
one file, a counter that restarts, copies end to end): each occurrence is its own step,
numbered 0..n-1 in time order, not one window spanning every occurrence.

The trace is the real V100 Kineto trace written twice into one file at test time, the
second copy moved later by the trace's span (and its correlation, external and flow ids
past the first copy's, as a later session's would be), its ``ProfilerStep#N`` kept."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.frames import column
from polyprof.analyze.steps import step_stats
from polyprof.analyze.window import Window, view
from polyprof.derive.cache import steps as cached_steps

V100 = Path(__file__).parent / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"
_TS = re.compile(rb'"ts": ?(\d+)(?:\.(\d{1,3}))?\b')
_IDS = re.compile(rb'"(id|correlation|External id)": ?(\d+)\b')


def _twice(src: Path, out: Path) -> Path:
    """``src``'s events, then a copy of them one span later (times as text, exact to the ns)."""
    raw = gzip.open(src, "rb").read()
    m = re.search(rb'"traceEvents"\s*:\s*\[', raw)
    end = re.compile(rb"}\s*\]\s*(,\s*\"|})").search(raw, m.end()) if m else None
    assert m and end
    text = raw[m.end():end.start() + 1]
    ns = [int(a) * 1000 + int((b or b"0").ljust(3, b"0")) for a, b in _TS.findall(text)]
    span = max(ns) - min(ns) + 1_000_000
    top = max(int(v) for _, v in _IDS.findall(text)) + 1

    def ts(mm: re.Match[bytes]) -> bytes:
        v = int(mm.group(1)) * 1000 + int((mm.group(2) or b"0").ljust(3, b"0")) + span
        return b'"ts": %d.%03d' % (v // 1000, v % 1000)

    def ids(mm: re.Match[bytes]) -> bytes:
        return b'"%s": %d' % (mm.group(1), int(mm.group(2)) + top)

    second = _IDS.sub(ids, _TS.sub(ts, text))
    assert second.count(b"ProfilerStep#") == text.count(b"ProfilerStep#") > 0
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(raw[:m.end()] + text + b",\n" + second + raw[end.start() + 1:])
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[polyprof.Trace, polyprof.Trace]:
    doubled = _twice(V100, tmp_path_factory.mktemp("steps") / "v100_twice.json.gz")
    return polyprof.load(V100), polyprof.load(doubled)


def test_each_occurrence_is_its_own_step(pair):
    one, two = pair
    a, b = cached_steps(one), cached_steps(two)
    assert not a.renumbered and a.number.tolist() == [101, 102, 103, 104, 105]
    assert len(b) == 2 * len(a) and b.renumbered
    assert b.number.tolist() == list(range(2 * len(a)))  # time order
    assert b.original is not None and b.original.tolist() == a.number.tolist() * 2
    np.testing.assert_array_equal(b.end - b.start, np.tile(a.end - a.start, 2))
    assert (b.start[1:] >= b.end[:-1]).all()  # disjoint windows, not one spanning both copies
    assert "repeat" in b.describe() and a.describe() == "ProfilerStep"


def test_step_stats_and_selection_per_occurrence(pair):
    one, two = pair
    sa, sb = step_stats(one), step_stats(two)
    host_a, host_b = column(sa, "host_ns"), column(sb, "host_ns")
    np.testing.assert_array_equal(host_b, np.tile(host_a, 2))
    for col in ("busy_ns", "compute_ns", "idle_ns", "activities", "launch_count"):
        np.testing.assert_array_equal(column(sb, col), np.tile(column(sa, col), 2))
    assert column(sb, "step").tolist() == list(range(10)) and column(sa, "step").tolist()[0] == 101
    # --steps 5:6 is the second copy's first step, the original's first step again
    sel = cached_steps(view(two, Window(start=5, stop=6)))
    assert sel.number.tolist() == [5] and sel.original is not None and sel.original.tolist() == [101]
    assert int(sel.end[0] - sel.start[0]) == int(host_a[0])


def test_critical_path_per_step_as_for_one_copy(pair):
    one, two = pair
    ca, cb = critical_path(one), critical_path(two)
    na = len(cached_steps(one))

    def per_step(cp: object, steps: list[int]) -> list[tuple[int, int]]:
        st = column(cp, "step")
        return [(int((st == s).sum()), int(column(cp, "on_path_ns")[st == s].sum())) for s in steps]

    first = per_step(ca, [101, 102, 103, 104, 105])
    assert all(n > 0 and on > 0 for n, on in first)
    assert per_step(cb, list(range(na))) == first
    assert per_step(cb, list(range(na, 2 * na))) == first


def test_summary_says_once_that_numbers_repeat(pair):
    from rich.console import Console

    from polyprof.report.terminal import print_summary

    _, two = pair
    buf = io.StringIO()
    print_summary(two, console=Console(file=buf, width=200))
    text = buf.getvalue()
    assert text.count("step numbers repeat") == 1
    assert "9 steps" in text and "numbered 0, 1, 2, ... in time order" in text  # 10 steps, first skipped


def test_one_step_on_several_threads_stays_one(tmp_path):
    """Marks of one number that overlap (one step marked on two threads) are one step with
    their widest span; the same number again after they ended is a second step."""
    import json

    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": t, "ts": ts,
           "dur": dur} for t, ts, dur in [(1, 0, 100), (2, 10, 120), (1, 300, 100), (2, 290, 50)]]
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 10})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    s = cached_steps(polyprof.load(path))
    assert s.number.tolist() == [0, 1] and s.original is not None and s.original.tolist() == [3, 3]
    assert s.start.tolist() == [0, 290_000] and s.end.tolist() == [130_000, 400_000]


def test_store_window_by_window_numbers_as_whole(pair, tmp_path, capsys, monkeypatch):
    """A store's rank summarised window by window (ranks/stepwise.py, bound forced low)
    numbers the repeated steps as the rank read whole does: the same bytes."""
    import orjson

    from polyprof.cli import main
    from polyprof.ranks import fits, stepwise

    doubled = _twice(V100, tmp_path / "rank0.json.gz")
    store = polyprof.load_ranks([doubled]).convert(tmp_path / "s", chunk_rows=20000)

    def summary(*args: str) -> bytes:
        assert main(["summary", str(store), *args]) == 0
        return capsys.readouterr().out.encode()

    whole = summary("--json")
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", str((fits.BASE_BYTES >> 20) + 1))
    seen: list[object] = []
    real = stepwise.summarise
    monkeypatch.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    windowed = summary("--json")
    assert seen, "the windowed path ran"
    assert windowed == whole
    doc = orjson.loads(whole)
    assert "step numbers repeat" in doc["overview"]["per_rank"]["0"]["step_source"]
    steps = [r["step"] for r in doc["tables"]["step_stats"]["records"]]
    assert steps == list(range(1, 10))  # the default window: every step but the first
