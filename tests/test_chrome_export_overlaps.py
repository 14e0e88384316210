"""The Chrome JSON export (``-f chrome``, ``formats/chrome.py:write``) nests strictly on
every thread: a complete event ("X") that starts inside another of its (pid, tid) and
ends after it goes to an extra thread "<thread> (overlap k)", by the same rule the
Perfetto export uses for its child tracks (``formats/slice_lanes.py``).

Before, such slices were written on their own thread: 2967 on ``tpu_inference_2``, 15 on
``mtia_inference_rank0``, 8 on ``a100_alexnet_small`` (Stream Sync on stream 7), 3 on
``jax_cpu_mlp_scan`` ("train" on "python"). Perfetto's JSON importer spills each onto an
overflow track with an import error (``slice_spill_overlapping_complete_event``, its
own tests in tests/data/peers/perfetto/json_parser_tests.py), older versions drop it,
and chrome://tracing flags it as not nested. Perfetto's trace_processor cannot run here
(no binary offline), so the nesting is checked on the written JSON itself, in integer
nanoseconds as Perfetto's importer reads the microsecond times.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import polyprof
from polyprof.formats import chrome

TRACES = Path(__file__).resolve().parent / "data" / "traces"
CASES = ["xspace/tpu_inference_2.xplane.pb", "kineto/mtia_inference_rank0.json.gz",
         "kineto/a100_alexnet_small.json.gz", "xspace/jax_cpu_mlp_scan.xplane.pb"]
LANE = re.compile(r"^(.*) \(overlap \d+\)$")


def _ns(us: float) -> int:
    return round(us * 1000)


def _crossings(events: list[dict]) -> int:
    """Complete events that start inside an earlier one of their (pid, tid) and end after
    it (a slice starting where another ends is not inside it)."""
    by_thread: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        s = _ns(e["ts"])
        by_thread[(e["pid"], e["tid"])].append((s, s + _ns(e["dur"])))
    bad = 0
    for spans in by_thread.values():
        stack: list[int] = []  # open ends, innermost last
        for s, end in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            if stack and end > stack[-1]:
                bad += 1
                continue  # (as an importer that spills it: the stack stays as it was)
            stack.append(end)
    return bad


def _base(name: str) -> str:
    m = LANE.match(name)
    return m.group(1) if m else name


@pytest.mark.parametrize("name", CASES)
def test_chrome_export_nests_on_every_thread(tmp_path: Path, name: str) -> None:
    trace = polyprof.load(TRACES / name)
    out = chrome.write(trace, tmp_path / "x.json")
    events = json.loads(out.read_text())["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    assert _crossings(xs) == 0

    # every event kept, with its duration, on its process and (lanes aside) its thread
    dur = trace.events["dur_ns"]
    assert len(xs) == int((dur > 0).sum())
    assert sum(_ns(e["dur"]) for e in xs) == int(dur.sum())
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "thread_name"}
    sort = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in events
            if e.get("ph") == "M" and e["name"] == "thread_sort_index"}
    pids = chrome._pids(trace)
    want: Counter = Counter()
    for tr, d in zip(trace.events["track"].tolist(), dur.tolist()):
        if d > 0:
            t = trace.tracks[tr]
            want[(pids[t.plane], t.name)] += d
    got: Counter = Counter()
    lanes = set()
    for e in xs:
        key = (e["pid"], e["tid"])
        got[(e["pid"], _base(thread[key]))] += _ns(e["dur"])
        if LANE.match(thread[key]):
            lanes.add(key)
    assert got == want
    # a lane sorts beside its thread (same sort index as the thread of that name)
    base_sort = {(p, n): sort[(p, t)] for (p, t), n in thread.items() if not LANE.match(n)}
    for p, t in lanes:
        assert sort[(p, t)] == base_sort[(p, _base(thread[(p, t)]))]
    # flows stay on the thread of the slice they leave or reach
    starts = {(e["pid"], e["tid"], e["ts"]) for e in events if e.get("ph") in ("X", "i")}
    assert all((e["pid"], e["tid"], e["ts"]) in starts for e in events if e.get("ph") in ("s", "f"))

    # read back: the same events and durations, on the same planes and threads by name,
    # each lane's events back on its thread (formats/kineto/build.pair_tracks)
    back = polyprof.load(out)
    assert back.n_events == trace.n_events
    assert not [tr.name for tr in back.tracks if LANE.match(tr.name)]
    assert {tr.name for tr in back.tracks} <= {tr.name for tr in trace.tracks}
    assert int(back.events["dur_ns"].sum()) == int(dur.sum())

    def per_track(t: polyprof.Trace) -> Counter:
        c: Counter = Counter()
        for tr, d in zip(t.events["track"].tolist(), t.events["dur_ns"].tolist()):
            track = t.tracks[tr]
            c[(t.planes[track.plane].name, _base(track.name))] += d
        return c

    assert per_track(back) == per_track(trace)
    # every flow bound back (before: the lanes' pairs came last in the reader's pair table,
    # out of the order its search needs; TraceLens' DDP trace lost 1,055 launch flows)
    assert len(back.flows["src"]) == len(trace.flows["src"]) and not back.metadata.get("warnings"), \
        back.metadata.get("warnings")


def test_the_overlapping_slices_are_the_ones_the_perfetto_export_moves(tmp_path: Path) -> None:
    """alexnet: the 8 Stream Sync slices that cross a kernel on stream 7 go to the
    thread "stream 7 (overlap 1)" (the Perfetto export's track of that name)."""
    trace = polyprof.load(TRACES / "kineto/a100_alexnet_small.json.gz")
    events = json.loads(chrome.write(trace, tmp_path / "x.json").read_text())["traceEvents"]
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "thread_name"}
    moved = [e for e in events if e.get("ph") == "X" and LANE.match(thread[(e["pid"], e["tid"])])]
    assert {thread[(e["pid"], e["tid"])] for e in moved} == {"stream 7 (overlap 1)"}
    assert len(moved) == 8 and {e["name"] for e in moved} == {"Stream Sync"}
