"""Cost of the sample native plugin (procstat) and of the native collect path.

    PYTHONPATH=src python bench/native_plugin.py [--seconds 2] [--threads 4] [--interval-ms 10]

Builds examples/native_plugin/procstat.c with cc, runs one session with N busy threads,
and reports: the sampler's own CPU time (from its own data: the "procstat" thread),
per sampling pass and as a share of one core; XSpace bytes; time of the native
collect (both calls) and of reading the XSpace into a Trace.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--interval-ms", type=int, default=10)
    args = ap.parse_args()

    from polyprof.collect.native import NativeHandle
    from polyprof.formats.xspace import from_bytes

    so = Path(tempfile.mkdtemp()) / "libprocstat.so"
    subprocess.run([shutil.which("cc") or "cc", "-shared", "-fPIC", "-O2", "-pthread",
                    f"-I{ROOT / 'include'}", str(ROOT / "examples/native_plugin/procstat.c"), "-o", str(so)],
                   check=True)
    halt = threading.Event()

    def busy() -> None:
        a = np.random.default_rng(0).random((96, 96))
        while not halt.is_set():
            a = a @ a
            a /= np.abs(a).max()
            time.sleep(0.001)  # voluntary switches too

    h = NativeHandle(so)
    workers = [threading.Thread(target=busy, daemon=True) for _ in range(args.threads)]
    for w in workers:
        w.start()
    t0 = time.perf_counter()
    h.start({"interval_ms": args.interval_ms})
    time.sleep(args.seconds)
    h.stop()
    wall = time.perf_counter() - t0
    halt.set()
    c0 = time.perf_counter()
    data = h.collect_bytes()
    c1 = time.perf_counter()
    from_bytes(data, source="bench")  # first call pays for imports (pandas, protobuf)
    c1b = time.perf_counter()
    trace = from_bytes(data, source="bench")
    c2 = time.perf_counter()
    h.destroy()

    names = trace.names()
    cpu = trace.stats["cpu_ns"]
    sampler_rows = np.flatnonzero(names == "procstat")
    sel = np.isin(cpu.rows, sampler_rows)
    sampler_ns = float(np.asarray(cpu.values[sel], np.float64).sum())
    passes = int((trace.counters["name"] == trace.string_id("procstat.threads")).sum()) + 1
    print(f"session {wall:.2f} s, {args.threads} busy threads, interval {args.interval_ms} ms, {passes} passes")
    print(f"sampler CPU: {sampler_ns / 1e6:.1f} ms total, {sampler_ns / passes / 1e3:.0f} us per pass, "
          f"{100 * sampler_ns / (wall * 1e9):.2f} % of one core")
    print(f"XSpace: {len(data)} bytes, {trace.n_events} events, {len(trace.counters['ts_ns'])} counter samples "
          f"({len(data) / max(trace.n_events, 1):.0f} B/event)")
    print(f"native collect (size + fill): {(c1 - c0) * 1e3:.2f} ms; XSpace -> Trace: {(c2 - c1b) * 1e3:.1f} ms "
          f"(first call, with imports: {(c1b - c1) * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
