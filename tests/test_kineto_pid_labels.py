"""Kineto labels the pids 0-15 ``GPU N`` whatever they are (its device processes), so a
host process of a small pid (1: a container's entrypoint) is labelled both ``CPU`` and
``GPU 1``. Before, the last label won: the host's ops and launch calls were read as the
activity of a ``/device:GPU:1``, no launch was matched ("no host launch calls in this
trace"), the idle time read 100% "other" and the critical path found none
(formats/kineto/collector.device_label, devices.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyprof.cli import main
from polyprof.formats.detect import load

TRACELENS = Path(__file__).resolve().parent / "data/peers/tracelens/ddp_resnet18_pid1.json.gz"


def _kineto(tmp_path: Path, host_pid: int, gpu_labels_first: bool = False) -> Path:
    """A host process ``host_pid`` labelled CPU and (as Kineto does) GPU ``host_pid``, a
    kernel of GPU 0 launched from it."""
    cpu = [{"ph": "M", "name": "process_name", "pid": host_pid, "tid": 0, "args": {"name": "python3"}},
           {"ph": "M", "name": "process_labels", "pid": host_pid, "tid": 0, "args": {"labels": "CPU"}}]
    gpus = [m for g in (0, 1) for m in (
        {"ph": "M", "name": "process_name", "pid": g, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": g, "tid": 0, "args": {"labels": f"GPU {g}"}})]
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": host_pid, "tid": 1, "ts": 0, "dur": 20,
               "args": {"External id": 1}},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": host_pid, "tid": 1, "ts": 5,
               "dur": 5, "args": {"correlation": 7, "External id": 1}},
              {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7, "ts": 30, "dur": 10,
               "args": {"correlation": 7, "External id": 1, "device": 0, "stream": 7}}]
    path = tmp_path / f"pid{host_pid}.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": (gpus + cpu if gpu_labels_first else cpu + gpus)
                                + events}))
    return path


def _where(trace) -> dict[str, tuple[str, str]]:
    """(plane, track) of each event by name."""
    track = trace.events["track"]
    return {trace.strings[int(n)]: (trace.planes[trace.tracks[int(t)].plane].name, trace.tracks[int(t)].name)
            for n, t in zip(trace.events["name"].tolist(), track.tolist())}


@pytest.mark.parametrize("first", [False, True], ids=["cpu-label-first", "gpu-label-first"])
def test_a_host_pid_kineto_also_labels_a_gpu_stays_the_host(tmp_path, kineto_compiled, first):
    t = load(_kineto(tmp_path, 1, first))
    assert _where(t) == {"aten::add": ("/host:CPU", "thread 1"), "cudaLaunchKernel": ("/host:CPU", "thread 1"),
                         "add_kernel": ("/device:GPU:0", "stream 7")}
    assert [p.name for p in t.planes if p.kind == "device"] == ["/device:GPU:0"]


def test_a_host_pid_that_is_its_devices_index_is_split_by_thread(tmp_path, kineto_compiled, capsys, caplog):
    """Host pid 0, its GPU's pid too: the thread with device activity is the device's
    stream, the host's thread the host's (before: both on /device:GPU:0, host-wait 0%);
    ``convert`` reads such a file whole (said), into the same planes."""
    path = _kineto(tmp_path, 0)
    t = load(path)
    assert _where(t) == {"aten::add": ("/host:CPU", "thread 1"), "cudaLaunchKernel": ("/host:CPU", "thread 1"),
                         "add_kernel": ("/device:GPU:0", "stream 7")}
    assert t.plane_by_name("/device:GPU:0").properties["process_labels"] == "GPU 0"
    assert main(["convert", str(path), "-o", str(tmp_path / "st")]) == 0
    assert "read whole, not in chunks (a process labelled both a host's and a device's" in caplog.text
    assert main(["sql", str(tmp_path / "st"), "select plane, track, name from events order by name", "--csv"]) == 0
    rows = capsys.readouterr().out.replace('"', "").strip().splitlines()[1:]
    assert rows == ["/device:GPU:0,stream 7,add_kernel", "/host:CPU,thread 1,aten::add",
                    "/host:CPU,thread 1,cudaLaunchKernel"], rows


def test_tracelens_ddp_resnet18_of_host_pid_1_matches_hta(capsys):
    """TraceLens' MI300 DDP ResNet-18 trace (host pid 1, kernels on pid 2): every kernel
    launched from the host and the idle time waiting for it, as HTA 0.5 reads the file
    (host_wait 3,032,986 of 3,034,785 µs idle)."""
    t = load(TRACELENS)
    assert sorted(p.name for p in t.planes) == ["/device:GPU:2", "/host:CPU"]
    assert main(["summary", str(TRACELENS), "--json", "--window", "hta"]) == 0
    doc = json.loads(capsys.readouterr().out)
    overview = doc["overview"]["correlation"]
    assert overview["matched_by_correlation_id"] == overview["device_activities"] == 2375, overview
    whole = next(r for r in doc["tables"]["idle_time_breakdown"]["records"] if r["stream"] == "(all streams)")
    assert (whole["idle_ns"], whole["host_wait_ns"]) == (3_034_785_000, 3_032_986_000), whole


def test_the_cupti_overhead_of_pid_minus_1_is_on_the_host_plane(tmp_path, kineto_compiled):
    """Kineto writes CUPTI's ``Activity Buffer Request`` (category ``overhead``) at pid
    -1, which no process metadata names: it made a plane ``/host:CPU:-1`` of its own
    ("on 3 planes"); it is the profiler's work in the host process."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 9, "ts": 0, "dur": 20},
              {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0, "ts": 1,
               "dur": 3},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 10,
               "args": {"device": 0, "stream": 7}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    t = load(path)
    assert sorted(p.name for p in t.planes) == ["/device:GPU:0", "/host:CPU"]
    assert _where(t)["Activity Buffer Request"] == ("/host:CPU", "thread 0")
