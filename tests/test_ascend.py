"""Huawei Ascend timelines (msprof's and MindInsight's Chrome JSON) read as an NPU device.

Files: tests/data/peers/mindinsight/ (MindInsight's test resources, one device of a
two-device AlexNet run with an AllReduce; two of MindSpore's older timeline displays with
the summaries MindSpore wrote beside them). Expected numbers come from the files
themselves: each task's ``Task Type``, msprof's own ``Overlap Analysis`` lines and
step trace, and unions of the raw intervals computed here with exact decimals.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import temporal_breakdown
from polyprof.analyze.kernel_states import kernel_state_breakdown
from polyprof.derive import cache
from polyprof.formats.kineto.chunks import Unsupported, read_chunks
from polyprof.trace.categories import Kind

DATA = Path(__file__).parent / "data" / "peers" / "mindinsight"
MSPROF = DATA / "msprof_0_2_1.json.gz"


def _raw(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def _ns(x: object) -> int:
    return int(Decimal(str(x)) * 1000)


def _union(iv: list[tuple[int, int]]) -> int:
    total, end = 0, None
    start = 0
    for s, e in sorted(iv):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    return total + (end - start if end is not None else 0)


def _processes(events: list[dict]) -> dict[object, str]:
    return {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}


def _category_totals(t: polyprof.Trace) -> dict[str, tuple[int, int]]:
    count: Counter = Counter()
    total: Counter = Counter()
    for c, d in zip(t.categories().tolist(), t.dur_ns.tolist()):
        count[c] += 1
        total[c] += d
    return {c: (count[c], total[c]) for c in count}


def test_msprof_is_an_npu_device_with_tasks_by_type():
    raw = _raw(MSPROF)
    names = _processes(raw)
    tasks = [e for e in raw if e.get("ph") == "X" and names[e["pid"]] == "Ascend Hardware"
             and "Task Type" in e.get("args", {})]
    by_type: Counter = Counter()
    for e in tasks:
        by_type[e["args"]["Task Type"]] += _ns(e["dur"])
    t = polyprof.load(MSPROF)
    device = [p for p in t.planes if p.kind == "device"]
    assert [(p.name, p.vendor) for p in device] == [("/device:NPU:0", "Huawei")]
    cats = _category_totals(t)
    # AI Core and AI CPU tasks are the kernels: 137 + 2, 5,911,230 + 1,039,500 ns
    assert cats["kernel"] == (139, by_type["AI_CORE"] + by_type["AI_CPU"]) == (139, 6_950_730)
    # every task on HCCL's streams (its notify, reduce and copy tasks) is communication
    hccl_streams = {e["args"]["stream id"] for e in raw if e.get("ph") == "X" and names[e["pid"]] == "HCCL"
                    and "stream id" in e.get("args", {})}
    on_hccl = [e for e in tasks if e["args"]["Stream Id"] in hccl_streams]
    assert hccl_streams == {3, 10, 12, 13}
    assert cats["collective_comm"] == (len(on_hccl), sum(_ns(e["dur"]) for e in on_hccl)) == (342, 165_249_680)
    # the other event record / wait / reset tasks are not activity
    assert cats["npu_sync"][0] == len(tasks) - 139 - 342 == 9
    # HCCL's own lines repeat the hardware tasks, Overlap Analysis is msprof's summary: derived
    derived = {tr.name for tr in t.tracks if tr.kind == "derived"}
    assert derived == {"Plane 0", "Plane 1", "Plane 2", "Plane 3", "Communication Kernel", "Computing",
                       "Communication", "Communication(Not Overlapped)", "Free"}
    assert cats["runtime"] == (1, 47_878_150)  # CANN's GE@Infer


def test_msprof_device_time_matches_the_files_own_numbers():
    raw = _raw(MSPROF)
    names = _processes(raw)
    xs = [e for e in raw if e.get("ph") == "X"]
    overlap = {n: sum(_ns(e["dur"]) for e in xs if names[e["pid"]] == "Overlap Analysis" and e["name"] == n)
               for n in ("Computing", "Communication")}
    hw = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["args"]["Task Type"], e["args"]["Stream Id"]) for e in xs
          if names[e["pid"]] == "Ascend Hardware" and "Task Type" in e.get("args", {})]
    t = polyprof.load(MSPROF)
    ks = kernel_state_breakdown(t)
    state = dict(zip(ks["state"].tolist(), ks["time_ns"].tolist()))
    # compute only: msprof's "Computing" line, to the ns (the AI Core / AI CPU tasks' union)
    assert state["compute only"] == overlap["Computing"] == 5_914_580
    compute = [(s, e) for s, e, ty, _ in hw if ty in ("AI_CORE", "AI_CPU")]
    assert _union(compute) == 5_914_580
    # communication: msprof's "Communication" is the AllReduce op's span (41,534,300 ns);
    # HCCL's streams' tasks (waits included) reach 2.57 us beyond it: 41,536,870 ns
    assert overlap["Communication"] == 41_534_300
    assert state["communication only"] == 41_536_870
    # busy: the union of the compute tasks and every task on HCCL's streams, by hand
    busy = _union([(s, e) for s, e, ty, st in hw if ty.startswith("AI_") or st in (3, 10, 12, 13)])
    tb = temporal_breakdown(t)
    whole = tb[tb["stream"] == "(all streams)"] if "(all streams)" in tb["stream"].tolist() else tb
    assert int(whole["busy_ns"][-1]) == busy == 47_451_450
    # the analysed span is the one iteration: msprof's "Iteration Time(ns)"
    assert int(whole["span_ns"][-1]) == 47_587_810


def test_iterations_are_steps():
    t = polyprof.load(MSPROF)
    steps = cache.steps(t)
    assert steps.number.tolist() == [1]
    assert (steps.end - steps.start).tolist() == [47_587_810]
    raw = _raw(DATA / "step_trace_0_2_4.json")
    want = [(e["args"]["Iteration ID"], int(e["args"]["Iteration Time(ns)"])) for e in raw
            if e.get("cat") == "Iteration Time"]
    t = polyprof.load(DATA / "step_trace_0_2_4.json")
    steps = cache.steps(t)
    assert list(zip(steps.number.tolist(), (steps.end - steps.start).tolist())) == want
    assert len(want) == 10 and want[1] == (2, 15_369_160)
    cats = _category_totals(t)
    assert cats["step"][0] == 10 and cats["derived"][0] == 30  # FP/BP, refresh, reduce spans


def test_task_time_and_hccl_files_alone():
    t = polyprof.load(DATA / "task_time_0_2_1.json.gz")
    assert [(p.name, p.vendor) for p in t.planes] == [("/device:NPU:0", "Huawei")]
    cats = _category_totals(t)
    # no HCCL process: its streams are those of the notify tasks, as in the whole timeline
    assert cats["kernel"] == (139, 6_950_730)
    assert cats["collective_comm"] == (342, 165_249_680)
    assert cats["npu_sync"][0] == 9
    t = polyprof.load(DATA / "hccl_0_2_1.json.gz")
    cats = _category_totals(t)
    assert cats["collective_comm"] == (337, 165_246_600)  # its planes' tasks: the communication
    assert cats["derived"] == (1, 41_534_300)  # the AllReduce op on "Communication Kernel"
    v = temporal_breakdown(t)
    assert int(v["compute_ns"].sum()) == 0


def test_ascend_traces_are_not_converted_in_chunks():
    with pytest.raises(Unsupported):
        read_chunks(MSPROF, lambda chunk: None)


def test_a_bare_npu_label_elsewhere_is_device_zero(tmp_path):
    """A process labelled ``NPU`` (no index) outside msprof is an NPU device too, with no
    vendor claimed and its events' categories as written."""
    doc = [{"name": "process_labels", "ph": "M", "pid": 5, "args": {"labels": "NPU"}},
           {"name": "k", "ph": "X", "pid": 5, "tid": 1, "ts": 1, "dur": 2, "cat": "kernel"}]
    p = tmp_path / "npu.json"
    p.write_text(json.dumps(doc))
    t = polyprof.load(p)
    assert [(x.name, x.kind, x.vendor) for x in t.planes] == [("/device:NPU:0", "device", "")]
    assert t.categories().tolist() == ["kernel"]
    assert np.array_equal(t.dur_ns, [2000])


