"""Seed inputs for the fuzzers: small real traces of every format a reader accepts.

Committed under tests/data/corpus/seeds so every run mutates the same bytes;
``python -m fuzz.seeds`` (from tests/) rebuilds them from the real traces in
tests/data/traces and from a real profiled run (the journal seed is the ``.partial``
file of a program killed with SIGKILL); ``python -m fuzz.seeds --more`` rebuilds only
the seeds of the readers added later (:func:`_more_seeds`: Perfetto, rocprofv3 JSON and
CSV, rocprof v1 CSV, nsys stats CSV, Ascend/MindSpore and rocprof v1 Chrome JSON,
torch's memory timeline, Parquet; the memory timeline needs torch)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"
SEEDS = ROOT / "tests" / "data" / "corpus" / "seeds"

#: reader -> file-name suffixes of its seeds (the runner writes mutants with the same suffix)
READERS = {
    "kineto": (".json", ".json.gz"),
    "xspace": (".xplane.pb", ".xplane.pb.gz"),
    "native": (".polyprof",),
    "journal": (".polyprof.partial",),
    "nsys": (".sqlite",),
    "rocpd": (".db",),
    "rpd": (".rpd",),
    "perfetto": (".pftrace",),
    "rocprof_json": (".rocprofv3.json",),
    "rocprof_csv": ("_kernel_trace.csv", "_memory_copy_trace.csv", "_marker_api_trace.csv"),
    "rocprof_v1_csv": (".results.csv",),
    "nsys_csv": ("_cuda_gpu_trace.csv", "_cuda_api_trace.csv", "_nvtx_pushpop_trace.csv", "_stats_stdout.txt"),
    "vendor_json": (".vendor.json",),
    "memory_timeline": (".memtl.json",),
    "parquet": (".parquet",),
}
#: readers whose seeds are built when asked for (sqlite_mutators.build_seeds), not committed
BUILT = ("nsys", "rocpd", "rpd")

KINETO_SEEDS = ["cpu_only_rank34", "cuda_event_sync_multistream", "mi250_rocm_minitoy", "triton_example"]

KILLED = """
import os, signal, threading, time
import polyprof

def worker():
    for i in range(12):
        with polyprof.section("worker item", i=i, tag="w"):
            time.sleep(0.002)

t = threading.Thread(target=worker, name="bg")
t.start()
for i in range(6):
    with polyprof.section("main step", lr=0.5):
        time.sleep(0.004)
    polyprof.counter("loss", 1.0 / (i + 1))
    polyprof.mark("tick")
    polyprof.step()
t.join()
with polyprof.section("never finished"):
    time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def reader_of(name: str) -> str:
    """The reader a seed or corpus file name is for (by its suffix)."""
    for reader, suffixes in sorted(READERS.items(), key=lambda kv: -max(map(len, kv[1]))):
        if name.endswith(suffixes):
            return reader
    raise ValueError(f"no reader for {name}")


def load_seeds(built: tuple[str, ...] = ()) -> dict[str, list[tuple[str, bytes]]]:
    """reader -> [(file name, bytes)] of the committed seeds, and of the ``built`` readers'
    (SQLite databases made from tests/data: sqlite_mutators.build_seeds)."""
    from .sqlite_mutators import build_seeds

    out: dict[str, list[tuple[str, bytes]]] = {r: [] for r in READERS if r not in BUILT}
    for p in sorted(SEEDS.iterdir()):
        out[reader_of(p.name)].append((p.name, p.read_bytes()))
    for r in built:
        out[r] = build_seeds(r)
    missing = [r for r, v in out.items() if not v]
    if missing:
        raise FileNotFoundError(f"no fuzz seeds for {missing} in {SEEDS}; run python -m fuzz.seeds from tests/")
    return out


def _trimmed_tpu(keep: int = 12) -> bytes:
    """The real TPU XSpace with every line cut to its first ``keep`` events."""
    from polyprof.formats import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString((TRACES / "xspace" / "tpu_inference_2.xplane.pb").read_bytes())
    for plane in space.planes:
        for line in plane.lines:
            del line.events[keep:]
        used = {e.metadata_id for line in plane.lines for e in line.events}
        for mid in [m for m in plane.event_metadata if m not in used]:
            del plane.event_metadata[mid]
    return space.SerializeToString()


