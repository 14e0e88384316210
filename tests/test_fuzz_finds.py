"""What scripts/fuzz.py found in the readers added after the first ones (rocprof v1 CSV,
rocprofv3 CSV and JSON, nsys stats CSV, Ascend/MindSpore and rocprof v1 JSON, torch's
memory timeline, Perfetto, Parquet: the seeds of tests/fuzz/seeds.py ``_more_seeds``),
each input cut down to the few bytes that broke the reader. Each is now a Trace or a
TraceFormatError naming the file and what is wrong, by the reader's own check (not the
last net, safety.ForeignError), and a summary of what loads works."""

from __future__ import annotations

from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.safety import ForeignError
from polyprof.report import tables

#: rocprof v1's results.csv header (gunrock's, tests/data/peers/gunrock) and a row of it
V1_HEADER = ("Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,arch_vgpr,accum_vgpr,sgpr,"
             "wave_size,sig,obj,DispatchNs,BeginNs,EndNs,CompleteNs,DurationNs")
V1_ROW = ("0,__amd_rocclr_copyBuffer.kd,2,0,0,2033096,2033096,155648,512,0,0,16,0,32,64,0x0,0x7f50a7abb600,"
          "3599977333751882,3599977333839958,3599977333845531,3599977333922788,5573")


def _refused(path: Path, match: str) -> TraceFormatError:
    with pytest.raises(TraceFormatError, match=match) as e:
        polyprof.load(path)
    assert not isinstance(e.value, ForeignError), e.value.problem
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)
    return e.value


def test_rocprof_v1_csv_end_at_int64_min_is_refused_by_row(tmp_path: Path):
    """rocprof_v1_csv input 78075 of seed 1: an EndNs of -2**63 loaded as a kernel of
    9.2e18 ns (EndNs - BeginNs wrapped around; the warning said "read as 0 ns") and the
    summary's breakdown overflowed."""
    p = tmp_path / "results.csv"
    row = V1_ROW.split(",")
    row[19] = "-9223372036854775808"
    p.write_text(f"{V1_HEADER}\n{','.join(row)}\n")
    _refused(p, r"row 2: EndNs is -9223372036854775808, beyond \+-2\*\*62 ns")


def test_rocprof_v1_csv_header_names_with_spaces_are_read(tmp_path: Path):
    """rocprof_v1_csv input 25 of seed 1 (and 2,397 more): a header name with a space
    around it (`` arch_vgpr``) was found by the sniff (which strips them) but not by
    pyarrow (ArrowKeyError, caught only by the last net)."""
    p = tmp_path / "results.csv"
    p.write_text(V1_HEADER.replace(",arch_vgpr,", ", arch_vgpr ,").replace(",EndNs,", ",EndNs ,")
                 + "\n" + V1_ROW + "\n")
    t = polyprof.load(p)
    assert t.n_events == 1 and t.dur_ns.tolist() == [3599977333845531 - 3599977333839958]
    assert t.stats["vgpr count"].values.tolist() == [16]
    tables.build(t)


def test_rocprof_v1_csv_column_named_twice_is_refused(tmp_path: Path):
    p = tmp_path / "results.csv"
    p.write_text(V1_HEADER.replace(",sgpr,", ",lds,") + "\n" + V1_ROW + "\n")
    _refused(p, "names the column 'lds' twice")


#: rocprofv3's kernel_trace.csv header and a row of it (tests/data/rocprof/csv)
V3_HEADER = ('"Kind","Agent_Id","Queue_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id",'
             '"Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size","Workgroup_Size_X",'
             '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"')
V3_ROW = ('"KERNEL_DISPATCH",1,1,69,1,16,"void addition_kernel<float>(float*, float const*, float const*, int, int)",'
          '1451,8819330200067564,8819330200116308,0,0,64,1,1,1024,1024,1')


def test_rocprofv3_csv_header_broken_by_a_newline_is_refused_by_name(tmp_path: Path):
    """rocprof_csv input 15685 of seed 1: a line break inside the header's quoted
    ``"Grid_Size_X`` cell: the reader's header (its first line) named Grid_Size_X,
    pyarrow's did not (ArrowKeyError, caught only by the last net)."""
    p = tmp_path / "1_kernel_trace.csv"
    p.write_text(V3_HEADER.replace('"Grid_Size_X"', '"Grid_Size_X\n\n"') + "\n" + V3_ROW + "\n")
    _refused(p, "malformed CSV .*Expected 16 columns, got 2")


