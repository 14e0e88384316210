"""Seed inputs for the fuzzers: small real traces of every format a reader accepts.

Committed under tests/data/corpus/seeds so every run mutates the same bytes;
``python -m fuzz.seeds`` (from tests/) rebuilds them from the real traces in
tests/data/traces and from a real profiled run (the journal seed is the ``.partial``
file of a program killed with SIGKILL)."""

from __future__ import annotations

import gzip
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


if __name__ == "__main__":
    build()
    for p in sorted(SEEDS.iterdir()):
        print(f"{p.stat().st_size:>9} {p.name}")