def test_an_arg_too_big_for_an_integer_is_no_stream(tmp_path):
    """A ``Stream Id`` of 20 digits (damage, or a newer msprof's id) made the whole trace
    a refusal (OverflowError); it is a task of no known stream now, the rest read."""
    raw = _raw(MSPROF)
    names = _processes(raw)
    task = next(e for e in raw if e.get("ph") == "X" and names[e["pid"]] == "Ascend Hardware"
                and e.get("args", {}).get("Task Type") == "AI_CORE")
    task["args"]["Stream Id"] = "99999999999999999999"
    p = tmp_path / "msprof.json"
    p.write_text(json.dumps(raw, default=str))
    assert _category_totals(polyprof.load(p))["kernel"][0] == 139


def _per_line(t: polyprof.Trace) -> dict[str, tuple[int, int, str]]:
    """(events, ns, kind) of each line of the trace."""
    out: dict[str, tuple[int, int, str]] = {}
    for k, d, kind in zip(t.events["track"].tolist(), t.dur_ns.tolist(), t.kinds.tolist()):
        n, total, _ = out.get(t.tracks[k].name, (0, 0, ""))
        out[t.tracks[k].name] = (n + 1, total + d, str(Kind(kind).name))
    return out


def test_mindspore_timeline_display_is_the_npu():
    """MindSpore's older ``timeline_display_<n>.json`` (X events, no metadata: the ops on
    pid = device id, a line per stream; the communication spans on pid 10000) was read
    as two host processes. Its ops are the NPU's kernels: 2,817 on 11 streams,
    1,771,382.85 µs, MindSpore's own timeline_summary_1.json (op_exe_times,
    num_of_streams, total_time); its communication spans are collective_comm."""
    t = polyprof.load(DATA / "timeline_display_1.json.gz")
    summary = json.loads((DATA / "timeline_summary_1.json").read_text())
    assert [(p.name, p.kind, p.vendor) for p in t.planes] == [("/device:NPU:1", "device", "Huawei")]
    lines = _per_line(t)
    streams = {k: v for k, v in lines.items() if k.startswith("stream ")}
    comm = {k: v for k, v in lines.items() if k.startswith("communication ")}
    assert len(streams) == summary["num_of_streams"] == 11 and len(comm) == 11 and len(lines) == 22
    assert sum(v[0] for v in streams.values()) == summary["op_exe_times"] == 2817
    assert {v[2] for v in streams.values()} == {"KERNEL"} and {v[2] for v in comm.values()} == {"COLLECTIVE"}
    raw = _raw(DATA / "timeline_display_1.json.gz")
    want = sum(round(Decimal(str(e["dur"])) * 1000) for e in raw if e["pid"] == 1)  # µs, to the ns
    got = sum(v[1] for v in streams.values())
    assert got == want == round(Decimal(str(summary["total_time"])) * 1000) == 1_771_382_850
    assert sum(v[0] for v in comm.values()) == 3542