def test_rocprofv3_csv_timestamp_not_utf8_is_refused_by_name(tmp_path: Path):
    """rocprof_csv input 1 of seed 1: a byte that is not UTF-8 in a Start_Timestamp cell
    (pyarrow read the column as binary; casting it to text for the message raised)."""
    p = tmp_path / "1_kernel_trace.csv"
    p.write_bytes((V3_HEADER + "\n" + V3_ROW.replace(",8819330200067564,", ",88193\xff0200067564,") + "\n")
                  .encode("latin-1"))
    _refused(p, "Start_Timestamp holds bytes that are not UTF-8 text")


def test_rocprofv3_csv_header_names_as_written_still_load(tmp_path: Path):
    p = tmp_path / "1_kernel_trace.csv"
    p.write_text(V3_HEADER + "\n" + V3_ROW + "\n")
    t = polyprof.load(p)
    assert t.n_events == 1 and t.dur_ns.tolist() == [8819330200116308 - 8819330200067564]


#: nsys stats' cuda_gpu_trace header and a row of it (tests/data/nsys_csv, saxpy 2022)
GPU_HEADER = ("Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
              "Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name")
GPU_ROW = ("887857742,18830458,138,,,,,,,,,,262.144,13921.276,Pageable,Device,NVIDIA A100-SXM4-40GB (0),1,7,"
           "[CUDA memcpy HtoD]")


def test_nsys_stats_csv_device_index_beyond_64_bits_is_refused_by_name(tmp_path: Path):
    """nsys_csv input 2302 of seed 1: a device ``(9223372036854775809)``: its index did
    not fit an int64 (OverflowError, caught only by the last net)."""
    p = tmp_path / "r_cuda_gpu_trace.csv"
    p.write_text(GPU_HEADER + "\n" + GPU_ROW.replace("(0)", "(9223372036854775809)") + "\n")
    _refused(p, r"cuda_gpu_trace: device 'NVIDIA A100-SXM4-40GB \(9223372036854775809\)': its index is beyond 2\*\*31")


def test_nsys_stats_csv_start_at_int64_min_is_refused_by_row(tmp_path: Path):
    """nsys_csv input 38775 of seed 1: a Start (ns) of -2**63 loaded (a trace spanning
    more than int64 ns) and the summary's breakdown overflowed (one in µs past 2**62 ns
    was refused already)."""
    p = tmp_path / "r_cuda_gpu_trace.csv"
    p.write_text(GPU_HEADER + "\n" + GPU_ROW + "\n" + GPU_ROW.replace("887857742,", "-9223372036854775808,", 1) + "\n")
    _refused(p, r"cuda_gpu_trace: row 2: Start \(ns\) is -9223372036854775808, beyond \+-2\*\*62 ns")
    p.write_text(GPU_HEADER.replace("Start (ns)", "Start (us)") + "\n" + GPU_ROW.replace("887857742,", "9300000000000000,", 1)
                 + "\n")
    _refused(p, r"row 1: Start \(us\) is 9300000000000000")
    p.write_text(GPU_HEADER + "\n" + GPU_ROW + "\n")
    t = polyprof.load(p)
    assert t.start_ns.tolist() == [887857742] and t.dur_ns.tolist() == [18830458]


def test_rocprofv3_json_string_not_utf8_is_refused_by_name(tmp_path: Path):
    """rocprof_json input 17 of seed 1: a byte that is not UTF-8 in a JSON string
    (msgspec raises UnicodeDecodeError, caught only by the last net)."""
    p = tmp_path / "results.json"
    p.write_bytes(b'{"rocprofiler-sdk-tool": [{"metadata": {"pid": 1, "command": ["\xff"]}}]}')
    _refused(p, "a JSON string is not UTF-8 text")


def test_memory_timeline_broken_json_is_refused_by_name(tmp_path: Path):
    """memory_timeline input 4 of seed 1 (and 20,916 more): JSON cut or damaged after a
    start the sniff takes (orjson's JSONDecodeError, caught only by the last net)."""
    p = tmp_path / "timeline.json"
    p.write_bytes(b"[[0, 1, 2], [[0, 1, 2, 3, 4, 5, 6, 7, 8],")
    _refused(p, "broken JSON")


def test_memory_timeline_numbers_beyond_the_limits_are_refused(tmp_path: Path):
    """A plot time in µs that overflows when made ns (2**62 µs), a size of 2**63 - 1 (the
    sum by category wrapped around) and raw events of 2**62 bytes (their running total
    wrapped around) all loaded as wrong numbers."""
    row = [0, 1, 2, 3, 4, 5, 6, 7, 8]
    p = tmp_path / "timeline.json"
    for doc, what in ((f"[[{2**62}], [{row}]]", "a time of 4611686018427387904"),
                      (f"[[1], [[0, {2**63 - 1}, 1, 0, 0, 0, 0, 0, 0]]]", "a size of 9223372036854775807"),
                      (f"[[1, 1, {2**62}, 0], [2, 1, {2**62}, 0]]", "a size of 4611686018427387904")):
        p.write_text(doc)
        _refused(p, f"not a torch memory timeline: {what} is beyond")
    p.write_text(f"[[1, 2], [{row}, {row}]]")  # the limits leave real numbers alone
    t = polyprof.load(p)
    assert t.counters["ts_ns"].tolist()[:2] == [1000, 2000]
    assert sorted(set(t.counters["value"].tolist())) == [1, 2, 3, 4, 5, 6, 7, 8, 36]