def build() -> None:
    import polyprof
    from polyprof.formats import native
    from polyprof.writers import xspace as xspace_writer

    SEEDS.mkdir(parents=True, exist_ok=True)
    for name in KINETO_SEEDS:
        data = gzip.decompress((TRACES / "kineto" / f"{name}.json.gz").read_bytes())
        (SEEDS / f"{name}.json").write_bytes(data)
    (SEEDS / "triton_example.json.gz").write_bytes((TRACES / "kineto" / "triton_example.json.gz").read_bytes())
    (SEEDS / "tpu_trimmed.xplane.pb").write_bytes(_trimmed_tpu())
    small = polyprof.load(TRACES / "kineto" / "cuda_event_sync_multistream.json.gz")
    xspace_writer.write(small, SEEDS / "polyprof_written.xplane.pb")
    (SEEDS / "polyprof_written.xplane.pb.gz").write_bytes(gzip.compress(xspace_writer.to_bytes(small)))
    native.save(small, SEEDS / "kineto_converted.polyprof")
    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "killed.py", Path(tmp) / "killed.polyprof"
        script.write_text(KILLED)
        code = ("import sys; from polyprof.cli import main; from polyprof.plugins import host; "
                "host.HostPlugin.default_journal_interval_s = 0.1; "
                f"sys.exit(main(['run', '--plugins', 'host', '-o', {str(out)!r}, {str(script)!r}]))")
        subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
        partial = Path(str(out) + ".partial")
        (SEEDS / "killed.polyprof.partial").write_bytes(partial.read_bytes())
        native.save(polyprof.load(partial), SEEDS / "host_session.polyprof")
    for name, data in _more_seeds():
        (SEEDS / name).write_bytes(data)


DATA = ROOT / "tests" / "data"
MEMORY_TIMELINE = """
import sys, warnings
import torch
from torch.profiler import ProfilerActivity, profile
warnings.simplefilter("ignore")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
prof.export_memory_timeline(sys.argv[1] + "/points.json", device="cpu")
prof.export_memory_timeline(sys.argv[1] + "/raw.json.gz", device="cpu")
"""


def _head_lines(path: Path, n: int) -> bytes:
    """The first ``n`` lines of a text file (a CSV's header and first rows)."""
    return b"".join(path.read_bytes().splitlines(keepends=True)[:n])


def _rocprofv3_json(n: int = 24) -> bytes:
    """The real rocprofv3 JSON (tests/data/rocprof) cut to ``n`` kernel dispatches, its
    agents without their cache and link tables, only the symbols those dispatches name."""
    doc = json.loads(gzip.decompress((DATA / "rocprof" / "tracelens_908_results.json.gz").read_bytes()))
    tool = doc["rocprofiler-sdk-tool"][0]
    kd = tool["buffer_records"]["kernel_dispatch"][:n]
    tool["buffer_records"]["kernel_dispatch"] = kd
    used = {k["dispatch_info"]["kernel_id"] for k in kd}
    tool["kernel_symbols"] = [s for s in tool["kernel_symbols"] if s["kernel_id"] in used]
    agents = {k["dispatch_info"]["agent_id"]["handle"] for k in kd}
    tool["agents"] = [a for a in tool["agents"] if a["type"] == 1 or a["id"]["handle"] in agents]
    for a in tool["agents"]:
        a["caches"], a["io_links"] = [], []
    kinds = {k["kind"] for k in kd}
    tool["strings"]["callback_records"] = []
    for i, k in enumerate(tool["strings"]["buffer_records"]):  # the operation names of the kinds kept
        if i not in kinds:
            k["operations"] = []
    return json.dumps(doc).encode()


def _json_array_head(path: Path, n: int) -> bytes:
    """A Chrome JSON array's metadata events and its first ``n`` others."""
    raw = path.read_bytes()
    evs = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    meta = [e for e in evs if e.get("ph") == "M"]
    return json.dumps(meta + [e for e in evs if e.get("ph") != "M"][:n]).encode()


