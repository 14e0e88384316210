"""Which devices an MFU holds the FLOPs to: the devices that ran work, by their peaks.

- TraceLens's MI300 traces (tests/data/peers/tracelens_perf) put every kernel on pid 2
  ("GPU 2") and a tqdm monitor thread's ``python_function`` events on pid 0, which the
  file labels "GPU 0": a device plane of host events alone counted as a second working
  device and halved the MFU ("... x 2 devices").
- HTA's distributed_info_not_found (tests/data/peers/hta_distributed_info): CPU ops alone,
  but ``deviceProperties`` lists eight A100s; the A100's fp32 peak was taken (MFU 7.93%),
  beside the finding's advice for a CPU. No device ran anything: no device peak.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.efficiency import mfu, resolve_peak
from polyprof.analyze.frames import column

PEERS = Path(__file__).parent / "data" / "peers"


@pytest.mark.parametrize("name", ["mi300_gaunernst_bert-small-uncased__1016001",
                                  "mi300_Falconsai_nsfw_image_detection__1016002"])
def test_a_device_plane_of_host_events_is_no_working_device(name: str) -> None:
    trace = polyprof.load(PEERS / "tracelens_perf" / f"{name}.json.gz")
    gpus = [p.name for p in trace.planes if p.kind == "device"]
    assert len(gpus) == 2  # the monitor thread's "GPU 0" and the kernels' GPU
    table = mfu(trace)
    assert set(column(table, "devices").tolist()) == {1}
    pk = resolve_peak(trace, None)
    assert pk is not None and pk.flops("bf16") > 0
    whole = column(table, "step").tolist().index(-1)
    pct = float(column(table, "mfu_pct")[whole])
    fps = float(column(table, "flops_per_s")[whole])
    prec = column(table, "precision")[whole]
    assert pct == pytest.approx(100 * fps / pk.flops(prec))  # one device's peak


def test_cpu_ops_alone_take_no_devices_peak() -> None:
    trace = polyprof.load(PEERS / "hta_distributed_info" / "distributed_info_not_found.json.gz")
    assert trace.metadata.get("deviceProperties") or any(p.properties for p in trace.planes)
    assert resolve_peak(trace, None) is None
    table = mfu(trace)
    assert len(table) and all(v != v for v in column(table, "mfu_pct").tolist())  # NaN: unknown
