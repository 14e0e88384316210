"""What the sweep over peers' public test data (scripts/peer_sweep.py, docs/peer_data.md)
found wrong, each pinned on the peer's real file (tests/data/peers/, licences beside)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError

PEERS = Path(__file__).parent / "data" / "peers"


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *argv], capture_output=True, text=True, timeout=120)


def test_a_json_list_of_records_that_are_not_events_is_refused(tmp_path: Path) -> None:
    """TraceLens' execution_details.json (a list of one object, no 'ph') was read as an
    empty trace, and `summary` printed "0 events" with exit 0."""
    f = PEERS / "tracelens" / "sglang_decode_execution_details.json"
    with pytest.raises(TraceFormatError, match="a JSON list of 1 objects, none with 'ph'") as e:
        polyprof.load(f)
    assert e.value.path == str(f)
    p = _cli("summary", str(f))
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [f"polyprof: error: {f}: not a Chrome/Kineto trace: a JSON list "
                                             "of 1 objects, none with 'ph' (an event's phase)"]
    # an empty list is an empty trace, and a list with one event among other records a trace
    (tmp_path / "empty.json").write_text("[]")
    assert polyprof.load(tmp_path / "empty.json").n_events == 0
    (tmp_path / "one.json").write_text('[{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1},'
                                       ' {"file": "x"}]')
    t = polyprof.load(tmp_path / "one.json")
    assert t.n_events == 1
    assert t.metadata["warnings"] == ["kineto: events not imported: 1 x ph=None"]


def test_a_triton_server_trace_is_named(tmp_path: Path) -> None:
    """``tritonserver --trace-file`` writes a JSON list of per-request records (an id and
    its timestamps, or its model), as Triton 2.x does (a wild server trace, 650 records):
    refused as the list of records it is, and named (records written here)."""
    recs = [{"id": 1, "timestamps": [{"name": "HTTP_RECV_START", "ns": 5294383183578}]},
            {"id": 1, "model_name": "resnet50", "model_version": 1},
            {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 5294383808197}]}]
    f = tmp_path / "trace.json"
    f.write_text(json.dumps(recs, separators=(",", ":")))
    with pytest.raises(TraceFormatError, match=r"a JSON list of 3 objects, none with 'ph' \(an event's phase\); it "
                                                r"is a Triton Inference Server trace \(tritonserver --trace-file"):
        polyprof.load(f)


def test_an_empty_chrome_trace_says_nothing_was_read(tmp_path: Path) -> None:
    """tlparse (pytorch/tlparse 0.4.3) writes ``chromium_events.json`` as ``[]`` when the
    torch.compile log has no compile events (its tests' comp_metrics.log, export.log):
    `summary` printed "0 events" with exit 0 and no word; now a warning says nothing was
    read, as for Perfetto and Nsight files of other data only."""
    for name, text in (("chromium_events.json", "[]"), ("empty.json", '{"traceEvents": []}'),
                       ("names_only.json", '{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, '
                                           '"args": {"name": "p"}}]}')):
        f = tmp_path / name
        f.write_text(text)
        t = polyprof.load(f)
        assert t.n_events == 0
        assert t.metadata["warnings"][0] == ("nothing polyprof reads: the trace has no events (no slices, "
                                             "instants or counters)")
        p = _cli("summary", str(f))
        assert p.returncode == 0 and f"{f}: nothing polyprof reads" in p.stderr, p.stderr
    # a trace of counters only is not empty
    f = tmp_path / "counters.json"
    f.write_text('[{"ph": "C", "name": "mem", "ts": 1, "pid": 1, "args": {"bytes": 5}}]')
    assert "warnings" not in polyprof.load(f).metadata


def test_hta_window_on_a_trace_without_launch_calls() -> None:
    """`summary --window hta` on rocprofv3's JSON (TraceLens' 908_results.json.gz: kernel
    dispatches, no HIP calls) stopped with an internal error (IndexError) in HTA's idle
    time split, which looked up the launch call of each gap in an empty list."""
    f = Path(__file__).parent / "data" / "rocprof" / "tracelens_908_results.json.gz"
    p = _cli("summary", "--json", "--window", "hta", str(f))
    assert p.returncode == 0, p.stderr
    idle = json.loads(p.stdout)["tables"]["idle_time_breakdown"]["records"]
    assert sum(r["gaps"] for r in idle) > 1000
    # no launch call: no gap waits for the host; each is kernel-wait or other, as HTA splits them
    assert {r["host_wait_ns"] for r in idle} == {0}
    assert all(r["idle_ns"] == r["kernel_wait_ns"] + r["other_ns"] for r in idle)


def test_diff_of_ops_present_on_both_sides_with_no_time_per_step() -> None:
    """HTA's trace_compare pair (HTA's test_trace_diff.py): ops in both runs with 0 ns per
    step (aten::as_strided lasts 0 ns; aten::zeros runs before the first step) were called
    "new" in B, as if A had none. HTA's expectation: only AddmmBackward0,
    All2All_Pooled_Req and CatBackward0 are added; aten::as_strided and aten::empty are
    unchanged."""
    d = PEERS / "hta_trace_compare"
    p = _cli("diff", "--json", str(d / "base" / "base.json.gz"), str(d / "test" / "test.json.gz"))
    assert p.returncode == 0, p.stderr
    ops = {r["name"]: r for r in json.loads(p.stdout)["tables"]["ops"]["records"]}
    new = {n for n, r in ops.items() if r["rel_change"] is None}  # NaN: new in B
    assert new == {"AddmmBackward0", "All2All_Pooled_Req", "CatBackward0"}
    # (aten::zero_ runs after the last step, in no step: not in the window's tables)
    assert {n: (r["count_a"], r["count_b"]) for n, r in ops.items() if n not in new} == {
        "aten::as_strided": (2, 2), "aten::empty": (2, 2), "aten::zeros": (1, 1)}
    assert all(ops[n]["rel_change"] == 0.0 and not ops[n]["change"] for n in ops.keys() - new)


def test_a_perfetto_trace_of_data_polyprof_does_not_read_says_so(tmp_path: Path) -> None:
    """Perfetto's power_rails test trace (test/trace_processor/diff_tests/parser/power/):
    power rail packets only. polyprof read 0 events and said nothing, as if the trace
    were empty; it now says that the packets hold data it does not read."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from google.protobuf import text_format

    msg = pb.Trace()
    text_format.Parse((PEERS / "perfetto" / "power_rails.textproto").read_text(), msg)
    f = tmp_path / "power_rails.pftrace"
    f.write_bytes(msg.SerializeToString())
    t = polyprof.load(f)
    assert t.n_events == 0 and not len(t.counters["ts_ns"])
    assert [w for w in t.metadata["warnings"] if w.startswith("nothing polyprof reads")]
    p = _cli("summary", str(f))
    assert p.returncode == 0
    assert "warning: nothing polyprof reads: no track events, counters or GPU render stages" in p.stdout


