"""TensorBoard's torch plugin (kineto tb_plugin) on its own resnet50 samples: polyprof's
operator and kernel tables equal the tables tb_plugin's end-to-end test expects
(``result_check_file.txt``, the commit before tb_plugin left pytorch/kineto).

The samples are torch 1.8-era Kineto traces: X events carry their ``tid`` as a string and
flows as an int, and ``aten::div`` calls ``aten::div``. tb_plugin's tables leave out the
``ProfilerStep#N`` and user-annotation rows (polyprof lists them as ops too), and
polyprof's kernel table has no Tensor Core, blocks-per-SM or occupancy columns; every
other number is compared, all rows. Its times are in whole microseconds (the means
rounded).
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import kernel_breakdown
from polyprof.analyze.frames import column
from polyprof.analyze.ops import merged_into, op_stats
from polyprof.trace.builder import TraceBuilder

DATA = Path(__file__).parent / "data" / "peers" / "tb_plugin"
#: run -> (sample of worker0 span 1, line of its operator table, of its kernel table, its flows)
RUNS = {
    "resnet50_num_workers_0": ("worker0.1623143089861", 2, 3, 9096),
    "resnet50_num_workers_4": ("worker0.1623212756351", 7, 8, 9258),
}


def sample(run: str, tmp: Path) -> Path:
    """The run's sample as the .json tb_plugin read (kept here xz-compressed)."""
    out = tmp / f"{run}.{RUNS[run][0]}.pt.trace.json"
    if not out.exists():
        out.write_bytes(lzma.decompress((DATA / f"{out.name}.xz").read_bytes()))
    return out


@pytest.fixture(scope="module", params=sorted(RUNS))
def run(request, tmp_path_factory):
    name = request.param
    lines = (DATA / "result_check_file.txt").read_text().splitlines()
    trace = polyprof.load(sample(name, tmp_path_factory.getbasetemp()))
    return trace, json.loads(lines[RUNS[name][1]]), json.loads(lines[RUNS[name][2]]), RUNS[name][3]


def test_operator_table_equals_tb_plugin(run):
    trace, ops, _, _ = run
    t = op_stats(trace)
    row = {n: i for i, n in enumerate(column(t, "name"))}
    us = lambda c, i: int(column(t, c)[i]) // 1000  # noqa: E731
    assert len(ops["data"]) > 60
    for r in ops["data"]:
        i = row[r["name"]]
        assert (int(column(t, "count")[i]), us("self_device_ns", i), us("device_ns", i), us("self_ns", i),
                us("total_ns", i)) == (r["calls"], r["device_self_duration"], r["device_total_duration"],
                                        r["host_self_duration"], r["host_total_duration"]), r["name"]
    extra = set(row) - {r["name"] for r in ops["data"]}
    assert all(n.startswith(("ProfilerStep#", "Optimizer.", "enumerate(DataLoader)")) for n in extra), extra