def test_memory_timeline_without_points_is_an_empty_trace(tmp_path: Path):
    """``[[], []]``: an IndexError on the empty sizes (caught only by the last net)."""
    p = tmp_path / "timeline.json"
    p.write_text("[[], []]")
    t = polyprof.load(p)
    assert t.n_events == 0 and len(t.counters["ts_ns"]) == 0
    tables.build(t)


def _parquet(tmp_path: Path, edit) -> Path:
    """polyprof's Parquet export of a small real trace (a fuzz seed), its table edited
    by ``edit(table, layout) -> table`` (``layout``: the polyprof.layout metadata, parsed)."""
    import json

    import pyarrow.parquet as pq

    from polyprof.formats import parquet

    seed = Path(__file__).resolve().parent / "data" / "corpus" / "seeds" / "cuda_event_sync_multistream.json"
    good = tmp_path / "good.parquet"
    parquet.write(polyprof.load(seed), good)
    table = pq.read_table(good)
    meta = dict(table.schema.metadata)
    layout = json.loads(meta[b"polyprof.layout"])
    table = edit(table, layout)
    meta[b"polyprof.layout"] = json.dumps(layout).encode()
    out = tmp_path / "bad.parquet"
    pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), **meta}), out)
    return out


def test_parquet_layout_of_the_wrong_types_is_refused_by_name(tmp_path: Path):
    """parquet input 12850 of seed 1: a track's ``tid`` a dict in polyprof.layout loaded
    and the HTML report failed (unhashable dict); input 6819: ``stats`` a number
    (TypeError, caught only by the last net)."""
    def tid(t, layout):
        layout["tracks"][1]["tid"] = {}
        return t

    def stats(t, layout):
        layout["stats"] = 5
        return t
    _refused(_parquet(tmp_path, tid), r"polyprof.layout: tracks\[1\].tid is dict {}, expected int")
    _refused(_parquet(tmp_path, stats), "polyprof.layout: stats is not a list")


def test_parquet_times_beyond_int64_ns_are_refused(tmp_path: Path):
    """parquet input 15950 of seed 1: a start_ns of -2**63 loaded, and the summary's
    breakdown overflowed."""
    import pyarrow as pa

    def start(t, layout):
        i = t.column_names.index("start_ns")
        v = t.column(i).to_pylist()
        v[3] = -2**63
        return t.set_column(i, "start_ns", pa.array(v, pa.int64()))
    _refused(_parquet(tmp_path, start), "event times beyond")


def test_parquet_text_not_utf8_is_refused_by_name(tmp_path: Path):
    """parquet input 9471 of seed 1: a string stat column holding bytes that are not
    UTF-8 (Parquet does not check; to_pylist raised UnicodeDecodeError); input 158: a
    column name that is not UTF-8 (pyarrow raised it opening the file)."""
    import pyarrow as pa

    def stat(t, layout):
        layout["stats"].append({"key": "bad", "column": "stat.QQQQ", "kind": "O"})
        raw = pa.array([b"\xff\xfe"] * t.num_rows, pa.binary()).view(pa.string())
        return t.append_column("stat.QQQQ", raw)

    def name(t, layout):
        return t.append_column("stat.QQQQ", pa.array([1] * t.num_rows, pa.int64()))
    _refused(_parquet(tmp_path, stat), r"damaged Parquet file \(.*(UTF8|UTF-8)")
    p = _parquet(tmp_path, name)
    p.write_bytes(p.read_bytes().replace(b"QQQQ", b"\x80\x80\x80\x80"))
    _refused(p, "not a readable Parquet file")


def test_rocprofv3_csv_column_of_empty_cells_takes_its_default(tmp_path: Path):
    """rocprof_csv input 661 of seed 1: a marker_api_trace.csv whose Correlation_Id cells
    are all empty (pyarrow types the column null; fill_null raised ArrowInvalid, caught
    only by the last net). Its ranges load, without correlation ids."""
    p = tmp_path / "1_marker_api_trace.csv"
    p.write_text("Domain,Function,Process_Id,Thread_Id,Correlation_Id,Start_Timestamp,End_Timestamp\n"
                 "MARKER_CORE_API,hipMemcpy,717,717,,1520113900141100,1520113901483408\n"
                 "MARKER_CORE_API,hipLaunchKernel,717,717,,1520113899684965,1520113901491622\n")
    t = polyprof.load(p)
    assert sorted(zip(t.names().tolist(), t.dur_ns.tolist())) == [
        ("hipLaunchKernel", 1520113901491622 - 1520113899684965), ("hipMemcpy", 1520113901483408 - 1520113900141100)]