def test_a_directory_of_nsight_exports_is_a_job(tmp_path: Path) -> None:
    """A directory of one Nsight Systems SQLite export per rank (as pipit's saxpy-mpi-cuda
    job writes them, `-o saxpy-mpi-cuda_nsys%q{OMPI_COMM_WORLD_RANK}`) was "no trace files
    in this directory": only JSON, .polyprof and .xplane.pb files were taken as ranks."""
    src = Path(__file__).parent / "data" / "nsys" / "saxpy_2022.sqlite"
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        (job / f"saxpy-mpi-cuda_nsys{r}.sqlite").write_bytes(src.read_bytes())
    (job / "notes.txt").write_text("not a rank")
    ts = polyprof.load_ranks(job)
    assert [Path(str(e.path)).name for e in ts.entries] == ["saxpy-mpi-cuda_nsys0.sqlite",
                                                             "saxpy-mpi-cuda_nsys1.sqlite"]
    p = _cli("summary", str(job))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("polyprof summary: 2 ranks")


@pytest.mark.parametrize("name", ["bad_print", "stack_sample"])
def test_perfetto_traces_whose_first_packet_has_no_timestamp_or_sequence_id(tmp_path: Path, name: str) -> None:
    """Perfetto's own hand-written test traces (parser/atrace/bad_print: ftrace bundles;
    parser/profiling/stack_sample: a process tree first) have no timestamp or sequence id
    in their first packet, which the sniff required of a Perfetto trace: bad_print was
    "unrecognised format", stack_sample read as an XSpace of 2 empty planes. A packet
    with ftrace events (field 1 length-delimited), a uid (3 a varint) or any field from 8
    up cannot be an XPlane, wherever it is in the head."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from google.protobuf import text_format

    from polyprof.formats.detect import detect

    msg = pb.Trace()
    text_format.Parse((PEERS / "perfetto" / f"{name}.textproto").read_text(), msg)
    first = {fd.name for fd, _ in msg.packet[0].ListFields()}
    assert not first & {"timestamp", "trusted_packet_sequence_id"}
    f = tmp_path / "trace.bin"  # by content, not by name
    f.write_bytes(msg.SerializeToString())
    assert detect(f) == "perfetto"
    t = polyprof.load(f)
    assert t.n_events == 0
    assert [w for w in t.metadata["warnings"] if w.startswith("nothing polyprof reads")]


def test_a_trace_of_async_slices_alone_is_not_called_empty(tmp_path: Path) -> None:
    """A Chrome trace of async ``b``/``e`` pairs only, with a pid and no tid (the request
    timeline of NVIDIA Triton Inference Server's trace, as cmpark0126/ml-serving-system-building
    keeps it: 1,000 requests): `summary` read the 1,000 slices and also warned "nothing polyprof
    reads: the trace has no events" (the check looked at the X/B/E slices only)."""
    f = tmp_path / "chrome_trace.json"
    f.write_text(json.dumps([
        {"cat": "resnet50", "name": "1", "id": "1", "ph": "b", "ts": 2432907408.618, "pid": 0},
        {"cat": "resnet50", "name": "1", "id": "1", "ph": "e", "ts": 2432923628.559, "pid": 0},
        {"cat": "resnet50", "name": "2", "id": "2", "ph": "b", "ts": 2432948283.164, "pid": 0},
        {"cat": "resnet50", "name": "2", "id": "2", "ph": "e", "ts": 2432950000.5, "pid": 0}]))
    t = polyprof.load(f)
    assert t.n_events == 2
    assert sorted(int(d) for d in t.events["dur_ns"]) == pytest.approx([1717336, 16219941], abs=1)
    assert not [w for w in t.metadata.get("warnings", []) if w.startswith("nothing polyprof reads")]
    p = _cli("summary", str(f))
    assert p.returncode == 0 and "nothing polyprof reads" not in p.stderr, p.stderr


