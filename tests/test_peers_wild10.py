"""Files of the tenth sweep of traces from the wild (docs/peer_data.md), kept in
tests/data/peers/ with their licences: what polyprof reads of them, and how it refuses
the ones that are no traces (one line naming the file and saying what it is)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.rocprof_csv import not_a_trace

PEERS = Path(__file__).parent / "data" / "peers"
RUV = PEERS / "rocprof_unified_viewer"


def _refusal(path: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    line, = out.stderr.strip().splitlines()
    assert str(path) in line
    return line


def test_a_firefox_profiler_profile_from_samply_is_refused_as_what_it_is():
    """samply's ``profile.json.gz`` (KentBeck/BPlusTreeMap4): the Gecko profile format,
    sampled stacks, which the Firefox Profiler opens; no trace. The refusal said only that
    there was no ``traceEvents`` list."""
    path = PEERS / "samply" / "bplustree_profile_insert.json.gz"
    line = _refusal(path)
    assert "no 'traceEvents' list" in line and "Firefox Profiler profile" in line and "samply" in line
    with pytest.raises(TraceFormatError, match="Firefox Profiler profile"):
        polyprof.load(path)


def test_json_lines_are_refused_as_json_lines(tmp_path):
    """A tool's record per line (siwaarbn/grof's ``cpu_correlation_with_stack.json``, no
    licence: its layout rebuilt here): "invalid JSON" alone did not say why."""
    path = tmp_path / "cpu_correlation_with_stack.json"
    rows = [{"type": "correlation", "timestamp": 1770139286570000000 + i, "pid": 12345, "tid": 12345,
             "correlation_id": i, "api": "cudaLaunchKernel", "stack": ["train_epoch", "forward_pass"]} for i in (1, 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = _refusal(path)
    assert "invalid JSON" in line and "JSON Lines" in line
    # a broken trace is still only "invalid JSON": no guess
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2,}')
    assert "JSON Lines" not in _refusal(broken)


def test_rocprofv3_files_that_hold_no_events_say_what_they_are(tmp_path):
    """rocprofv3's ``counter_collection`` CSV (jimw567/rocprof-unified-viewer's fixture):
    counter values per dispatch, no timeline; its statistics and agent files likewise."""
    path = RUV / "decode_fetch_counter_collection.csv"
    what = not_a_trace(path.read_bytes()[:65536], path)
    assert what is not None and what.startswith("rocprofv3's counter_collection file (counter values per kernel "
                                                "dispatch), not a trace")
    stats = tmp_path / "1234_kernel_stats.csv"
    stats.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"\n'
                     '"k",1,5,5.0,100.0,5,5,0.0\n')
    (tmp_path / "1234_kernel_trace.csv").write_text((RUV / "prefill_hip_api_trace.csv").read_text())
    assert not_a_trace(stats.read_bytes(), stats) == ("rocprofv3's kernel_stats file (totals per name), not a trace: "
                                                      "give polyprof 1234_kernel_trace.csv beside it")
    # the trace files themselves, and CSV files of other names, are not refused here
    for trace in (RUV / "prefill_hip_api_trace.csv", tmp_path / "1234_kernel_trace.csv"):
        assert not_a_trace(trace.read_bytes(), trace) is None
    other = tmp_path / "results.csv"
    other.write_text('"A","B"\n1,2\n')
    assert not_a_trace(other.read_bytes(), other) is None


def test_a_rocprofv3_hip_api_trace_alone_reads_to_its_rows():
    """The fixture's five HIP calls (three ``hipGraphLaunch``, two ``hipMemcpyAsync``), no
    kernel file beside them: every call, its name and its ns as the file has them."""
    path = RUV / "prefill_hip_api_trace.csv"
    with open(path, newline="") as f:
        rows = [(r["Function"], int(r["End_Timestamp"]) - int(r["Start_Timestamp"])) for r in csv.DictReader(f)]
    t = polyprof.load(path)
    assert sorted(zip(t.names().tolist(), t.events["dur_ns"].tolist())) == sorted(rows)
    assert set(t.categories().tolist()) == {"hip_runtime"}


def test_a_perfetto_trace_whose_every_event_was_skipped_says_so_once(tmp_path):
    """perfetto-writer's golden ``simple_event`` (mblsha/retrobus-perfetto's vendored crate):
    a slice begin and end with no timestamp at all (its tests leave the time out). The
    events are skipped, said in one warning; the next warning said there were "no track
    events" and that the packets held other data, e.g. ftrace. (Perfetto drops them too:
    its proto_trace_reader.cc gives a packet without a timestamp the latest one seen, but
    track_event_tokenizer.cc drops a TrackEvent whose packet has none and no legacy
    microsecond time, counting ``track_event_missing_timestamp``.)"""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from google.protobuf import text_format

    msg = pb.Trace()
    text_format.Parse((PEERS / "retrobus_perfetto" / "simple_event.txtpb").read_text(), msg)
    f = tmp_path / "simple_event.pftrace"
    f.write_bytes(msg.SerializeToString())
    t = polyprof.load(f)
    assert t.n_events == 0
    assert t.metadata["warnings"] == ["skipped 2 track events without a timestamp",
                                      "nothing polyprof reads: every event was skipped (above)"]



def test_rocprofv3_counter_collection_is_refused_by_the_cli_saying_what_it_is():
    path = PEERS / "rocprof_unified_viewer" / "decode_fetch_counter_collection.csv"
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    line, = out.stderr.strip().splitlines()
    assert str(path) in line and "rocprofv3's counter_collection file (counter values per kernel dispatch)" in line
    assert "unrecognised format" not in line


def test_a_kernels_launch_configuration_is_its_earliest_launchs():
    """kernel_breakdown's grid/block are "the first launch's": they were the shortest
    launch's (its groups sorted by duration), so a time-ordered export of the same trace
    gave another (HTA's sampled rank 0: find_long_segments grid 8648 vs 8649)."""
    import gzip
    import json

    from polyprof.analyze.breakdown import kernel_breakdown
    from polyprof.analyze.frames import column

    path = Path(__file__).parent / "data" / "traces" / "kineto" / "sampled_rank0.json.gz"
    ev = json.loads(gzip.open(path).read())["traceEvents"]
    kb = kernel_breakdown(polyprof.load(path))
    checked = 0
    for name, grid in zip(column(kb, "name").tolist(), column(kb, "grid").tolist()):
        runs = sorted((e["ts"], e["args"].get("grid")) for e in ev if e.get("cat") == "kernel" and e["name"] == name
                      and isinstance(e.get("args", {}).get("grid"), list))
        if len({tuple(g) for _, g in runs}) > 1:  # the names launched with more than one grid
            assert grid == ",".join(map(str, runs[0][1])), (name, grid, runs[:3])
            checked += 1
    assert checked >= 2