def test_kernel_table_equals_tb_plugin(run):
    trace, _, kernels, _ = run
    t = kernel_breakdown(trace)
    row = {n: i for i, n in enumerate(column(t, "name"))}
    rows = kernels["data"]["rows"]
    assert len(rows) > 60
    for r in rows:
        i = row[r[0]]
        got = (int(column(t, "count")[i]), int(column(t, "total_ns")[i]) // 1000,
               int(np.round(column(t, "mean_ns")[i] / 1000)), int(column(t, "max_ns")[i]) // 1000,
               int(column(t, "min_ns")[i]) // 1000)
        assert got == tuple(r[2:7]), r[0]
    # the rest are the copies and fills, which tb_plugin's kernel table leaves out
    assert set(column(t, "kind")[[i for n, i in row.items() if n not in {r[0] for r in rows}]]) <= {
        "memcpy", "memset"}


def _running_peaks(path: Path) -> dict[int, tuple[int, int]]:
    """Per Device Type: (peak, end) of the running sum of the file's [memory] Bytes, in time
    then file order (tb_plugin 0.4.3 computes no peak for these events: its memory curve
    keeps only events with an Addr and a Total Allocated, which torch 1.8 did not write)."""
    evs = json.loads(path.read_text())["traceEvents"]
    by: dict[int, list[tuple[int, int, int]]] = {}
    for i, e in enumerate(evs):
        if e.get("name") == "[memory]":
            by.setdefault(e["args"]["Device Type"], []).append((e["ts"], i, e["args"]["Bytes"]))
    out = {}
    for dtype, evs_ in by.items():
        run = np.cumsum([b for _, _, b in sorted(evs_)])
        assert run.min() >= 0  # nothing freed that the profile did not see allocated
        out[dtype] = (int(run.max()), int(run[-1]))
    return out


@pytest.mark.parametrize("name, cpu, gpu", [("resnet50_num_workers_0", (57_803_264, 19_267_840), (2_791_636_480, 0)),
                                            ("resnet50_num_workers_4", (57_803_520, 0), (2_791_505_408, 0))])
def test_torch_18_memory_events_give_each_devices_peak(name, cpu, gpu, tmp_path):
    """Torch 1.8's [memory] events (Bytes, Device Type, Device Id; no totals, no Addr):
    the peak and end per device are the running sum of Bytes, as counted from the file."""
    from polyprof.analyze.memory import memory_peak

    path = sample(name, tmp_path)
    assert _running_peaks(path) == {0: cpu, 1: gpu}
    t = memory_peak(polyprof.load(path))
    got = {d: (int(p), int(e)) for d, p, e in zip(column(t, "device"), column(t, "peak_bytes"),
                                                   column(t, "end_bytes"))}
    assert got == {"/host:CPU": cpu, "/device:GPU:0": gpu}
    assert not column(t, "from_allocator").any() and column(t, "start_bytes").tolist() == [0, 0]


def test_every_flow_binds_and_each_thread_is_one_track(run):
    trace, _, _, flows = run  # every "s" of the file (its tid an int) bound to its launch call
    assert not any("flow" in w for w in trace.metadata.get("warnings", []))
    assert len(trace.flows["src"]) == flows
    assert set(trace.names(trace.flows["src"])) <= {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"}
    host = [tr.tid for tr in trace.tracks if tr.kind == "thread" and tr.tid > 0]
    assert len(host) == len(set(host))
    # torch 1.8's device thread is the text "stream 7": the stream's name and number, as later
    # torch writes tid 7 (before: a track "0/stream 7", tid -1)
    assert [(tr.name, tr.tid) for tr in trace.tracks if tr.kind == "stream"] == [("stream 7", 7)]


def test_an_op_calling_itself_counts_once():
    # aten::div -> aten::div (its only child op) is one call, as torch's key_averages;
    # an op with two children of its name, or a child of another name, is not merged
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", tid=1)
    gpu = b.track(b.plane("/device:GPU:0", "device"), "s", "stream", tid=7)
    b.event(th, "aten::div", 0, 100, "cpu_op", external_id=1)
    b.event(th, "aten::div", 10, 80, "cpu_op", external_id=2)
    b.event(th, "cudaLaunchKernel", 20, 10, "cuda_runtime", correlation_id=5, external_id=2)
    b.event(gpu, "div_kernel", 40, 30, "kernel", correlation_id=5)
    b.event(th, "aten::add", 200, 100, "cpu_op")
    b.event(th, "aten::add", 210, 20, "cpu_op")
    b.event(th, "aten::add", 240, 20, "cpu_op")
    t = op_stats(b.build())
    row = {n: i for i, n in enumerate(column(t, "name"))}
    i = row["aten::div"]
    assert [int(column(t, c)[i]) for c in ("count", "total_ns", "self_ns", "device_ns", "self_device_ns")] == [
        1, 100, 90, 30, 30]
    assert int(column(t, "count")[row["aten::add"]]) == 3
    # a chain of three collapses onto the outermost
    tr = np.zeros(3, np.int64)
    st = np.array([0, 1, 2])
    assert merged_into(tr, st, np.array([10, 9, 8]), np.array([4, 4, 4])).tolist() == [0, 0, 0]


def test_op_efficiency_counts_no_guessed_convolution_and_splits_host_calls(run):
    """The 2021 samples recorded shapes but no concrete inputs: a convolution's stride and
    padding are unknown, so it has no FLOPs (a stride-1 guess counted the stride-2 ones
    4x: MFU and roofline over 100% on the V100). The data loader's ``aten::div`` on the
    host and the model's on the GPU are two rows: the device row's rate is of its own
    calls (the host calls' FLOPs over the device calls' time read 208% of the roofline)."""
    from polyprof.analyze.efficiency import mfu, op_efficiency
    from polyprof.analyze.flops import estimate_one

    assert np.isnan(estimate_one("aten::cudnn_convolution", "[[32,64,56,56],[64,64,3,3],[],[],[],[],[]]",
                                 '["float","float"]')[0])
    trace = run[0]
    oe = op_efficiency(trace)
    names, where = column(oe, "name").tolist(), column(oe, "where").tolist()
    assert not [n for n in names if "conv" in n]
    div = {w: i for i, (n, w) in enumerate(zip(names, where)) if n == "aten::div"}
    # num_workers=0: the loader's calls are in the trace; num_workers=4: in its workers
    assert set(div) == ({"host", "device"} if "num_workers_0" in trace.sources[0].label else {"device"})
    assert len(set(zip(names, where))) == len(names)
    host = np.asarray(where) == "host"
    assert not (column(oe, "device_ns")[host] > 0).any() and np.isnan(column(oe, "roofline_pct")[host]).all()
    # the device div: its expanded input (a mean's gradient) is read once per distinct element,
    # which torch 1.8 records no strides to tell: its modelled bytes pass the roof (119%),
    # which is no share of the roof (NaN), while its achieved rate stays
    assert column(oe, "bytes_per_s")[div["device"]] < 1.5 * 900e9
    assert np.isnan(column(oe, "roofline_pct")[div["device"]])
    m = mfu(trace)
    assert 0 < column(m, "mfu_pct")[0] < 1  # fp32 on a V100, mostly memory-bound ops without convolutions