def test_rocprof_v1_outputs_are_named_when_refused(tmp_path: Path) -> None:
    """rocprof (v1)'s other outputs (ROCm/rocm-blogs' roc-profiling examples: results.csv,
    results.stats.csv, results.db) were refused as "unrecognised format" with the list of
    13 formats, or as "not an Nsight Systems export ... its tables: COPY, HIP, KERN, OPS";
    now each says what it is and what polyprof reads instead (results.csv, the kernel
    dispatches, is read itself)."""
    import sqlite3

    kern = tmp_path / "results.csv"
    kern.write_text('"Index","KernelName","gpu-id","queue-id","queue-index","pid","tid","grd","wgr","lds",'
                    '"scr","arch_vgpr","accum_vgpr","sgpr","wave_size","sig","obj","DispatchNs","BeginNs",'
                    '"EndNs","CompleteNs","DurationNs"\n0,"elementwise_kernel",2,0,0,33,33,256,256,0,0,28,4,32,'
                    '64,"0x0","0x7f0d61a43240",849432249267152,849432249316636,849432249324476,'
                    '849432249329621,7840\n')
    stats = tmp_path / "results.stats.csv"
    stats.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n'
                     '"elementwise_kernel",1,5280,5280,100.0\n')
    db = tmp_path / "results.db"
    conn = sqlite3.connect(db)
    for t in ("HIP", "OPS", "COPY"):
        conn.execute(f'CREATE TABLE {t} ("BeginNs" INTEGER, "EndNs" INTEGER, "Name" TEXT)')
    conn.execute('CREATE TABLE KERN ("Index" INTEGER, "KernelName" TEXT)')
    conn.commit()
    conn.close()
    assert polyprof.load(kern).n_events == 1  # read since (tests/test_rocprof_v1_csv.py)
    for f, what in ((stats, "rocprof (v1)'s statistics (a *stats.csv file: totals per name), not a trace; "
                            "give polyprof results.csv beside it"),
                    (db, "rocprof (v1)'s results.db (tables COPY, HIP, KERN, OPS): not read; polyprof reads "
                         "the results.json")):
        with pytest.raises(TraceFormatError, match=re.escape(what)):
            polyprof.load(f)
        p = _cli("summary", str(f))
        assert p.returncode == 1 and what in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
