"""A Kineto event without a ``ts`` (or with ``"ts": null``) is dropped and said, not read
at time 0 (audit audM, finding 3: one damaged byte, ``"{s"`` for ``"ts"``, in a 1M-event
trace made its span 5,143,946 s, without a word). Metadata (``ph: M``) needs no ``ts``.
Both paths, the compiled tokenizer and msgspec's, drop the same events."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path

import pytest

import polyprof
from polyprof.cli import main

T0 = 5143939483270.0  # µs: an epoch-like clock, as Kineto writes


def _events(missing: dict) -> list[dict]:
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "host"}},  # no ts: fine
           {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": T0, "dur": 10},
           missing,
           {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": T0 + 20, "dur": 10}]
    return evs


_DAMAGED = {  # one event each, its ts lost
    "X": {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "dur": 10},
    "X null": {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": None, "dur": 10},
    "X {s": {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "{s": T0 + 10, "dur": 10},
    "i": {"ph": "i", "name": "b", "pid": 1, "tid": 1, "s": "t"},
    "B": {"ph": "B", "name": "b", "pid": 1, "tid": 1},
    "C": {"ph": "C", "name": "b", "pid": 1, "args": {"v": 1}},
}


@pytest.mark.parametrize("kind", list(_DAMAGED))
def test_an_event_without_ts_is_dropped_and_said(kind: str, kineto_compiled: bool, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    p = tmp_path / "no_ts.json"
    p.write_text(json.dumps({"traceEvents": _events(_DAMAGED[kind])}))
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        t = polyprof.load(p)
    assert t.n_events == 2 and sorted(t.strings[i] for i in t.events["name"]) == ["a", "c"]
    assert t.events["start_ns"].min() == int(T0 * 1000)
    span = int((t.events["start_ns"] + t.events["dur_ns"]).max() - t.events["start_ns"].min())
    assert span == 30_000  # 30 µs; before: from time 0, 5,143,939 s
    assert not len(t.counters.get("ts_ns", [])) or t.counters["ts_ns"].min() > 0
    assert t.metadata["warnings"] == [
        "kineto: events not imported: 1 events without a ts (a damaged file?)"]
    assert any(str(p) in r.getMessage() and "1 events without a ts" in r.getMessage() for r in caplog.records)
    assert t.planes[0].properties["process_name"] == "host"  # the metadata event without a ts: kept


def test_events_without_ts_in_a_long_file_are_counted(tmp_path: Path) -> None:
    """In the sliced path of a long file (many slices), every one is counted."""
    good = [{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": T0 + i, "dur": 1} for i in range(30000)]
    for i in range(0, 30000, 7000):
        del good[i]["ts"]
    p = tmp_path / "long.json"
    p.write_text(json.dumps({"traceEvents": good}))
    t = polyprof.load(p)
    assert t.n_events == 30000 - 5
    assert t.events["start_ns"].min() == int((T0 + 1) * 1000)
    assert t.metadata["warnings"] == ["kineto: events not imported: 5 events without a ts (a damaged file?)"]


def test_the_cli_says_it(tmp_path: Path) -> None:
    p = tmp_path / "no_ts.json"
    p.write_text(json.dumps({"traceEvents": _events(_DAMAGED["X"])}))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["summary", str(p)])
    text = out.getvalue() + err.getvalue()
    assert rc in (0, None) and "trace span 30 µs" in text and "5143939 s" not in text