def test_mindspore_ascend_timeline_display_ai_cpu_is_a_line_of_the_npu():
    """The AI CPU's ops (pid 9000) are the NPU's too: 107 ops on stream 519 and 5 on the
    AI CPU, MindSpore's op_exe_times 112 on num_of_streams 2."""
    t = polyprof.load(DATA / "ascend_timeline_display_1.json.gz")
    summary = json.loads((DATA / "ascend_timeline_summary_1.json").read_text())
    assert [(p.name, p.kind) for p in t.planes] == [("/device:NPU:1", "device")]
    lines = _per_line(t)
    assert {k: v[0] for k, v in lines.items()} == {"stream 519": 107, "AI CPU": 5}
    assert sum(v[0] for v in lines.values()) == summary["op_exe_times"] and len(lines) == summary["num_of_streams"]
    assert {v[2] for v in lines.values()} == {"KERNEL"}


@pytest.mark.parametrize("pids", [(1, 2, 9000), (1, 77777), (1234, 9000), (0, 10000)])
def test_other_traces_without_metadata_keep_their_host(tmp_path, pids):
    """Only MindSpore's layout (one pid below 9000 beside its fixed AI CPU or communication
    pids) is taken for it: other metadata-less traces stay host processes."""
    p = tmp_path / "t.json"
    p.write_text(json.dumps([{"name": "op", "ph": "X", "pid": pid, "tid": 3, "ts": 1, "dur": 2} for pid in pids]))
    t = polyprof.load(p)
    assert {x.kind for x in t.planes} == {"host"}
