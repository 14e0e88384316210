"""``--window hta`` on a trace HTA cannot read itself (a live OpenCL recording) is HTA 0.5's
reading of polyprof's Kineto export of it, and that export names copies as Kineto does.

Before: OpenCL device activity carries a ``queue`` and no ``stream``; the export gave it
its track's tid as ``stream`` but ``--window hta`` did not, so its Device time and idle
tables were empty (HTA on the export: idle 14.49 %); and the export kept OpenCL's copy
names (``WriteBuffer (HtoD)``), which HTA types by name as COMPUTATION (HTA: non-compute
0 % on a run of copies). Now both read the export's streams, time base and copy names
from ``formats/kineto_view.py``, and the numbers are HTA's, to the µs.

A real OpenCL program (pyopencl on PoCL) under ``polyprof run``; HTA, in a subprocess, on
the export.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import polyprof
from polyprof.analyze.breakdown import ALL_STREAMS
from polyprof.analyze.copies import copies as copy_table
from polyprof.formats.kineto_view import copy_names
from polyprof.writers import kineto as kineto_writer
from opencl_programs import head, record  # pytest puts tests/ on sys.path

pytestmark = [pytest.mark.opencl,  # conftest: skipped, with the reason, where no OpenCL device compiles
              pytest.mark.skipif(importlib.util.find_spec("hta") is None,
                                 reason="Holistic Trace Analysis is not installed")]

#: steps of an upload, a short kernel and a download of 4 MiB each: mostly copies
COPIES = head(1 << 20) + """
for step in range(6):
    cl.enqueue_copy(q, da, a)
    knl(q, a.shape, None, da, db, np.int32(2))
    cl.enqueue_copy(q, a, da)
    q.finish()
    polyprof.step()
"""

_HTA = r"""
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[2])
tb = ta.get_temporal_breakdown(visualize=False).iloc[0]
types = ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)[0]
idle = ta.get_idle_time_breakdown(visualize=False)[0]
json.dump({"temporal": {k: float(v) for k, v in tb.items()},
           "types": {r["kernel_type"]: int(r["sum"]) for _, r in types.iterrows()},
           "idle": {r["idle_category"]: float(r["idle_time"]) for _, r in idle.iterrows()}},
          open(sys.argv[1], "w"))
"""


def hta_on(directory: Path, tmp: Path) -> dict:
    out = tmp / "hta.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _HTA, str(out), str(directory)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the .polyprof recording, its Kineto export as ``<dir>/rank0.json.gz``)."""
    tmp = tmp_path_factory.mktemp("ocl_hta")
    record(tmp, "copies", COPIES, [], [], summary=False)
    src = tmp / "copies.polyprof"
    (tmp / "exp").mkdir()
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(src), "-f", "kineto", "-o",
                        str(tmp / "exp" / "rank0.json.gz")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return src, tmp / "exp"


def test_window_hta_on_an_opencl_recording_is_htas_on_its_export(recorded: tuple[Path, Path],
                                                                 tmp_path: Path) -> None:
    src, exported = recorded
    h = hta_on(exported, tmp_path)
    t = polyprof.load(src)
    tb = polyprof.analyze.temporal_breakdown(t, window="hta").to_pandas()
    assert len(tb), "no Device time rows under --window hta"  # before: none
    row = tb[tb["stream"] == ALL_STREAMS].iloc[-1]
    temporal = h["temporal"]
    assert row["span_ns"] == temporal["kernel_time(us)"] * 1000
    assert row["idle_ns"] == temporal["idle_time(us)"] * 1000
    assert row["compute_ns"] == temporal["compute_time(us)"] * 1000
    assert row["non_compute_ns"] == temporal["non_compute_time(us)"] * 1000 > 0
    idle = polyprof.analyze.idle_time_breakdown(t, window="hta").to_pandas().iloc[-1]
    assert {k: idle[f"{k}_ns"] for k in ("host_wait", "kernel_wait", "other")} == \
        {k: h["idle"].get(k, 0) * 1000 for k in ("host_wait", "kernel_wait", "other")}  # (HTA: no row of 0 µs)
    states = polyprof.analyze.kernel_state_breakdown(t, window="hta").to_pandas().set_index("state")
    assert h["types"]["MEMORY"] * 1000 == states.loc["memory only", "time_ns"] > 0  # before: no MEMORY row
    assert h["types"]["COMPUTATION"] * 1000 == states.loc["compute only", "time_ns"]


