"""Perfetto's own JSON importer tests (google/perfetto
test/trace_processor/diff_tests/parser/json/tests.py, Apache-2.0, kept unchanged in
tests/data/peers/perfetto): each case's trace read by polyprof, checked against the
slices and counters Perfetto's expected output lists.

Perfetto's queries are SQL over its own tables; what polyprof has the same of is
compared: every expected slice (ts, dur, name) is a polyprof event (a slice Perfetto
leaves open, dur -1, is one polyprof closes at the end of the trace, marked
``incomplete``), counter values by name, and the cases where Perfetto keeps nothing
keep nothing. Cases about tables polyprof does not have are listed in ``NOT_COMPARED``
with the reason.
"""

from __future__ import annotations

import ast
import csv
import io
import textwrap
from collections import Counter
from pathlib import Path

import pytest

import polyprof
from polyprof.trace import keys

SUITE = Path(__file__).parent / "data" / "peers" / "perfetto" / "json_parser_tests.py"

NOT_COMPARED = {
    "test_json_trace_metadata": "Perfetto's metadata table (the trace's top-level keys: polyprof keeps them in "
                                "Trace.metadata, not per key)",
    "test_json_sort_index_hints": "process/thread sort-index hints (polyprof keeps thread_sort_index only)",
    "test_json_sort_index_ordering": "idem",
    "test_json_thread_state": "ph T (thread states): not read, counted in the warning",
    "test_json_thread_state_sched": "idem",
    "test_overlapping_complete_event_import_log": "Perfetto's import log; both keep both slices",
    "test_json_metadata_missing_or_invalid_ts": "process names of processes without events (polyprof makes no "
                                                "plane for them); the file loads (checked below)",
}
#: expected slices polyprof reads otherwise, and why
DIFFERENT = {
    # B "BeginEvent" ... E "EndEvent" on one thread: Perfetto leaves the B open (the E names
    # another slice); polyprof closes the innermost open B with any E, as Chrome's viewer
    ("test_json_all_slice_types", "BeginEvent"): (100000, 100000),
    ("test_json_flow", "BeginEvent"): (100000, 100000),
    ("test_json_extreme_vals", "BeginNoTTS"): (1100000, 100000),
}


def cases() -> dict[str, tuple[str, str]]:
    """name -> (trace JSON, expected CSV) of every DiffTestBlueprint in the suite."""
    out = {}
    for node in ast.walk(ast.parse(SUITE.read_text())):
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        call = next(n for n in ast.walk(node) if isinstance(n, ast.Call) and getattr(n.func, "id", "") ==
                    "DiffTestBlueprint")
        kw = {k.arg: k.value for k in call.keywords}
        text = lambda v: textwrap.dedent(v.args[0].value).strip()  # noqa: E731  Json('''...''') / Csv("""...""")
        out[node.name] = (text(kw["trace"]), text(kw["out"]))
    return out


CASES = cases()


def load(name: str, tmp_path: Path):
    p = tmp_path / f"{name}.json"
    p.write_text(CASES[name][0] + "\n")
    return polyprof.load(p)


def expected(name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(CASES[name][1])))


def slices(t) -> Counter:
    ev = t.events
    return Counter((int(ev["start_ns"][i]), int(ev["dur_ns"][i]), t.strings[ev["name"][i]]) for i in range(t.n_events))


def test_the_suite_is_read_whole():
    assert len(CASES) >= 30 and set(NOT_COMPARED) <= set(CASES)


@pytest.mark.parametrize("name", [n for n in CASES if n not in NOT_COMPARED])
def test_expected_slices_are_polyprofs(name: str, tmp_path: Path) -> None:
    t = load(name, tmp_path)
    rows = expected(name)
    have = slices(t)
    incomplete = t.stats.get(keys.INCOMPLETE)
    open_rows = set(incomplete.rows.tolist()) if incomplete is not None else set()
    if rows and {"ts", "dur", "name"} <= set(rows[0]):
        for r in {(r["ts"], r["dur"], r["name"]) for r in rows}:
            ts, dur, nm = int(r[0]), int(r[1]), r[2]
            if (name, nm) in DIFFERENT:
                assert dur == -1 and ts == DIFFERENT[name, nm][0] and have[(ts, DIFFERENT[name, nm][1], nm)] == 1
            elif dur >= 0:
                assert have[(ts, dur, nm)] >= 1, (r, sorted(have))
            else:  # open in Perfetto: closed at the trace's end by polyprof, marked incomplete
                found = [i for i in range(t.n_events) if int(t.events["start_ns"][i]) == ts and
                         t.strings[t.events["name"][i]] == nm]
                assert found and set(found) <= open_rows, r


