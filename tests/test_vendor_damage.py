"""Damage in the vendors' own files is read as every reader reads it: what can be read is
read, and what is lost or made up is said in the trace's warnings, never silently.
Each damaged file is made in the test from a real one under tests/data (a column dropped
with SQLite, a string table emptied, a time or size made impossible), as the audit made
them (audV, findings 1, 3, 4 and 7).
"""

from __future__ import annotations

import gzip
import lzma
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.copies import copies
from polyprof.errors import TraceFormatError
from sqlite_query import execute

DATA = Path(__file__).resolve().parent / "data"
SAXPY = DATA / "nsys" / "saxpy_2022.sqlite"
NVVP = DATA / "peers" / "blinkplus_nccl" / "output.nvvp.xz"
RPD = DATA / "rpd" / "matmul_result.rpd"
ROCPROF_JSON = DATA / "rocprof" / "tracelens_908_results.json.gz"
TPU = DATA / "corpus" / "seeds" / "tpu_trimmed.xplane.pb"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=300)


def _damaged(src: Path, dst: Path, *sql: str) -> Path:
    """A copy of the SQLite file ``src`` with ``sql`` run on it (a table's indexes are
    dropped first where a column of theirs is)."""
    shutil.copy(src, dst)
    return execute(dst, *sql)


def _drop_column(src: Path, dst: Path, table: str, column: str) -> Path:
    conn = sqlite3.connect(src)
    indexes = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                                          "AND sql IS NOT NULL", (table,))]
    conn.close()
    return _damaged(src, dst, *(f'DROP INDEX "{i}"' for i in indexes), f'ALTER TABLE "{table}" DROP COLUMN "{column}"')


