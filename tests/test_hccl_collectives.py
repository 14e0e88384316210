"""HCCL's host ranges (``hccl:all_to_all``...: Habana Gaudi, Ascend, MTIA; MTIA's
``mtia_trace_single_rank`` has 96 ``hccl:allgather``) are treated as NCCL's ``nccl:``
ones: a point-to-point kernel launched inside one that names a collective is a
collective of that kind (before, ``hccl:`` was not among the backends' prefixes, so it
stayed a ``sendrecv`` transfer); in a trace without device communication neither is a
CPU collective's work (only gloo's and MPI's ranges are)."""

from __future__ import annotations

import json
from pathlib import Path

import polyprof
from polyprof.analyze.collectives import collective_table, group_op
from polyprof.analyze.transfers import transfers


def _launch_inside(tmp_path: Path, op: str) -> polyprof.Trace:
    """A SendRecv kernel launched inside the host op ``op``."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": op, "pid": 10, "tid": 10, "ts": 100, "dur": 50, "args": {}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 110, "dur": 5,
           "args": {"correlation": 7}},
          {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
           "pid": 0, "tid": 7, "ts": 120, "dur": 40, "args": {"correlation": 7, "stream": 7, "device": 0}}]
    path = tmp_path / f"{op.replace(':', '_')}.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    return polyprof.load(path)


def test_group_op_names_hccl_ops():
    assert group_op("hccl:all_to_all") == group_op("nccl:all_to_all") == "alltoall"
    assert group_op("hccl:allgather") == "allgather" and group_op("hccl:_all_gather_base") == "allgather"
    assert group_op("hccl:all_reduce") == "allreduce"
    assert group_op("hccl:barrier") == ""  # not a collective NCCL runs as sends and receives


def test_a_sendrecv_kernel_inside_hccl_all_to_all_is_an_all_to_all(tmp_path):
    got = {}
    for op in ("nccl:all_to_all", "hccl:all_to_all", "other:all_to_all"):
        t = _launch_inside(tmp_path, op)
        ct = collective_table(t)
        got[op] = (ct["op"].tolist(), ct["p2p"].tolist(), ct["dur_ns"].tolist(), len(transfers(t)))
    assert got["hccl:all_to_all"] == got["nccl:all_to_all"] == (["alltoall"], [False], [40_000], 0)
    assert got["other:all_to_all"] == (["sendrecv"], [True], [40_000], 1)


def test_host_ranges_of_a_cpu_only_trace(tmp_path):
    """No device communication: gloo's range is the collective, the device backends'
    (``nccl:``, ``hccl:``) only enqueue and are not counted."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": name, "pid": 10, "tid": 10, "ts": ts, "dur": 20, "args": {}}
          for name, ts in (("gloo:all_reduce", 100), ("nccl:all_reduce", 200), ("hccl:all_reduce", 300),
                           ("hccl:allgather", 400))]
    (tmp_path / "cpu.json").write_text(json.dumps({"traceEvents": ev}))
    ct = collective_table(polyprof.load(tmp_path / "cpu.json"))
    assert (ct["op"].tolist(), ct["name"].tolist(), ct["start_ns"].tolist()) == (
        ["allreduce"], ["gloo:all_reduce"], [100_000])
