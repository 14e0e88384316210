"""Kineto / Chrome JSON reader and writer against the real traces in tests/data/traces/kineto.

Expected values are computed here from the raw JSON with the standard library (json,
gzip, Decimal for exact times), independently of the reader.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats import chrome, kineto
from polyprof.writers import kineto as kineto_writer
from polyprof.formats.detect import load as load_any

KINETO_DIR = Path(__file__).resolve().parent / "data" / "traces" / "kineto"
FILES = sorted(KINETO_DIR.glob("*.json.gz"))
EVENT_PHASES = {"X", "i", "I", "B"}  # E closes a B; it is not an event of its own


def raw(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def events_of(doc) -> list[dict]:
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def exact_ns(doc: dict, ts) -> int:
    base = doc.get("baseTimeNanoseconds", 0) if isinstance(doc, dict) else 0
    return int(base) + int(Decimal(ts) * 1000)


def expected_devices(doc) -> set[str]:
    """Device planes from the process labels (e.g. "GPU 0") of pids that have events."""
    labels = {e["pid"]: e["args"].get("labels") for e in events_of(doc)
              if e.get("ph") == "M" and e.get("name") == "process_labels"}
    with_events = {e["pid"] for e in events_of(doc) if e.get("ph") in EVENT_PHASES}
    out = set()
    for pid, lab in labels.items():
        m = re.fullmatch(r"([A-Za-z]+) (\d+)", lab or "")
        if m and m.group(1) != "CPU" and pid in with_events:
            out.add(f"/device:{m.group(1)}:{m.group(2)}")
    return out


@pytest.fixture(scope="module")
def loaded() -> dict[str, tuple]:
    return {p.name: (kineto.load(p), raw(p)) for p in FILES}


def test_shared_traces_present():
    assert len(FILES) >= 10, f"expected the shared Kineto traces in {KINETO_DIR}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_event_count_devices_rank(path: Path, loaded):
    trace, doc = loaded[path.name]
    evs = events_of(doc)
    phases = Counter(e.get("ph") for e in evs)
    assert trace.n_events == sum(phases[p] for p in EVENT_PHASES)
    devices = {p.name for p in trace.planes if p.kind == "device"}
    assert devices == expected_devices(doc)
    assert any(p.name == "/host:CPU" and p.kind == "host" for p in trace.planes)
    dist = doc.get("distributedInfo") or {}
    if "rank" in dist:
        assert trace.metadata["rank"] == dist["rank"]
    else:  # no rank is made up
        assert trace.metadata.get("rank") is None
    if "world_size" in dist:
        assert trace.metadata["world_size"] == dist["world_size"]
    assert trace.metadata["clock"] == "wall"
    assert trace.metadata["source"]["format"] == "kineto"
    assert trace.metadata["schemaVersion"] == doc["schemaVersion"]
    # every category string of the file is kept as-is
    assert set(trace.categories().tolist()) == {e.get("cat", "") for e in evs if e.get("ph") in EVENT_PHASES}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_some_events_match_raw_json(path: Path, loaded):
    trace, doc = loaded[path.name]
    xs = [e for e in events_of(doc) if e.get("ph") == "X"]
    picks = {id(e): e for e in [xs[0], xs[len(xs) // 2], xs[-1]]}
    for cat in ("kernel", "cuda_runtime", "gpu_memcpy", "cpu_op", "mtia_runtime"):
        e = next((x for x in xs if x.get("cat") == cat), None)
        if e is not None:
            picks[id(e)] = e
    names, starts, durs = trace.names(), trace.start_ns, trace.dur_ns
    corr = trace.stat_dense("correlation_id", -1)
    ext = trace.stat_dense("external_id", -1)
    for e in picks.values():
        start = exact_ns(doc, e["ts"])
        rows = np.flatnonzero((starts == start) & (names == e["name"]))
        assert len(rows), f"no event {e['name']!r} at {start} ns"
        dur = int(Decimal(e.get("dur", 0)) * 1000)
        rows = rows[durs[rows] == dur]
        assert len(rows), f"{e['name']!r}: no event with duration {dur} ns"
        args = e.get("args", {})
        if "correlation" in args:
            assert int(args["correlation"]) in corr[rows].tolist()
        if "External id" in args:
            assert int(args["External id"]) in ext[rows].tolist()
        r = int(rows[0])
        stats = trace.event_stats(r)
        if isinstance(args.get("stream"), int):
            assert stats["stream"] == args["stream"]
        if isinstance(args.get("device"), int):
            assert stats["device"] == args["device"]
        assert trace.categories([r])[0] == e.get("cat", "")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_flows_link_what_kineto_links(path: Path, loaded):
    trace, doc = loaded[path.name]
    ends = defaultdict(set)
    for e in events_of(doc):
        if e.get("ph") in ("s", "f"):
            ends[(e.get("cat"), e.get("id"))].add(e["ph"])
    pairs = sum(1 for v in ends.values() if v == {"s", "f"})
    n_flows = len(trace.flows["src"])
    assert n_flows <= pairs
    assert n_flows >= 0.95 * pairs  # endpoints that bind to no event are dropped
    corr = trace.stat_dense("correlation_id", -1)
    fl = trace.flows
    ac2g = fl["category"] == trace.string_id("ac2g")
    if ac2g.any():  # a launch and what it launched share Kineto's correlation id = flow id
        assert np.mean(corr[fl["dst"][ac2g]] == fl["id"][ac2g]) > 0.99
        assert np.mean(corr[fl["src"][ac2g]] == fl["id"][ac2g]) > 0.99
        planes = trace.track_plane[trace.events["track"]]
        src_kind = {trace.planes[p].kind for p in planes[fl["src"][ac2g]].tolist()}
        assert src_kind == {"host"}


def test_ns_resolution_times_are_exact(loaded):
    trace, doc = loaded["v100_ns_resolution_rank0.json.gz"]
    xs = [e for e in events_of(doc) if e.get("ph") == "X"]
    assert any(str(e["ts"]).split(".")[-1] not in ("0", "000") for e in xs)
    expected = sorted(exact_ns(doc, e["ts"]) for e in xs)
    got = np.sort(trace.start_ns[trace.dur_ns >= 0])
    xrows = np.isin(trace.start_ns, np.array(expected, np.int64))
    assert xrows.sum() >= len(xs)
    assert set(expected) <= set(got.tolist())


def test_relative_timestamps_use_base(loaded):
    trace, doc = loaded["a100_nccl_rank0.json.gz"]
    assert doc["baseTimeNanoseconds"] > 10 ** 18
    first = min(exact_ns(doc, e["ts"]) for e in events_of(doc) if e.get("ph") == "X")
    assert int(trace.start_ns.min()) == first


def test_vendors_and_device_properties(loaded):
    def dev(name):
        return next(p for p in loaded[name][0].planes if p.kind == "device")
    assert dev("mi250_rocm_minitoy.json.gz").vendor == "AMD"
    assert dev("a100_nccl_rank0.json.gz").vendor == "NVIDIA"
    mtia = dev("mtia_inference_rank0.json.gz")
    assert (mtia.name, mtia.vendor) == ("/device:MTIA:17", "Meta")
    assert mtia.properties["name"] == "ARTEMIS"
    a100 = dev("a100_alexnet_small.json.gz")
    assert a100.properties["name"].startswith("NVIDIA A100") and a100.properties["numSms"] == 108
    # device tracks are streams, host tracks threads
    t, _ = loaded["a100_nccl_rank0.json.gz"]
    for track in t.tracks:
        assert track.kind == ("stream" if t.planes[track.plane].kind == "device" else "thread")
    assert {tr.name for tr in t.tracks if tr.kind == "stream"} >= {"stream 7"}


def test_several_host_processes_get_distinct_planes(loaded):
    trace, doc = loaded["triton_example.json.gz"]
    hosts = [p for p in trace.planes if p.kind == "host"]
    assert len(hosts) == 2 and len({p.name for p in hosts}) == 2
    assert {p.pid for p in hosts} == {1670242, 3100453}


def test_small_slices_give_the_same_trace(monkeypatch):
    """Cutting the events array into tiny slices must not change anything."""
    path = KINETO_DIR / "mi250_rocm_minitoy.json.gz"
    whole = kineto.load(path)
    monkeypatch.setattr(kineto.slicing, "CHUNK_BYTES", 700)
    sliced = kineto.load(path)
    assert sliced.n_events == whole.n_events
    for k in ("track", "start_ns", "dur_ns"):
        assert np.array_equal(sliced.events[k], whole.events[k])
    assert sliced.names().tolist() == whole.names().tolist()
    assert sliced.categories().tolist() == whole.categories().tolist()
    assert sorted(sliced.stats) == sorted(whole.stats)
    for k in whole.stats:
        assert np.array_equal(sliced.stats[k].rows, whole.stats[k].rows)
        assert sliced.stats[k].values.tolist() == whole.stats[k].values.tolist()
    assert np.array_equal(sliced.flows["src"], whole.flows["src"])
    assert np.array_equal(sliced.flows["dst"], whole.flows["dst"])


def write_json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_chrome_phases_b_e_counters_flows_array_format(tmp_path: Path):
    evs = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "demo"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "main"}},
        {"ph": "B", "name": "outer", "cat": "user_annotation", "pid": 7, "tid": 1, "ts": 10, "args": {"a": 1}},
        {"ph": "X", "name": "op", "cat": "cpu_op", "pid": 7, "tid": 1, "ts": 12, "dur": 3.5,
         "args": {"External id": 5, "shape": [[1, 2]], "flag": True}},
        {"ph": "s", "id": "0x1", "cat": "link", "name": "link", "pid": 7, "tid": 1, "ts": 13},
        {"ph": "t", "id": "0x1", "cat": "link", "name": "link", "pid": 7, "tid": 2, "ts": 21},
        {"ph": "f", "id": "0x1", "cat": "link", "name": "link", "pid": 7, "tid": 2, "ts": 30, "bp": "e"},
        {"ph": "E", "pid": 7, "tid": 1, "ts": 20, "args": {"b": "x"}},
        {"ph": "X", "name": "a", "cat": "cpu_op", "pid": 7, "tid": 2, "ts": 20, "dur": 5},
        {"ph": "X", "name": "b", "cat": "cpu_op", "pid": 7, "tid": 2, "ts": 29, "dur": 5},
        {"ph": "B", "name": "never closed", "pid": 7, "tid": 2, "ts": 40},
        {"ph": "C", "name": "mem", "pid": 7, "ts": 15, "args": {"used": 100}},
        {"ph": "C", "name": "mem", "pid": 7, "ts": 25, "args": {"used": 50}},
        {"ph": "i", "name": "tick", "pid": 7, "tid": 1, "ts": 11, "s": "t"},
        {"ph": "P", "name": "sample", "pid": 7, "tid": 1, "ts": 11},
    ]
    # the JSON Array Format, with the closing bracket left out as Chrome allows
    p = tmp_path / "array.json"
    p.write_text(json.dumps(evs)[:-1] + ",\n")
    t = kineto.load(p)
    assert t.n_events == 6
    names = t.names().tolist()
    outer = names.index("outer")
    assert t.dur_ns[outer] == 10_000 and t.event_stats(outer) == {"a": 1, "b": "x"}
    op = names.index("op")
    assert t.dur_ns[op] == 3_500
    assert t.event_stats(op) == {"external_id": 5, "shape": "[[1,2]]", "flag": 1}
    open_b = names.index("never closed")
    assert t.event_stats(open_b)["incomplete"] == 1
    # s (on op) -> t (on a) -> f (on b, bp=e)
    links = sorted(zip(t.names(t.flows["src"]).tolist(), t.names(t.flows["dst"]).tolist()))
    assert links == [("a", "b"), ("op", "a")]
    assert t.plane_by_name("/host:CPU").properties["process_name"] == "demo"
    assert {tr.name for tr in t.tracks} >= {"main"}
    assert t.counters["value"].tolist() == [100.0, 50.0]
    assert t.counters["ts_ns"].tolist() == [15_000, 25_000]
    assert t.metadata["clock"] == "unknown"
    assert any("ph=P" in w for w in t.metadata["warnings"])


#: B/E slices with ends and starts at the same time (catapult's test traces have many):
#: each (name, start, dur) in µs, as Chrome's and Perfetto's importers read them, in file order
_TIES = [
    ([("B", "a", 0), ("E", "a", 10), ("B", "b", 10), ("E", "b", 20)],
     {("a", 0, 10), ("b", 10, 10)}),  # one ends where the next starts: two slices, not nested
    ([("B", "p", 5), ("B", "z", 10), ("E", "z", 10), ("E", "p", 20)],
     {("p", 5, 15), ("z", 10, 0)}),  # a zero-length child at a time its parent is open
    ([("B", "p", 0), ("B", "c", 0), ("E", "c", 4), ("B", "d", 4), ("E", "d", 8), ("E", "p", 8)],
     {("p", 0, 8), ("c", 0, 4), ("d", 4, 4)}),  # children end to end, the last with its parent
]


@pytest.mark.parametrize("compiled", [True, False], ids=["tokenizer", "python"])
@pytest.mark.parametrize("case", range(len(_TIES)))
def test_b_e_at_the_same_time_pair_in_file_order(tmp_path: Path, case: int, compiled: bool, monkeypatch):
    events, want = _TIES[case]
    doc = {"traceEvents": [{"ph": ph, "name": n, "pid": 1, "tid": 1, "ts": ts} for ph, n, ts in events]}
    p = write_json(tmp_path / "ties.json", doc)
    if not compiled:
        from fuzz.differential import fallback

        with fallback():
            t = kineto.load(p)
    else:
        t = kineto.load(p)
    got = {(n, s // 1000, d // 1000) for n, s, d in zip(t.names().tolist(), t.events["start_ns"].tolist(),
                                                        t.events["dur_ns"].tolist())}
    assert got == want


def test_uncategorised_events_on_a_gpu_are_device_work_but_not_its_derived_lines(tmp_path: Path):
    """No ``cat`` anywhere (rpd2tracing's JSON, XProf's trace-viewer JSON): on a process
    named as a GPU, the streams' events are kernels, copies and fills by name; the lines a
    viewer derives from them (``XLA Ops``, ``Steps``) stay what they were; ``hip…``/
    ``cuda…`` calls on the host are runtime calls."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "Stream #7(Kernel)"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 99, "args": {"name": "XLA Ops"}},
          {"ph": "X", "name": "gemm_kernel", "pid": 1, "tid": 7, "ts": 10, "dur": 5},
          {"ph": "X", "name": "CopyHostToDevice", "pid": 1, "tid": 7, "ts": 16, "dur": 2},
          {"ph": "X", "name": "FillBuffer", "pid": 1, "tid": 7, "ts": 19, "dur": 1},
          {"ph": "X", "name": "dot.3", "pid": 1, "tid": 99, "ts": 10, "dur": 5},
          {"ph": "X", "name": "hipLaunchKernel", "pid": 2, "tid": 3, "ts": 8, "dur": 1},
          {"ph": "X", "name": "train_step", "pid": 2, "tid": 3, "ts": 0, "dur": 30}]
    t = kineto.load(write_json(tmp_path / "nocat.json", {"traceEvents": ev}))
    cats = dict(zip(t.names().tolist(), t.categories().tolist()))
    assert cats == {"gemm_kernel": "kernel", "CopyHostToDevice": "gpu_memcpy", "FillBuffer": "gpu_memset",
                    "dot.3": "", "hipLaunchKernel": "hip_runtime", "train_step": ""}


