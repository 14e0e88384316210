"""White space between the values of ``traceEvents`` is read past in bounded memory and
linear time (audit audM, finding 6: two events with 25 MiB of spaces between them peaked
at 142 MB, and 1.5 GB of white space in a 23 MB ``.json.gz`` grew past 1.67 GB: a slice
holding no whole event was doubled until one came, so the run was held whole)."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError

EV = '{"ph":"X","cat":"cpu_op","name":"%s","pid":1,"tid":1,"ts":%d,"dur":5}'
B, C = EV % ("b", 10), EV % ("c", 20)
RUN = 16 << 20  # white space between two events: 16 MiB
#: the layouts: after the comma, before it, at the array's start and end, mixed white space
LAYOUTS = {
    "after comma": "{\"traceEvents\":[" + B + "," + " " * RUN + C + "]}",
    "before comma": "{\"traceEvents\":[" + B + " \n\t\r" * (RUN // 4) + "," + C + "]}",
    "array ends": "{\"traceEvents\":[" + " " * RUN + B + "," + C + "\n" * RUN + "]}",
    "array format": "[" + B + "," + "\r\n" * (RUN // 2) + C + "]",
}


def _names(t) -> list[str]:
    return sorted(t.strings[i] for i in t.events["name"])


def _peak_load(p: Path) -> tuple[object, int]:
    tracemalloc.start()
    try:
        t = polyprof.load(p)
        return t, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_white_space_between_events_is_not_held(layout: str, kineto_compiled: bool, tmp_path: Path) -> None:
    p = tmp_path / "ws.json"
    p.write_text(LAYOUTS[layout])
    t, peak = _peak_load(p)
    assert _names(t) == ["b", "c"] and t.events["start_ns"].tolist() == [10_000, 20_000]
    assert not t.metadata.get("warnings")
    assert peak < 6 << 20, f"{peak:,} bytes at the peak for {RUN:,} bytes of white space"  # before: > 50 MiB


def test_gzipped_white_space_streams(tmp_path: Path) -> None:
    p = tmp_path / "ws.json.gz"
    with gzip.open(p, "wb", compresslevel=1) as f:
        f.write(("{\"traceEvents\":[" + B + ",").encode())
        for i in range(48):  # 48 MiB of runs of spaces split by newlines (~100x: under the bomb limit)
            f.write(((" " * (97 + i) + "\n") * ((1 << 20) // (98 + i))).encode())
        f.write((C + "]}").encode())
    t, peak = _peak_load(p)
    assert _names(t) == ["b", "c"] and peak < 8 << 20, peak


def test_white_space_inside_a_string_is_kept(tmp_path: Path) -> None:
    p = tmp_path / "name.json"
    p.write_text("{\"traceEvents\":[" + B + "," + EV % (" " * (3 << 20), 20) + "]}")
    t = polyprof.load(p)
    assert sorted(len(n) for n in _names(t)) == [1, 3 << 20]


def test_a_comma_missing_after_white_space_is_refused_at_its_byte(tmp_path: Path) -> None:
    p = tmp_path / "missing.json"
    text = "{\"traceEvents\":[" + B + " " * (1 << 20) + C + "]}"
    p.write_text(text)
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(p)
    at = text.index(C)
    assert str(ei.value) == (f"{p}: invalid JSON (expected ',' or ']': "
                             f"line 1 column {at + 1:,} (byte {at:,}))")


def test_a_fault_after_white_space_is_said_at_its_byte(tmp_path: Path) -> None:
    p = tmp_path / "fault.json"
    text = "{\"traceEvents\":[" + B + "," + " " * (1 << 20) + C + ", {\"ph\": \"X\", \"name\" 1}]}"
    p.write_text(text)
    with pytest.raises(TraceFormatError, match=f"expected ':'.*byte {text.index(' 1}') + 1:,}"):
        polyprof.load(p)


def test_a_trailing_comma_before_white_space_is_repaired_and_said(tmp_path: Path) -> None:
    p = tmp_path / "trailing.json"
    p.write_text("{\"traceEvents\":[" + B + "," + " " * (1 << 20) + "]}")
    t = polyprof.load(p)
    assert _names(t) == ["b"] and t.metadata["warnings"] == ["kineto: JSON repaired: 1 trailing commas"]
    p.write_text(json.dumps({"traceEvents": []})[:-2] + " " * (1 << 20) + "]}")  # an empty array: nothing repaired
    assert polyprof.load(p).metadata["warnings"] == [
        "nothing polyprof reads: the trace has no events (no slices, instants or counters)"]