def test_the_export_names_opencl_copies_as_kineto_does(recorded: tuple[Path, Path]) -> None:
    src, exported = recorded
    doc = orjson.loads(gzip.decompress((exported / "rank0.json.gz").read_bytes()))
    copies = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert {e["name"] for e in copies} == {"Memcpy HtoD (WriteBuffer (HtoD))", "Memcpy DtoH (ReadBuffer (DtoH))"}
    assert {e["args"]["polyprof_name"] for e in copies} == {"WriteBuffer (HtoD)", "ReadBuffer (DtoH)"}
    assert all(isinstance(e["args"]["stream"], int) for e in copies)
    # read back, they are the same copies, of the same kinds
    back = copy_table(polyprof.load(exported / "rank0.json.gz"), window=None).to_pandas()
    ours = copy_table(polyprof.load(src), window=None).to_pandas()
    cols = ["kind", "count", "total_bytes", "total_ns"]
    assert back[cols].values.tolist() == ours[cols].values.tolist()


DATA = Path(__file__).parent / "data"


def test_copy_names_of_every_source_hta_would_not_call_memory() -> None:
    """Copies named otherwise than Kineto's ``Memcpy``/``Memset`` (rpd's ``CopyHostToDevice``
    and ``FillBuffer``, XLA's legacy ``CopyDeviceToDevice``) get Kineto's names; those HTA
    already types as memory (CUPTI's, XLA's ``MemcpyH2D``, ``Memset 3``, MTIA's
    ``dma_request``) keep theirs."""
    def renamed(path: Path) -> dict[str, str]:
        t = polyprof.load(path)
        cn = copy_names(t)
        return {t.strings[t.events["name"][r]]: cn.names[k] for r, k in zip(cn.rows.tolist(), cn.which.tolist())}

    assert renamed(DATA / "rpd" / "matmul_result.json") == {
        "CopyHostToDevice": "Memcpy HtoD (CopyHostToDevice)", "CopyDeviceToHost": "Memcpy DtoH (CopyDeviceToHost)",
        "FillBuffer": "Memset (FillBuffer)"}
    assert renamed(DATA / "peers" / "tracelens" / "jax_conv_minimal_legacy.xplane.pb") == {
        "CopyDeviceToDevice": "Memcpy DtoD (CopyDeviceToDevice)"}
    for kept in (DATA / "h200" / "jax_copies_h200.xplane.pb", DATA / "h200" / "torch_copies_h200.json.gz",
                 DATA / "traces" / "kineto" / "mtia_inference_rank0.json.gz"):
        assert renamed(kept) == {}, kept


def test_window_hta_types_the_export_names_not_the_own() -> None:
    """The rpd Chrome JSON is read by HTA itself: its own names (``CopyHostToDevice``, which
    HTA calls compute) count under --window hta; its export names them ``Memcpy HtoD
    (...)``, which HTA calls memory."""
    path = DATA / "rpd" / "matmul_result.json"
    t = polyprof.load(path)
    own = polyprof.analyze.kernel_state_breakdown(t, window="hta").to_pandas()
    assert "memory only" not in set(own["state"])
    doc = kineto_writer.to_kineto(t)
    names = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"}
    assert names == {"Memcpy HtoD (CopyHostToDevice)", "Memcpy DtoH (CopyDeviceToHost)"}