def test_rocprofv3_csv_timestamp_at_int64_min_is_refused_by_row(tmp_path: Path):
    """rocprof_csv inputs 21375, 44875 and 102975 of seed 2: a Start_Timestamp or
    End_Timestamp of -2**63 loaded (an event of 9.2e18 ns) and the summary overflowed."""
    p = tmp_path / "1_kernel_trace.csv"
    p.write_text(V3_HEADER + "\n" + V3_ROW.replace(",8819330200116308,", ",-9223372036854775808,") + "\n")
    _refused(p, r"row 2: End_Timestamp is -9223372036854775808, beyond \+-2\*\*62 ns")


def test_rocprofv3_json_time_at_int64_min_is_refused(tmp_path: Path):
    """The same in rocprofv3's JSON (found by hand after the CSV: the fuzz seed with one
    dispatch's start_timestamp set to -2**63 loaded, and the summary overflowed)."""
    import json

    seed = Path(__file__).resolve().parent / "data" / "corpus" / "seeds" / "tracelens_908.rocprofv3.json"
    doc = json.loads(seed.read_text())
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][3]["start_timestamp"] = -2**63
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))
    _refused(p, r"kernel_dispatch record 3: a time beyond \+-2\*\*62 ns")


def test_section_stats_that_are_lists_are_their_json_text(tmp_path: Path):
    """journal input 12750 of seed 3: a section's stats ``{"value": []}`` became a stat
    column of shape (1, 0) (as_values kept NumPy's 2-D array), and the .polyprof export
    failed (ColumnTypeError). The same in a live run: ``section("b", v=[1, 2])`` beside
    ``section("a", v=[])`` made the host plugin fail in collect (an inhomogeneous
    array), and every section of the run was lost."""
    import subprocess
    import sys

    from polyprof.trace.builder import TraceBuilder

    b = TraceBuilder()
    plane = b.plane("/host:CPU", "host")
    track = b.track(plane, "main", "thread", 1)
    rows = b.events([track, track, track], ["a", "b", "c"], [0, 10, 20], [5, 5, 5], "section")
    b.add_stat("v", rows[:1], [[]])
    b.add_stat("w", rows, [[], [1, 2], {"k": 1}])
    b.add_stat("x", rows[:2], [[1, 2], [3, 4]])
    t = b.build()
    assert t.stats["v"].values.tolist() == ["[]"]
    assert t.stats["w"].values.tolist() == ["[]", "[1,2]", '{"k":1}']
    assert t.stats["x"].values.tolist() == ["[1,2]", "[3,4]"]
    polyprof.export(t, tmp_path / "t.polyprof")
    assert polyprof.load(tmp_path / "t.polyprof").stats["w"].values.tolist() == ["[]", "[1,2]", '{"k":1}']
    script = tmp_path / "prog.py"
    script.write_text('import polyprof\nwith polyprof.section("a", v=[]):\n    pass\n'
                      'with polyprof.section("b", v=[1, 2]):\n    pass\n')
    out = tmp_path / "run.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "-o", str(out), str(script)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "failed" not in r.stderr, r.stderr[-800:]
    t = polyprof.load(out)
    assert sorted(zip(t.names().tolist(), t.stats["v"].values.tolist())) == [("a", "[]"), ("b", "[1,2]")]


@pytest.mark.parametrize("at, was, now", [(1100, 0x05, 0x07), (938, 0x92, 0xFF), (526, 0x4C, 0xCC)])
def test_parquet_dictionary_index_beyond_its_values_is_refused(tmp_path: Path, at: int, was: int, now: int):
    """parquet inputs 4847, 16401 and 18259 of seed 6: one byte of the Parquet seed
    changed (as committed: rebuilding the seed moves these offsets), and a dictionary
    column's indices pointed past its values (pyarrow does not check them): an
    IndexError, caught only by the last net. Read unchecked, such indices can read past
    the dictionary (seed 7's input 20514 crashed a fuzz worker with SIGSEGV while the
    mutator rewrote such a table); every table read is now validated."""
    seed = Path(__file__).resolve().parent / "data" / "corpus" / "seeds" / "cuda_event_sync.parquet"
    data = bytearray(seed.read_bytes())
    assert data[at] == was, "the seed was rebuilt: find the offset again (scripts/fuzz.py --seed 6 --readers parquet)"
    data[at] = now
    p = tmp_path / "damaged.parquet"
    p.write_bytes(bytes(data))
    _refused(p, r"damaged Parquet file \(.*Dictionary indices invalid")
