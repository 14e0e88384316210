"""Golden cases for the Kineto / Chrome JSON reader: a small inline trace, a query, and the
table expected, written by hand from the JSON (what Kineto's fields mean: DESIGN.md §7,
docs/architecture.md). The runner is tests/golden/runner.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import Case, dedent, run  # pytest puts this test's folder on sys.path

# A host op, its launch and the kernel it caused, linked by an ac2g flow; times relative
# to baseTimeNanoseconds, three decimals (ns); deviceProperties and distributedInfo.
NVIDIA = """{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}],
 "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2},
 "traceEvents": [
  {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
  {"ph": "M", "name": "thread_name", "pid": 100, "tid": 7, "args": {"name": "main"}},
  {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 7, "ts": 10.5, "dur": 20.25,
   "args": {"External id": 3}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 7, "ts": 12.000,
   "dur": 5.001, "args": {"correlation": 42, "External id": 3}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20.125, "dur": 8.0,
   "args": {"correlation": 42, "stream": 7, "device": 0}},
  {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 42, "pid": 100, "tid": 7, "ts": 12.000},
  {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 42, "pid": 0, "tid": 7, "ts": 20.125, "bp": "e"}
 ],
 "baseTimeNanoseconds": 1700000000000000000}"""

# B/E pairs (nested; the E's args go to its B), an instant, an E with no open B, a B
# never closed (it lasts to the end of the trace and is marked incomplete).
BEGIN_END = """{"traceEvents": [
 {"ph": "B", "name": "outer", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 100},
 {"ph": "B", "name": "inner", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 110, "args": {"a": 1}},
 {"ph": "E", "pid": 1, "tid": 1, "ts": 120, "args": {"b": "x"}},
 {"ph": "i", "name": "tick", "pid": 1, "tid": 1, "ts": 125, "s": "t"},
 {"ph": "E", "pid": 1, "tid": 1, "ts": 130},
 {"ph": "E", "pid": 1, "tid": 2, "ts": 131},
 {"ph": "B", "name": "open", "pid": 1, "tid": 2, "ts": 140},
 {"ph": "X", "name": "last", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 150, "dur": 10}
]}"""

# Counters: one arg keeps the name, several make name.arg, an id is appended; bools are no samples.
COUNTERS = """{"traceEvents": [
 {"ph": "X", "name": "op", "cat": "cpu_op", "pid": 5, "tid": 5, "ts": 1, "dur": 1},
 {"ph": "C", "name": "mem", "pid": 5, "ts": 2, "args": {"used": 100}},
 {"ph": "C", "name": "mem", "pid": 5, "ts": 3.5, "args": {"used": 50, "free": 7.5}},
 {"ph": "C", "name": "q", "id": 3, "pid": 5, "ts": 4, "args": {"depth": 2, "flag": true}}
]}"""

# Numbers at the edges: epoch µs with ns digits, an exponent, int64's ends in the ids (the
# id fast path cannot tell int64's minimum from "absent": the general path), uint64, hex
# text in an id, floats.
NUMBERS = """{"traceEvents": [
 {"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1712195495519689.047, "dur": 0.001,
  "args": {"correlation": 9223372036854775807, "big": 18446744073709551615}},
 {"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1712195495519690, "dur": 1.5,
  "args": {"correlation": -9223372036854775808, "neg": -5, "f": 1e3}},
 {"ph": "X", "name": "c", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1.712195495519691e15, "dur": 2,
  "args": {"External id": "0x10", "x": 1.5}}
]}"""

# Flows: a string id chained s -> t -> f (enclosing slices), id2, an f without bp (binds
# to the next slice), and a lone s that binds to nothing.
FLOWS = """{"traceEvents": [
 {"ph": "X", "name": "fwd", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10, "dur": 10},
 {"ph": "X", "name": "mid", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 20, "dur": 5},
 {"ph": "X", "name": "bwd", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 30, "dur": 10},
 {"ph": "s", "id": "0xa", "cat": "fwdbwd", "name": "fwdbwd", "pid": 1, "tid": 1, "ts": 12},
 {"ph": "t", "id": "0xa", "cat": "fwdbwd", "name": "fwdbwd", "pid": 1, "tid": 2, "ts": 21},
 {"ph": "f", "id": "0xa", "cat": "fwdbwd", "name": "fwdbwd", "pid": 1, "tid": 2, "ts": 30, "bp": "e"},
 {"ph": "s", "id2": {"local": "0x9"}, "cat": "x", "name": "x", "pid": 1, "tid": 1, "ts": 15},
 {"ph": "f", "id2": {"local": "0x9"}, "cat": "x", "name": "x", "pid": 1, "tid": 2, "ts": 26},
 {"ph": "s", "id": 5, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 500}
]}"""

# A device annotation and a kernel of the same span on one stream: the flow binds to the
# kernel (a real op wins over an annotation); the pid has no labels but device categories.
GPU_ANNOTATION = """{"traceEvents": [
 {"ph": "X", "name": "ProfilerStep#3", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
 {"ph": "X", "name": "ProfilerStep#3", "cat": "gpu_user_annotation", "pid": 0, "tid": 7, "ts": 10, "dur": 50},
 {"ph": "X", "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10, "dur": 50, "args": {"correlation": 5}},
 {"ph": "f", "id": 5, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 10, "bp": "e"},
 {"ph": "s", "id": 5, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 5}
]}"""

# MTIA: the device named by its process label.
MTIA = """{"traceEvents": [
 {"ph": "M", "name": "process_labels", "pid": 2, "args": {"labels": "MTIA:1"}},
 {"ph": "X", "name": "aten::add", "cat": "cpu_op", "pid": 77, "tid": 77, "ts": 1, "dur": 9},
 {"ph": "X", "name": "runFunction", "cat": "mtia_runtime", "pid": 77, "tid": 77, "ts": 2, "dur": 3,
  "args": {"correlation": 8}},
 {"ph": "X", "name": "add_kernel", "cat": "mtia_ccp_events", "pid": 2, "tid": 3, "ts": 6, "dur": 2,
  "args": {"correlation": 8, "stream": 3}}
]}"""

# ROCm: the vendor from roctracer_version, a stream handle written as hex text.
ROCM = """{"roctracer_version": 4, "traceEvents": [
 {"ph": "X", "name": "hipLaunchKernel", "cat": "cuda_runtime", "pid": 9, "tid": 9, "ts": 1, "dur": 2,
  "args": {"correlation": 1, "stream": "0x0"}},
 {"ph": "X", "name": "kern", "cat": "kernel", "pid": 4, "tid": 0, "ts": 5, "dur": 1,
  "args": {"correlation": 1, "stream": 0, "device": 4}}
]}"""

# OpenCL, as polyprof's Chrome writer names processes (after planes) and queues.
OPENCL = """{"traceEvents": [
 {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:OpenCL:0"}},
 {"ph": "M", "name": "thread_name", "pid": 3, "tid": 1, "args": {"name": "queue 0x55"}},
 {"ph": "M", "name": "thread_sort_index", "pid": 3, "tid": 1, "args": {"sort_index": 4}},
 {"ph": "X", "name": "clEnqueueNDRangeKernel", "cat": "runtime", "pid": 10, "tid": 10, "ts": 1, "dur": 1,
  "args": {"queue": "0x55"}},
 {"ph": "X", "name": "vadd", "cat": "kernel", "pid": 3, "tid": 1, "ts": 3, "dur": 4}
]}"""

# The JSON Array Format (no enclosing object).
ARRAY = """[{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 5, "dur": 1},
 {"ph": "P", "name": "sample", "pid": 1, "tid": 1, "ts": 6}]"""

CASES = [
    Case("nvidia_events", NVIDIA, "events", """
        plane | track | name | cat | start_ns | dur_ns
        /host:CPU | main | aten::mm | cpu_op | 1700000000000010500 | 20250
        /host:CPU | main | cudaLaunchKernel | cuda_runtime | 1700000000000012000 | 5001
        /device:GPU:0 | stream 7 | gemm | kernel | 1700000000000020125 | 8000"""),
    Case("nvidia_planes", NVIDIA, "planes", """
        name | kind | vendor | index | pid
        /host:CPU | host |  | 0 | 100
        /device:GPU:0 | device | NVIDIA | 0 | 0"""),
    # tracks without a thread_sort_index sort in the order they were made
    Case("nvidia_tracks", NVIDIA, "tracks", """
        plane | name | kind | tid | sort
        /host:CPU | main | thread | 7 | 0
        /device:GPU:0 | stream 7 | stream | 7 | 1"""),
    Case("nvidia_stats", NVIDIA, "stats", """
        event | key | kind | value
        aten::mm | external_id | i | 3
        cudaLaunchKernel | correlation_id | i | 42
        cudaLaunchKernel | external_id | i | 3
        gemm | correlation_id | i | 42
        gemm | device | i | 0
        gemm | stream | i | 7"""),
    Case("nvidia_flows", NVIDIA, "flows", """
        cat | id | src | dst
        ac2g | 42 | cudaLaunchKernel | gemm"""),
    Case("nvidia_metadata", NVIDIA, "metadata", """
        key | value
        rank | 1
        world_size | 2
        backend | nccl
        clock | wall
        format | kineto"""),
    Case("begin_end_events", BEGIN_END, "events", """
        plane | track | name | cat | start_ns | dur_ns
        /host:CPU | thread 1 | outer | user_annotation | 100000 | 30000
        /host:CPU | thread 1 | inner | user_annotation | 110000 | 10000
        /host:CPU | thread 1 | tick |  | 125000 | 0
        /host:CPU | thread 2 | open |  | 140000 | 20000
        /host:CPU | thread 2 | last | cpu_op | 150000 | 10000"""),
    Case("begin_end_stats", BEGIN_END, "stats", """
        event | key | kind | value
        inner | a | i | 1
        inner | b | O | x
        open | incomplete | i | 1"""),
    Case("begin_end_metadata", BEGIN_END, "metadata", """
        key | value
        clock | unknown
        format | kineto
        warning | kineto: events not imported: 1 x ph=E (no open B)
        warning | kineto: 1 slices never ended (B or b events without their E or e): they end at the trace's last timestamp (stat 'incomplete')"""),
    Case("counters", COUNTERS, "counters", """
        plane | name | ts_ns | value
        /host:CPU | mem | 2000 | 100.0
        /host:CPU | mem.free | 3500 | 7.5
        /host:CPU | mem.used | 3500 | 50.0
        /host:CPU | q 3.depth | 4000 | 2.0"""),
    Case("numbers_events", NUMBERS, "events", """
        plane | track | name | cat | start_ns | dur_ns
        /host:CPU | thread 1 | a | cpu_op | 1712195495519689047 | 1
        /host:CPU | thread 1 | b | cpu_op | 1712195495519690000 | 1500
        /host:CPU | thread 1 | c | cpu_op | 1712195495519691000 | 2000"""),
    Case("numbers_stats", NUMBERS, "stats", """
        event | key | kind | value
        a | big | u | 18446744073709551615
        a | correlation_id | i | 9223372036854775807
        b | correlation_id | i | -9223372036854775808
        b | f | f | 1000.0
        b | neg | i | -5
        c | external_id | i | 16
        c | x | f | 1.5"""),
    # an event beyond +-2**62 ns: dropped and counted, as the other readers drop such rows (it
    # refused the whole file before)
    Case("numbers_beyond_int64_ns", '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, '
         '"ts": 1e17, "dur": 1}, {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 1}]}', "metadata", """
        key | value
        clock | unknown
        format | kineto
        warning | kineto: events not imported: 1 events whose ts is beyond +-2**62 ns (about 146 years)"""),
    Case("flows_chained_and_next_slice", FLOWS, "flows", """
        cat | id | src | dst
        fwdbwd | 1 | fwd | mid
        fwdbwd | 1 | mid | bwd
        x | 2 | fwd | bwd"""),
    Case("gpu_user_annotation_events", GPU_ANNOTATION, "events", """
        plane | track | name | cat | start_ns | dur_ns
        /host:CPU | thread 1 | ProfilerStep#3 | user_annotation | 0 | 100000
        /device:GPU:0 | stream 7 | ProfilerStep#3 | gpu_user_annotation | 10000 | 50000
        /device:GPU:0 | stream 7 | k | kernel | 10000 | 50000"""),
    Case("gpu_user_annotation_flow_binds_the_kernel", GPU_ANNOTATION, "flows", """
        cat | id | src | dst
        ac2g | 5 | ProfilerStep#3 | k"""),
    # no version key, device name or runtime call says who made the GPU: no vendor (the
    # reader's own category list once made every such device NVIDIA's)
    Case("gpu_user_annotation_planes", GPU_ANNOTATION, "planes", """
        name | kind | vendor | index | pid
        /host:CPU | host |  | 0 | 1
        /device:GPU:0 | device |  | 0 | 0"""),
    Case("mtia_planes", MTIA, "planes", """
        name | kind | vendor | index | pid
        /host:CPU | host |  | 0 | 77
        /device:MTIA:1 | device | Meta | 1 | 2"""),
    Case("mtia_tracks", MTIA, "tracks", """
        plane | name | kind | tid | sort
        /host:CPU | thread 77 | thread | 77 | 0
        /device:MTIA:1 | stream 3 | stream | 3 | 1"""),
    Case("rocm_planes", ROCM, "planes", """
        name | kind | vendor | index | pid
        /host:CPU | host |  | 0 | 9
        /device:GPU:4 | device | AMD | 4 | 4"""),
    Case("rocm_stats", ROCM, "stats", """
        event | key | kind | value
        hipLaunchKernel | correlation_id | i | 1
        hipLaunchKernel | stream | i | 0
        kern | correlation_id | i | 1
        kern | device | i | 4
        kern | stream | i | 0"""),
    Case("opencl_planes", OPENCL, "planes", """
        name | kind | vendor | index | pid
        /host:CPU | host |  | 0 | 10
        /device:OpenCL:0 | device |  | 0 | 3"""),
    Case("opencl_tracks", OPENCL, "tracks", """
        plane | name | kind | tid | sort
        /host:CPU | thread 10 | thread | 10 | 0
        /device:OpenCL:0 | queue 0x55 | stream | 1 | 4"""),
    Case("opencl_stats", OPENCL, "stats", """
        event | key | kind | value
        clEnqueueNDRangeKernel | queue | O | 0x55"""),
    Case("array_format", ARRAY, "metadata", """
        key | value
        clock | unknown
        format | chrome-json
        warning | kineto: events not imported: 1 x ph=P"""),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_golden(case: Case, tmp_path: Path):
    assert run(case, tmp_path) == dedent(case.expected)