def _rocprof_v1_json(n: int = 12) -> bytes:
    """rocprof v1's results.json layout (process names ``CPU HIP API``, ``COPY``,
    ``GPU<n>``; every value a string; ts/dur whole µs, BeginNs/EndNs exact) holding the
    first ``n`` dispatches of the real rocprof v1 results.csv (tests/data/peers/gunrock)."""
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO((DATA / "peers" / "gunrock" / "results.csv").read_text())))[:n]
    evs: list[dict] = [{}]
    for i, (name, pid) in enumerate((("CPU HIP API", 2), ("COPY", 1), ("GPU0", 6))):
        evs.append({"args": {"name": name}, "ph": "M", "pid": pid, "name": "process_name", "sort_index": i})
    for r in rows:
        b, e = int(r["BeginNs"]), int(r["EndNs"])
        pid = "1" if "copyBuffer" in r["KernelName"] else "6"
        evs.append({"ph": "X", "name": r["KernelName"], "pid": pid, "tid": r["queue-id"], "ts": str(b // 1000),
                    "dur": str(e // 1000 - b // 1000), "args": {"BeginNs": str(b), "EndNs": str(e),
                                                              "DurationNs": str(e - b), "dev-id": r["gpu-id"]}})
        d = int(r["DispatchNs"])
        evs.append({"ph": "X", "name": "hipLaunchKernel", "pid": "2", "tid": r["tid"], "ts": str(d // 1000 - 3),
                    "dur": "2", "args": {"BeginNs": str(d - 3000), "EndNs": str(d - 1000), "args": "( ... )"}})
    return json.dumps({"traceEvents": evs, "otherData": {"CMD": "rocminfo"}}).encode()


def _memory_timelines() -> list[tuple[str, bytes]]:
    """torch's export_memory_timeline of a tiny CPU training step: plot points, raw events."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", MEMORY_TIMELINE, tmp], check=True, capture_output=True, timeout=300)
        return [("torch_points.memtl.json", Path(tmp, "points.json").read_bytes()),
                ("torch_raw.memtl.json", gzip.decompress(Path(tmp, "raw.json.gz").read_bytes()))]


def _parquet() -> bytes:
    import polyprof
    from polyprof.formats import parquet

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.parquet"
        parquet.write(polyprof.load(SEEDS / "cuda_event_sync_multistream.json"), out)
        return out.read_bytes()


def _more_seeds() -> list[tuple[str, bytes]]:
    """Seeds of the readers added after the first ones: Perfetto, rocprofv3 (JSON, CSV),
    rocprof v1 (CSV, JSON), nsys stats CSV, Ascend/MindSpore JSON, torch's memory
    timeline, Parquet (each a real file cut small, or polyprof's own output)."""
    csv_dir, nsys = DATA / "rocprof" / "csv", DATA / "nsys_csv"
    peers = DATA / "peers"
    return [
        ("producer_consumer.pftrace", (peers / "perfetto_trace_builder" / "producer_consumer.pftrace").read_bytes()),
        ("android_jank_cuj.pftrace", (peers / "perfetto" / "android_jank_cuj.pftrace").read_bytes()),
        ("tracelens_908.rocprofv3.json", _rocprofv3_json()),
        ("sdk_kernel_trace.csv", (csv_dir / "kernel_trace.csv").read_bytes()),
        ("sdk_memory_copy_trace.csv", (csv_dir / "memory_copy_trace.csv").read_bytes()),
        ("sdk_marker_api_trace.csv", (csv_dir / "marker_api_trace.csv").read_bytes()),
        ("gunrock.results.csv", _head_lines(peers / "gunrock" / "results.csv", 13)),
        ("saxpy_2022_cuda_gpu_trace.csv", (nsys / "saxpy_2022_cuda_gpu_trace.csv").read_bytes()),
        ("saxpy_2022_cuda_api_trace.csv", (nsys / "saxpy_2022_cuda_api_trace.csv").read_bytes()),
        ("nbody_nvtx_pushpop_trace.csv", _head_lines(nsys / "pipit" / "nbody_nvtx_pushpop_trace.csv", 40)),
        ("saxpy_2022_stats_stdout.txt", (nsys / "saxpy_2022_stats_stdout.txt").read_bytes()),
        ("msprof_0_2_1.vendor.json", _json_array_head(peers / "mindinsight" / "msprof_0_2_1.json.gz", 150)),
        ("mindspore_timeline.vendor.json", _json_array_head(peers / "mindinsight" / "ascend_timeline_display_1.json.gz",
                                                            50)),
        ("rocprof_v1_results.vendor.json", _rocprof_v1_json()),
        *_memory_timelines(),
        ("cuda_event_sync.parquet", _parquet()),
    ]


def build_more() -> None:
    """Only the seeds of :func:`_more_seeds` (``python -m fuzz.seeds --more``)."""
    for name, data in _more_seeds():
        (SEEDS / name).write_bytes(data)


if __name__ == "__main__":
    build_more() if sys.argv[1:] == ["--more"] else build()
    for p in sorted(SEEDS.iterdir()):
        print(f"{p.stat().st_size:>9} {p.name}")
