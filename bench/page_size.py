"""The HTML report's page size at the timeline's limits (docs/report.md, "Size budget").

A synthetic trace of the worst kind for the page: nanosecond times at random (no common
unit to divide by, deltas that need 32 bits), 8 host threads and a GPU stream whose
kernels correlate to launches, ``--names`` distinct op names, an argument on every op.
Prints the page's size and its parts: the events' columns (the blob), the names, the
arguments, the rest.

    python bench/page_size.py --events 1600000 --names 1000000
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from polyprof.report.html import write
from polyprof.trace import TraceBuilder


def synthetic(n: int, names: int, seed: int = 7):
    rng = np.random.default_rng(seed)
    b = TraceBuilder(metadata={"source": {"format": "bench"}})
    host = b.plane("/host:CPU", "host", pid=1)
    gpu = b.plane("/device:GPU:0", "device", index=0)
    threads = [b.track(host, f"thread {k}", "thread", tid=k + 1) for k in range(8)]
    stream = b.track(gpu, "Stream #7", "stream", tid=7)
    n_ops = int(n * 0.6)
    n_k = (n - n_ops) // 2
    dur = np.exp(rng.normal(7.5, 1.2, n_ops)).astype(np.int64) + 1  # about 2 µs, log-normal
    th = rng.integers(0, 8, n_ops)
    start = np.zeros(n_ops, np.int64)
    for k in range(8):  # each thread's ops one after the other, random gaps
        rows = np.flatnonzero(th == k)
        step = dur[rows] + rng.integers(1, 3000, len(rows))
        start[rows] = 1_000_000 + np.cumsum(step) - step
    op_names = np.array([f"aten::op_{x:x}_{k}" for k, x in enumerate(rng.integers(0, 1 << 40, names))], object)
    b.events(np.array(threads)[th], op_names[rng.integers(0, names, n_ops)], start, dur, "cpu_op",
             stats={"Input Dims": np.array([f"[[{i % 512}, {i % 97}]]" for i in range(n_ops)], object)})
    launch = rng.choice(n_ops, n_k, replace=False)
    launch.sort()
    l_start = start[launch] + 1
    l_dur = np.maximum(dur[launch] // 4, 1)
    k_dur = np.exp(rng.normal(8, 1, n_k)).astype(np.int64) + 1
    k_start = np.maximum.accumulate(l_start + l_dur + rng.integers(1, 2000, n_k))
    k_start = k_start + np.r_[0, np.cumsum(k_dur)[:-1]]
    corr = np.arange(n_k, dtype=np.int64) + 1
    b.events(np.array(threads)[th[launch]], np.array(["cudaLaunchKernel"] * n_k, object), l_start, l_dur,
             "cuda_runtime", stats={"correlation": corr})
    k_names = np.array([f"void kernel_{k}<float, {k % 7}>(float*, int)" for k in range(max(names // 10, 1))], object)
    b.events(stream, k_names[rng.integers(0, len(k_names), n_k)], k_start, k_dur, "kernel",
             stats={"correlation": corr})
    return b.build()


def parts(page: str) -> dict[str, int]:
    tl = json.loads(re.search(r'id="tl-data">(.*?)</script>', page, re.S).group(1))
    blob = re.search(r'id="tl-blob">(.*?)</script>', page, re.S).group(1)
    size = {"page": len(page.encode()), "blob": len(blob),
            "names": len(json.dumps(tl["names"], separators=(",", ":"), ensure_ascii=False).encode()),
            "args": len(json.dumps(tl["args"], separators=(",", ":")).encode())}
    size["rest"] = size["page"] - size["blob"] - size["names"] - size["args"]
    size["events"] = tl["events"]
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_600_000)
    ap.add_argument("--names", type=int, default=2_200)
    a = ap.parse_args()
    t = time.perf_counter()
    trace = synthetic(a.events, a.names)
    built = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        out = write(trace, Path(d) / "page.html")
        size = parts(out.read_text(encoding="utf-8"))
    mb = {k: f"{v / 1e6:.2f} MB" for k, v in size.items() if k != "events"}
    print(f"{trace.n_events} events, {a.names} names (built in {built:.1f} s; "
          f"page in {time.perf_counter() - t - built:.1f} s): {size['events']} drawn; {mb}")


if __name__ == "__main__":
    main()