def test_async_slices_by_id_and_id2(tmp_path: Path) -> None:
    for name in ("test_json_id2_global_string_id", "test_json_id2_local_string_id", "test_json_id2_global_int_id",
                 "test_json_id2_local_int_id"):
        t = load(name, tmp_path)
        r = expected(name)[0]
        assert slices(t)[(int(r["ts"]), int(r["dur"]), r["name"])] == 1
        assert [(tr.name, tr.kind) for tr in t.tracks if tr.kind == "async"] == [(r["track_name"], "async")]
    t = load("test_json_async", tmp_path)  # plain ids (Perfetto's global async tracks), with or without cat
    assert slices(t) == Counter({(2000000, 100000, "AsyncMissingCat"): 1, (2200000, 100000, "AsyncEmptyStringId"): 1,
                                 (2400000, 100000, "AsyncMissingCatEmptyStringId"): 1})
    t = load("test_json_id2", tmp_path)  # id2 {"": ...} names no scope: dropped, as Perfetto, and said
    assert [n for (_, _, n) in slices(t)] == ["AsyncId2StandardGlobalKey"]
    assert t.metadata["warnings"] == ["kineto: events not imported: 1 async b events without an id or pid, "
                                      "1 async e events without an id or pid"]
    t = load("test_args_ordered", tmp_path)  # args of async slices, in a file with trailing commas
    got = {(t.strings[t.events["name"][r]], k, int(v)) for k in ("01.step1", "02.step2")
           for r, v in zip(t.stats[k].rows.tolist(), t.stats[k].values.tolist())}
    assert got == {(r["name"], r["key"].removeprefix("args."), int(r["int_value"])) for r in expected(
        "test_args_ordered")}


def test_counter_values_written_as_strings(tmp_path: Path) -> None:
    t = load("test_json_counter_args", tmp_path)
    got = {n: v for n, v in zip((t.strings[i] if isinstance(i, (int,)) or hasattr(i, "item") else i
                                 for i in t.counters["name"]), t.counters["value"].tolist())}
    # Perfetto names an arg of a counter "name key", polyprof "name.key"
    want = {r["name"].replace(" ", ".", 1): float(r["value"]) for r in expected("test_json_counter_args")
            if r["name"] != "[NULL]"}
    assert got == pytest.approx(want)
    assert t.metadata["warnings"] == ["kineto: events not imported: 5 counter values that are not numbers"]


def test_what_perfetto_drops_is_dropped_and_counted(tmp_path: Path) -> None:
    for name in ("test_invalid_string_ts_and_dur", "test_string_ts_trailing_chars"):
        t = load(name, tmp_path)
        assert t.n_events == 0 and expected(name) == []
        assert t.metadata["warnings"] == ["kineto: events not imported: 1 X events whose dur is not a number, "
                                          "1 events whose ts is not a number"]
    t = load("test_json_metadata_missing_or_invalid_ts", tmp_path)  # metadata whose ts is not a number: kept
    assert t.metadata.get("warnings") == [  # nothing dropped; only metadata, no events: said
        "nothing polyprof reads: the trace has no events (no slices, instants or counters)"]
    p = tmp_path / "object_ts.json"  # an object for a ts, in the sliced path of a long file
    good = b'{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 1.000, "dur": 1.000},' * 20000
    p.write_bytes(b'{"traceEvents": [' + good + b'{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": {"a": 1}}]}')
    t = polyprof.load(p)
    assert t.n_events == 20000 and t.metadata["warnings"] == [
        "kineto: events not imported: 1 events whose ts is not a number"]


def test_repairs_and_phase_letters(tmp_path: Path) -> None:
    t = load("test_json_trailing_comma", tmp_path)
    assert slices(t) == Counter((int(r["ts"]), int(r["dur"]), r["name"]) for r in expected("test_json_trailing_comma"))
    assert t.metadata["warnings"] == ["kineto: JSON repaired: 1 trailing commas"]
    t = load("test_json_pid_tid_zero", tmp_path)  # raw newlines inside strings
    assert slices(t) == Counter((int(r["ts"]), int(r["dur"]), r["name"]) for r in expected("test_json_pid_tid_zero"))
    t = load("test_string_pid_tid", tmp_path)  # "ph": "XXX" is X; string pid and tid name the thread
    assert slices(t) == Counter({(5100, 500100, "name.exec"): 1})
    assert [tr.name for tr in t.tracks] == ["foo/bar"]


@pytest.mark.parametrize("version, want", [
    # Perfetto test/trace_processor/diff_tests/parser/parsing/tests.py test_flow_events_json_v1 / _v2
    ("v1", {("SenderB", "Blergh"), ("SenderA", "OtherSlice"), ("OtherSlice", "SomeSlice")}),
    ("v2", {("SenderB", "Blergh"), ("SenderA", "OtherSlice"), ("OtherSlice", "SomeSlice"),
            ("OtherSlice", "SomeOtherSlice")}),
])
def test_flow_events(version: str, want: set) -> None:
    """Flows v1 (s/t/f events bound to slices) and v2 (bind_id with flow_in/flow_out on
    the slices): the same (slice out, slice in) pairs as Perfetto."""
    t = polyprof.load(SUITE.parent / f"flow_events_json_{version}.json")
    names = t.names()
    got = [(names[s], names[d]) for s, d in zip(t.flows["src"], t.flows["dst"])]
    assert len(got) == len(want) and set(got) == want
    assert not t.metadata.get("warnings")
