"""XSpace (.xplane.pb) read and write speed.

Reads and writes the TPU sample (tests/data/traces/xspace) and a synthetic trace of
``--events`` events (two planes, 8 tracks, three stats per event: int, float, string),
reporting seconds and events per second (best of ``--repeat``), with the compiled
decoder/encoder (``formats/xspace/_wire.c``) and, alternating with it, the pure-Python
path (protobuf's message objects), so the two are measured in the same run. A read is
what ``polyprof.load`` gives (stat columns built when first looked up,
``formats/xspace/deferred.py``); "read, every stat" also builds every stat column.

    python bench/xspace.py [--events 500000] [--repeat 3] [--json]

XProf's own tools on the same file: bench/xspace_xprof.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from polyprof.formats import xspace
from polyprof.writers import xspace as xspace_writer
from polyprof.formats.xspace import decode
from polyprof.writers import xspace as writer
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.core import Trace

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"


def synthetic(n: int) -> Trace:
    rng = np.random.default_rng(0)
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=1)
    dev = b.plane("/device:GPU:0", "device")
    tracks = [b.track(host, f"thread {i}", "thread", tid=100 + i) for i in range(4)]
    tracks += [b.track(dev, f"Stream #{i}", "stream", tid=i) for i in range(4)]
    track = rng.integers(0, len(tracks), n)
    start = np.sort(rng.integers(0, 10**10, n))
    names = np.array([f"op_{i}" for i in range(200)], object)[rng.integers(0, 200, n)]
    b.events(np.asarray(tracks)[track], names, start, rng.integers(1, 10**5, n), "kernel",
             stats={"correlation_id": np.arange(n), "flops": rng.random(n),
                    "shape": np.array(["f32[8,8]", "f32[64]", "bf16[2,2,2]"], object)[rng.integers(0, 3, n)]})
    return b.build()


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(name: str, trace: Trace, data: bytes, repeat: int) -> dict:
    """Best read and write times, compiled and pure-Python alternating round by round."""
    wire = decode._wire
    times: dict[str, list[float]] = {k: [] for k in ("read_c", "read_all_c", "read_py", "write_c", "write_py")}
    for _ in range(repeat):
        times["read_c"].append(timed(lambda: xspace.from_bytes(data)))
        times["read_all_c"].append(timed(lambda: len(xspace.from_bytes(data).stats)))  # len builds them all
        times["write_c"].append(timed(lambda: xspace_writer.to_bytes(trace)))
        decode._wire = None
        try:
            times["read_py"].append(timed(lambda: xspace.from_bytes(data)))
            times["write_py"].append(timed(lambda: writer.to_space(trace, compiled=False).SerializeToString()))
        finally:
            decode._wire = wire
    n = trace.n_events
    row: dict = {"input": name, "events": n, "bytes": len(data)}
    for k, v in times.items():
        row[f"{k}_s"] = round(min(v), 3)
        row[f"{k}_events_per_s"] = round(n / min(v))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    xspace.from_bytes(SAMPLE.read_bytes())  # warm imports (pandas, protobuf)
    if decode._wire is None:
        raise SystemExit("the compiled XSpace decoder is not built (python setup.py build_ext --inplace)")
    rows = []
    data = SAMPLE.read_bytes()
    rows.append(measure("tpu_inference_2.xplane.pb", xspace.from_bytes(data), data, args.repeat))
    syn = synthetic(args.events)
    rows.append(measure(f"synthetic {args.events} events, 3 stats each", syn, xspace_writer.to_bytes(syn), args.repeat))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print(f"{r['input']}: {r['events']} events, {r['bytes'] / 1e6:.1f} MB")
        for what in ("read", "write"):
            c, p = r[f"{what}_c_s"], r[f"{what}_py_s"]
            print(f"  {what:<5} compiled {c} s ({r[f'{what}_c_events_per_s']:,} ev/s), pure Python {p} s "
                  f"({r[f'{what}_py_events_per_s']:,} ev/s): {p / c:.1f}x")
        print(f"  read, every stat built, compiled {r['read_all_c_s']} s ({r['read_all_c_events_per_s']:,} ev/s)")


if __name__ == "__main__":
    main()