def _count(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    finally:
        conn.close()


def _of(trace, category: str) -> np.ndarray:
    return np.flatnonzero(trace.categories() == category)


def _warnings(trace) -> str:
    return " | ".join(trace.metadata.get("warnings", []))


@pytest.fixture(scope="module")
def nvvp(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nvprof") / "output.nvvp"
    out.write_bytes(lzma.decompress(NVVP.read_bytes()))
    return out


# --- Nsight Systems and nvprof: a table without one of its columns ---------------------

def test_nsys_kernels_without_a_stream_id_are_read_on_an_unknown_stream(tmp_path):
    """Before: the kernel table was left out with no word (exit 0, compute 0.0%): the
    other tables were read, so the note of what was not read was never given."""
    path = _drop_column(SAXPY, tmp_path / "nostream.sqlite", "CUPTI_ACTIVITY_KIND_KERNEL", "streamId")
    trace = polyprof.load(path)
    kernels = _of(trace, "kernel")
    assert len(kernels) == _count(SAXPY, "CUPTI_ACTIVITY_KIND_KERNEL") == 5
    tracks = {trace.tracks[t].name for t in trace.events["track"][kernels].tolist()}
    assert tracks == {"unknown stream"}
    assert "stream" not in trace.stats or not trace.stats["stream"].lookup(kernels)[0].any()
    assert "CUPTI_ACTIVITY_KIND_KERNEL lacks streamId" in _warnings(trace) and "unknown stream" in _warnings(trace)
    # still linked to their launches, and the summary counts them as compute
    assert trace.stats["correlation_id"].lookup(kernels)[0].all()
    r = _cli("summary", str(path))
    assert r.returncode == 0 and "CUPTI_ACTIVITY_KIND_KERNEL lacks streamId" in r.stderr, r.stderr
    assert re.search(r"unknown stream\s*│[^│]*│\s*4\.4%", r.stdout), r.stdout  # the kernels' compute


def test_nsys_device_and_runtime_tables_without_optional_columns_keep_their_rows(tmp_path):
    """Without ``deviceId`` the kernels are on GPU 0; without ``correlationId`` (kernels or
    runtime calls) they are kept, unlinked; without ``nameId`` the calls are unnamed. Each
    said. Before: each such table was dropped without a word."""
    cases = [("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", "kernel", "on GPU 0"),
             ("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId", "kernel", "without links"),
             ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", "cuda_runtime", "without links"),
             ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId", "cuda_runtime", "unnamed")]
    whole = polyprof.load(SAXPY)
    for table, column, category, said in cases:
        path = _drop_column(SAXPY, tmp_path / f"{table}_{column}.sqlite", table, column)
        trace = polyprof.load(path)
        assert len(_of(trace, category)) == len(_of(whole, category)) > 0, (table, column)
        assert f"{table} lacks {column} (a damaged or trimmed file)" in _warnings(trace), (table, column)
        assert said in _warnings(trace), (table, column)
        if column == "correlationId":  # the calls and the kernels are not linked
            assert len(trace.flows["src"]) < len(whole.flows["src"])


def test_nsys_a_table_it_cannot_read_is_said_though_others_were_read(tmp_path):
    """A table without a column its reader needs (the start times) is named in the
    warnings; before, only when no other table had been read."""
    path = _drop_column(SAXPY, tmp_path / "nostart.sqlite", "CUPTI_ACTIVITY_KIND_KERNEL", "start")
    trace = polyprof.load(path)
    assert len(_of(trace, "kernel")) == 0 and len(_of(trace, "cuda_runtime")) > 0
    w = _warnings(trace)
    assert "CUPTI_ACTIVITY_KIND_KERNEL lacks start (columns its reader needs), so those rows are not read" in w, w
    assert "nothing polyprof reads" not in w


def test_nsys_names_missing_from_stringids_are_said(tmp_path):
    """Kernels whose name string the export lacks (a cut or damaged file) are named
    ``[string N]`` and said in the warnings (before: silently)."""
    path = _damaged(SAXPY, tmp_path / "nonames.sqlite",
                    "DELETE FROM StringIds WHERE id IN (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    trace = polyprof.load(path)
    names = set(trace.names()[_of(trace, "kernel")].tolist())
    assert names == {"[string 670]"}, names
    assert "5 row(s) name 1 string id(s) that StringIds lacks (670; a damaged or cut export)" in _warnings(trace)
    assert "StringIds lacks" not in _warnings(polyprof.load(SAXPY))


def test_nvprof_kernels_and_calls_without_a_column_are_kept(nvvp, tmp_path):
    """nvprof's concurrent kernels without ``streamId`` (before: 24 kernels gone, exit 0,
    no warning) and runtime calls without ``cbid`` (their name) are read, and said."""
    whole = polyprof.load(nvvp)
    path = _drop_column(nvvp, tmp_path / "nostream.nvvp", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "streamId")
    trace = polyprof.load(path)
    kernels = _of(trace, "kernel")
    assert len(kernels) == len(_of(whole, "kernel")) == _count(nvvp, "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL") == 24
    assert {trace.tracks[t].name for t in trace.events["track"][kernels].tolist()} == {"unknown stream"}
    want = whole.events["dur_ns"][_of(whole, "kernel")]
    assert sorted(trace.events["dur_ns"][kernels].tolist()) == sorted(want.tolist())
    assert "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL lacks streamId" in _warnings(trace)
    path = _drop_column(nvvp, tmp_path / "nocbid.nvvp", "CUPTI_ACTIVITY_KIND_RUNTIME", "cbid")
    trace = polyprof.load(path)
    assert len(_of(trace, "cuda_runtime")) == len(_of(whole, "cuda_runtime")) > 0
    assert set(trace.names()[_of(trace, "cuda_runtime")].tolist()) == {"[unnamed CUDA runtime call]"}
    assert "CUPTI_ACTIVITY_KIND_RUNTIME lacks cbid" in _warnings(trace)
    # the kernels still find their (unnamed) calls by correlation id
    assert trace.stats["correlation_id"].lookup(_of(trace, "kernel"))[0].all()
    path = _drop_column(nvvp, tmp_path / "nothread.nvvp", "CUPTI_ACTIVITY_KIND_RUNTIME", "threadId")
    w = _warnings(polyprof.load(path))
    assert "CUPTI_ACTIVITY_KIND_RUNTIME lacks threadId (columns its reader needs), so those rows are not read" in w


def test_a_negative_copy_size_keeps_the_copy_with_its_size_unknown(nvvp, tmp_path):
    """Before: the copy's -100 bytes made it count in the copies table with no bytes and
    no word (2.2 GiB of 2.4). Now its size is unknown and said (Nsight and nvprof)."""
    conn = sqlite3.connect(SAXPY)
    row = conn.execute("SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0]
    conn.close()
    path = _damaged(SAXPY, tmp_path / "negbytes.sqlite",
                    f"UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = -100 WHERE rowid = {row}")
    trace = polyprof.load(path)
    memcpy = _of(trace, "gpu_memcpy")
    assert len(memcpy) == _count(SAXPY, "CUPTI_ACTIVITY_KIND_MEMCPY")
    has, values = trace.stats["bytes"].lookup(memcpy)
    assert int((~has).sum()) == 1 and (values >= 0).all()
    assert "1 row(s) of CUPTI_ACTIVITY_KIND_MEMCPY hold a negative byte count" in _warnings(trace)
    assert int(np.asarray(copies(trace)["count"]).sum()) == len(memcpy)
    path = _damaged(nvvp, tmp_path / "negbytes.nvvp",
                    "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = -5 WHERE _id_ = "
                    "(SELECT min(_id_) FROM CUPTI_ACTIVITY_KIND_MEMCPY)")
    assert "1 row(s) of CUPTI_ACTIVITY_KIND_MEMCPY hold a negative byte count" in _warnings(polyprof.load(path))


# --- RPD: missing type strings -----------------------------------------------------------

def test_rpd_ops_without_their_strings_stay_gpu_work(tmp_path):
    """``rocpd_string`` emptied: before, the 85 ops became non-device ``rpd_op`` events (no
    device time table) and the HIP calls sections, with no word. Now the ops are kernels,
    copies by their rocpd_copyapi kind, or GPU work of unknown type; the calls runtime
    calls where they launched ops; all said."""
    whole = polyprof.load(RPD)
    path = _damaged(RPD, tmp_path / "nostr.rpd", "DELETE FROM rocpd_string")
    trace = polyprof.load(path)
    cats = Counter(trace.categories().tolist())
    assert cats["kernel"] == 29 + 1 and cats["gpu_memcpy"] == 55 and "rpd_op" not in cats
    assert cats["roctx"] == 0 and cats["hip_runtime"] == 85
    copy_names = Counter(trace.names()[_of(trace, "gpu_memcpy")].tolist())
    assert copy_names == Counter(whole.names()[_of(whole, "gpu_memcpy")].tolist())  # HtoD 2, DtoH 53
    # the one fill (hipMemsetAsync: no rocpd_copyapi row, its call's name gone too) is GPU work of unknown type
    unknown = np.flatnonzero(trace.names() == "[GPU op of unknown type]")
    assert len(unknown) == 1 and whole.names()[_of(whole, "gpu_memset")].tolist() == ["Memset"]
    assert trace.events["dur_ns"][unknown].tolist() == whole.events["dur_ns"][_of(whole, "gpu_memset")].tolist()
    w = _warnings(trace)
    assert "85 rocpd_op row(s) name a type string rocpd_string lacks" in w and "29 kernels, 55 copies, 0 fills" in w, w
    assert "rocpd_api row(s) name a call whose string rocpd_string lacks" in w
    dev = [p for p in trace.planes if p.kind == "device"]
    assert [p.name for p in dev] == ["/device:GPU:2"]
    r = _cli("summary", str(path))
    assert r.returncode == 0 and "Device time" in r.stdout and "rocpd_op row(s)" in r.stderr, r.stdout + r.stderr


def test_rpd_an_op_with_a_dangling_type_id_is_classified_by_its_call(tmp_path):
    """The 1.9 GiB HtoD copy with dangling description and type ids: before, an ``rpd_op``
    named ``op``; now a copy (its call is hipMemcpyWithStream), HtoD by rocpd_copyapi."""
    path = _damaged(RPD, tmp_path / "badref.rpd", "UPDATE rocpd_op SET description_id = 99999999, opType_id = "
                    "99999999 WHERE id = (SELECT min(id) FROM rocpd_op)")
    trace = polyprof.load(path)
    longest = int(np.argmax(np.where(trace.categories() == "gpu_memcpy", trace.events["dur_ns"], -1)))
    assert trace.names()[longest] == "Memcpy HtoD" and int(trace.events["dur_ns"][longest]) == 154889107
    assert "rpd_op" not in set(trace.categories().tolist())
    assert "1 rocpd_op row(s) name a type string rocpd_string lacks" in _warnings(trace)
    assert "0 kernels, 1 copies, 0 fills" in _warnings(trace)


# --- Perfetto: times beyond +-2**62 ns -----------------------------------------------------

def test_perfetto_times_near_2_63_are_left_out_as_the_other_readers_do(tmp_path):
    """A slice at 2**63 - 100 ns: before, kept (span 9223372037 s), and polyprof's own
    Kineto export of it refused on reading back. Now left out with a warning, as Nsight,
    nvprof, RPD and rocprofv3 treat times beyond +-2**62 ns; the export reads back."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as P  # test-only dependency

    from perfetto_text import write_packets

    thread = P.TrackDescriptor(uuid=7, thread=P.ThreadDescriptor(pid=3, tid=4, thread_name="main"))
    B, E = P.TrackEvent.TYPE_SLICE_BEGIN, P.TrackEvent.TYPE_SLICE_END

    def ev(ts: int, kind: int, name: str = "") -> P.TracePacket:
        e = P.TrackEvent(type=kind, track_uuid=7)
        if name:
            e.name = name
        return P.TracePacket(trusted_packet_sequence_id=1, timestamp=ts, track_event=e)

    path = write_packets(tmp_path, [P.TracePacket(trusted_packet_sequence_id=1, track_descriptor=thread),
                                    ev(1000, B, "a"), ev(3000, E), ev(2**63 - 100, B, "b"), ev(2**63 - 1, E)],
                         name="near63.pftrace")
    trace = polyprof.load(path)
    assert trace.names().tolist() == ["a"] and trace.events["dur_ns"].tolist() == [2000]
    assert "2 event records (begins, ends, slices) left out: times beyond +-2**62 ns" in _warnings(trace)
    out = tmp_path / "near63.kineto.json"
    r = _cli("export", "-f", "kineto", "-o", str(out), str(path))
    assert r.returncode == 0, r.stderr
    assert polyprof.load(out).names().tolist() == ["a"]


# --- XSpace: an event that ends before it starts -------------------------------------------

def _tpu_space():
    """The real TPU XSpace and its first device's ``XLA Ops`` line."""
    from polyprof.formats import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(TPU.read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:TPU:0")
    return space, next(ln for ln in plane.lines if ln.name == "XLA Ops")


def test_xspace_a_negative_duration_is_kept_at_0_ns_as_the_other_readers_do(tmp_path):
    """Before: the whole file was refused ("an event offset or duration is negative or
    beyond 2**62 ps"); Nsight, nvprof, RPD and rocprofv3 keep such an event at its start,
    0 ns long, with a warning. So does XSpace now."""
    whole = polyprof.load(TPU)
    space, line = _tpu_space()
    line.events[0].duration_ps = -5000
    path = tmp_path / "negdur.xplane.pb"
    path.write_bytes(space.SerializeToString())
    trace = polyprof.load(path)
    assert trace.n_events == whole.n_events
    changed = np.flatnonzero(trace.events["dur_ns"] != whole.events["dur_ns"])
    assert len(changed) == 1 and trace.events["dur_ns"][changed].tolist() == [0]
    assert trace.events["start_ns"].tolist() == whole.events["start_ns"].tolist()
    assert "1 event(s) end before they start (a negative duration: a damaged file): kept at their start, 0 ns long" \
        in _warnings(trace)


def test_xspace_a_negative_offset_is_a_time_before_its_line_and_beyond_2_62_is_refused(tmp_path):
    """A negative offset is read (a time before its line's timestamp), as the error
    message now says: only offsets and durations beyond +-2**62 ps are refused (before,
    the message said "negative or beyond" while a negative offset was read)."""
    whole = polyprof.load(TPU)
    space, line = _tpu_space()
    first = line.events[0].offset_ps
    line.events[0].offset_ps = -7000  # 7 ns before its line's timestamp
    path = tmp_path / "negoff.xplane.pb"
    path.write_bytes(space.SerializeToString())
    trace = polyprof.load(path)
    assert trace.n_events == whole.n_events
    gone = Counter(whole.events["start_ns"].tolist()) - Counter(trace.events["start_ns"].tolist())
    new = Counter(trace.events["start_ns"].tolist()) - Counter(whole.events["start_ns"].tolist())
    assert len(gone) == len(new) == 1
    assert next(iter(new)) == next(iter(gone)) - first // 1000 - 7
    line.events[0].offset_ps = -(2**62) - 1
    path.write_bytes(space.SerializeToString())
    with pytest.raises(TraceFormatError, match=r"an event offset or duration is beyond \+-2\*\*62 ps"):
        polyprof.load(path)


# --- Kineto: the vendor polyprof's export keeps in deviceProperties ------------------------

@pytest.mark.parametrize("fmt", ["kineto", "chrome"])
def test_the_vendor_survives_polyprofs_json_exports_of_rocprofv3(fmt, tmp_path):
    """rocprofv3's JSON reads as AMD; its Kineto or Chrome export wrote deviceProperties
    with ``vendor_name: AMD`` (``name`` is the ISA, gfx950), which the reader ignored:
    vendor "", "GPU runtime" in the summary. Now it reads as AMD."""
    before = polyprof.load(ROCPROF_JSON)
    assert {p.vendor for p in before.planes if p.kind == "device"} == {"AMD"}
    out = tmp_path / f"out.{fmt}.json"
    r = _cli("export", "-f", fmt, "-o", str(out), str(ROCPROF_JSON))
    assert r.returncode == 0, r.stderr
    assert {p.vendor for p in polyprof.load(out).planes if p.kind == "device"} == {"AMD"}


def test_torch_kineto_device_names_still_give_their_vendor(tmp_path):
    """torch's Kineto writes ``name`` only (NVIDIA's and AMD's marketing names; "" on some
    ROCm builds, where the HIP calls say AMD): unchanged."""
    import json

    def one(props: dict, names: tuple[str, ...] = ()) -> str:
        doc = {"deviceProperties": [{"id": 0, **props}],
               "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}]
               + [{"ph": "X", "cat": "cuda_runtime", "name": n, "pid": 1, "tid": 1, "ts": 0, "dur": 1} for n in names]}
        path = tmp_path / "t.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
        return next(p.vendor for p in polyprof.load(path).planes if p.kind == "device")

    assert one({"name": "NVIDIA A100-PG509-200"}) == "NVIDIA"
    assert one({"name": "AMD Radeon Graphics"}) == "AMD"
    assert one({"name": ""}, ("hipLaunchKernel",)) == "AMD"
    assert one({"name": "gfx942"}) == "AMD"
    assert one({"name": "", "vendor_name": "AMD", "product_name": "AMD Instinct MI300X"}) == "AMD"
    assert one({"name": "Tesla V100"}) == "NVIDIA"