def test_trace_events_not_first_and_keys_after(tmp_path: Path):
    doc = {"deviceProperties": [{"id": 0, "name": "X"}], "traceEvents": [
        {"ph": "X", "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1.5, "dur": 1,
         "args": {"stream": "0x7", "device": 0, "correlation": 3}}],
        "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceName": "t", "distributedInfo": {"rank": 3}}
    t = kineto.load(write_json(tmp_path / "t.json", doc))
    assert t.start_ns.tolist() == [1_700_000_000_000_001_500]
    assert t.event_stats(0) == {"stream": 7, "device": 0, "correlation_id": 3}
    assert t.metadata["traceName"] == "t" and t.metadata["rank"] == 3
    assert [p.name for p in t.planes] == ["/device:GPU:0"]


BAD = {
    "empty.json": (b"", "empty"),
    "invalid.json": (b'{"traceEvents": [{"ph": "X",, "ts": 1}]}', "invalid JSON"),
    "not_trace.json": (b'{"a": 1}', "traceEvents"),
    "numbers.json": (b"[1, 2, 3]", "not an event object"),
    "events_not_list.json": (b'{"traceEvents": 5}', "not a list"),
    "cut.json": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X", "na', "invalid JSON"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_gives_one_clear_error(tmp_path: Path, name: str):
    data, problem = BAD[name]
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(TraceFormatError) as ei:
        kineto.load(p)
    assert str(p) in str(ei.value) and problem in str(ei.value)
    with pytest.raises(TraceFormatError) as ei2:  # through format detection too
        load_any(p)
    assert str(p) in str(ei2.value)


@pytest.mark.parametrize("isal_from", [0, 1 << 62], ids=["isal", "zlib"])
def test_gzip_reads_the_same_through_isal_and_zlib(tmp_path: Path, monkeypatch, isal_from: int):
    """Small gzip files are inflated by zlib, larger ones by ISA-L: either gives the same
    trace, and the same errors for a cut or garbled file."""
    from polyprof.formats import inflate as stream

    src = KINETO_DIR / "a100_alexnet_small.json.gz"
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    want = kineto.load(plain)
    monkeypatch.setattr(stream, "ISAL_FROM_BYTES", isal_from)
    assert stream.inflater(src.stat().st_size).__name__ == ("isal.isal_zlib" if isal_from == 0 else "zlib")
    got = kineto.load(src)
    assert got.n_events == want.n_events > 0
    for col in ("start_ns", "dur_ns", "name", "track"):
        assert np.array_equal(got.events[col], want.events[col])
    raw_gz = src.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw_gz[: len(raw_gz) // 2])
    with pytest.raises(TraceFormatError, match="truncated gzip"):
        kineto.load(cut)
    bad = tmp_path / "garbage.json.gz"
    bad.write_bytes(raw_gz[:20] + bytes(range(256)) * 4)
    with pytest.raises(TraceFormatError, match="corrupt gzip data"):
        kineto.load(bad)


def test_truncated_gzip(tmp_path: Path):
    src = (KINETO_DIR / "a100_alexnet_small.json.gz").read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(src[: len(src) // 2])
    with pytest.raises(TraceFormatError) as ei:
        kineto.load(p)
    assert str(p) in str(ei.value) and "truncated gzip" in str(ei.value)
    p2 = tmp_path / "garbage.json.gz"
    p2.write_bytes(src[:20] + bytes(range(256)) * 4)
    with pytest.raises(TraceFormatError) as ei:
        kineto.load(p2)
    assert "gzip" in str(ei.value)


@pytest.mark.parametrize("name", ["a100_nccl_rank0.json.gz", "mtia_inference_rank0.json.gz",
                                  "mi250_rocm_minitoy.json.gz", "triton_example.json.gz"])
def test_chrome_export_of_kineto(tmp_path: Path, loaded, name: str):
    trace, doc = loaded[name]
    out = chrome.write(trace, tmp_path / "out.json")
    exported = json.loads(out.read_text())
    x = sum(1 for e in exported["traceEvents"] if e["ph"] == "X")
    assert x == sum(1 for e in events_of(doc) if e.get("ph") == "X" and Decimal(e.get("dur", 0)) > 0)


def _key(t):
    return sorted(zip(t.names().tolist(), t.start_ns.tolist(), t.dur_ns.tolist(), t.categories().tolist(),
                      t.stat_dense("correlation_id", -1).tolist(), t.stat_dense("external_id", -1).tolist()))


def _flow_key(t):
    names, st = t.names(), t.start_ns
    return sorted(zip(names[t.flows["src"]].tolist(), st[t.flows["src"]].tolist(),
                      names[t.flows["dst"]].tolist(), st[t.flows["dst"]].tolist()))


@pytest.mark.parametrize("name", ["v100_ns_resolution_rank0.json.gz", "mtia_inference_rank0.json.gz",
                                  "mi250_rocm_minitoy.json.gz", "cpu_only_rank34.json.gz"])
def test_kineto_round_trip(tmp_path: Path, loaded, name: str):
    a, _ = loaded[name]
    out = kineto_writer.write(a, tmp_path / "rt.json.gz")
    doc = raw(out)
    assert doc["baseTimeNanoseconds"] > 0 and isinstance(doc["traceEvents"], list)
    b = kineto.load(out)
    assert b.n_events == a.n_events
    assert _key(b) == _key(a)
    assert len(b.flows["src"]) == len(a.flows["src"])
    assert _flow_key(b) == _flow_key(a)
    assert {p.name for p in b.planes} == {p.name for p in a.planes}
    assert b.metadata.get("rank") == a.metadata.get("rank")
    assert [d["id"] for d in doc["deviceProperties"]][:1] == \
        [p.index for p in a.planes if p.kind == "device"][:1]


def test_kineto_export_of_a_live_session(tmp_path: Path):
    with polyprof.profile(plugins=["host"]) as session:
        with polyprof.section("outer"):
            with polyprof.section("inner"):
                sum(range(10000))
    live = session.trace
    out = kineto_writer.write(live, tmp_path / "live.json")
    back = kineto.load(out)
    assert back.n_events == live.n_events
    shift = live.metadata["wall_anchor"]["wall_ns"] - live.metadata["wall_anchor"]["mono_ns"]
    names = live.names().tolist()
    i = names.index("inner")
    j = back.names().tolist().index("inner")
    assert back.start_ns[j] == live.start_ns[i] + shift  # on wall-clock time, to the ns
    assert back.dur_ns[j] == live.dur_ns[i]


def test_export_cli_kineto(tmp_path: Path):
    src = KINETO_DIR / "mi250_rocm_minitoy.json.gz"
    out = tmp_path / "x.json.gz"
    env = dict(os.environ, PYTHONPATH=str(Path(polyprof.__file__).parents[1]))
    r = subprocess.run(["python", "-m", "polyprof", "export", str(src), "-f", "kineto", "-o", str(out)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert load_any(out).n_events == kineto.load(src).n_events


def test_kineto_writer_keeps_event_phases_and_stream_types(tmp_path: Path, loaded):
    """What Kineto wrote as a complete event (even of zero length, e.g. a CUDA "Stream Wait
    Event") is written as one, and an integer stream stays an integer; only the global
    markers Kineto writes as instants are instants."""
    for name in ("a100_alexnet_small.json.gz", "triton_example.json.gz", "v100_ns_resolution_rank0.json.gz"):
        a, doc = loaded[name]
        out = raw(kineto_writer.write(a, tmp_path / name))
        def phases(evs):
            return Counter((e.get("cat") or "", e["name"], e["ph"]) for e in evs if e.get("ph") in ("X", "i", "I"))
        want = phases(events_of(doc))
        want = Counter({(c, n, "i" if ph == "I" else ph): k for (c, n, ph), k in want.items()})
        assert phases(out["traceEvents"]) == want, name
        def streams(evs):
            return Counter((e.get("cat"), type(e["args"]["stream"]).__name__) for e in evs
                           if e.get("ph") == "X" and "stream" in (e.get("args") or {}))
        assert streams(out["traceEvents"]) == streams(events_of(doc)), name


@pytest.mark.skipif(importlib.util.find_spec("hta") is None,
                    reason="Holistic Trace Analysis is not installed (it is in the test extra: "
                           "pip install -e '.[test]')")
@pytest.mark.parametrize("name", ["mi250_rocm_minitoy.json.gz", "a100_alexnet_small.json.gz",
                                  "triton_example.json.gz", "cuda_event_sync_multistream.json.gz"])
def test_holistic_trace_analysis_reads_what_we_write(tmp_path: Path, loaded, name: str):
    """HTA (a real consumer of Kineto traces) sees the same events in our rewrite as in the original."""
    a, _ = loaded[name]
    out = kineto_writer.write(a, tmp_path / "rank0.json.gz")
    code = ("import sys, json, logging; logging.disable(logging.CRITICAL)\n"
            "from hta.common.trace import parse_trace_file\n"
            "res = []\n"
            "for f in sys.argv[1:]:\n"
            "    meta, df, st = parse_trace_file(f)\n"
            "    gpu = df[df['stream'] >= 0]\n"
            "    res.append([len(df), len(gpu), int(gpu['dur'].sum()), sorted(df['correlation'].unique().tolist())])\n"
            "print(json.dumps(res))")
    # its own process: HTA's logging and warnings stay out of this one's
    r = subprocess.run([sys.executable, "-c", code, str(KINETO_DIR / name), str(out)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    original, ours = json.loads(r.stdout.strip().splitlines()[-1])
    assert ours == original


def test_absolute_microseconds_keep_their_nanoseconds(tmp_path: Path):
    """Epoch µs with ns digits exceed a double's precision; the reader reads their text."""
    ts = ["1712195495519689.047", "1712195495519689.8", "1712195495519690", "1712195495519691.25",
          "1712195495519692.001"]
    body = ",".join(f'{{"ph": "X", "name": "e{i}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": {t}, "dur": 1.5}}'
                    for i, t in enumerate(ts))
    p = tmp_path / "abs.json"
    p.write_text('{"traceEvents": [' + body + ']}')
    t = kineto.load(p)
    assert t.start_ns.tolist() == [int(Decimal(x) * 1000) for x in ts]
    same3 = tmp_path / "abs3.json"  # all with three decimals: the fast path
    same3.write_text('{"traceEvents": [' + body.replace(".8,", ".800,").replace(".25,", ".250,")
                     .replace("690,", "690.000,") + ']}')
    assert kineto.load(same3).start_ns.tolist() == [int(Decimal(x) * 1000) for x in ts]


def test_progress_bar_gives_the_same_trace(capsys):
    path = KINETO_DIR / "mi250_rocm_minitoy.json.gz"
    with_bar = kineto.load(path, progress=True)
    plain = kineto.load(path)
    assert with_bar.n_events == plain.n_events
    assert np.array_equal(with_bar.start_ns, plain.start_ns)
    assert capsys.readouterr().out == ""  # the bar goes to stderr only


def test_chrome_json_written_by_polyprof_loads_back(tmp_path: Path, loaded):
    a, _ = loaded["a100_nccl_rank0.json.gz"]
    out = chrome.write(a, tmp_path / "c.json.gz")
    b = load_any(out)
    assert b.n_events == a.n_events
    assert {p.name for p in b.planes if p.kind == "device"} == {"/device:GPU:0"}
    assert sorted(b.names().tolist()) == sorted(a.names().tolist())
    assert len(b.flows["src"]) == len(a.flows["src"])


def test_cpu_samples_of_a_sampling_profile_are_named_not_kept(tmp_path):
    """Chrome's JSON Object Format may carry a sampling profile (``samples`` with
    ``stackFrames``: Hermes, old Chrome; speedscope's test data): polyprof reads the
    trace events and says the samples were not read, without copying them into the
    metadata."""
    doc = {"traceEvents": [{"ph": "X", "name": "run", "pid": 1, "tid": 2, "ts": 10, "dur": 5}],
           "samples": [{"cpu": "-1", "name": "", "ts": str(11 + i), "pid": 1, "tid": "2", "weight": "1", "sf": 1}
                       for i in range(3)],
           "stackFrames": {"1": {"name": "main", "category": "JavaScript"}}}
    p = tmp_path / "hermes.json"
    p.write_text(json.dumps(doc))
    trace = polyprof.load(p)
    assert trace.n_events == 1
    assert "samples" not in trace.metadata and "stackFrames" not in trace.metadata
    assert any("3 CPU samples" in w and "not read" in w for w in trace.metadata["warnings"])
