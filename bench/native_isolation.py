"""Cost of running a native plugin in its helper process instead of in the program.

    PYTHONPATH=src python bench/native_isolation.py [--rounds 7] [--seconds 0.5]

Builds examples/native_plugin/procstat.c with cc, then, alternating the two ways
round by round, runs a session (host + procstat, sampling every 10 ms while 2 threads
burn CPU for SECONDS) and times each step the program waits for: loading the plugin,
start, stop and collect (the XSpace bytes read into a Trace), plus one call's round
trip (the plugin's clock read). Reports min and median per way and helper/in-process
ratios, and the CPU the helper process used (its own rusage).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("load", "start", "stop", "collect", "round_trip_us")


def one(so: Path, in_process: bool, seconds: float) -> dict[str, float]:
    from polyprof.collect.native import load_native

    t = {}
    t0 = time.perf_counter()
    plugin = load_native(so, in_process=in_process, interval_ms=10)
    t["load"] = time.perf_counter() - t0
    h = plugin.handle
    reads = []
    for _ in range(50):
        a = time.perf_counter_ns()
        h.clock_now()
        reads.append(time.perf_counter_ns() - a)
    t["round_trip_us"] = min(reads) / 1e3
    halt = threading.Event()

    def burn() -> None:
        a = np.random.default_rng(0).random((96, 96))
        while not halt.is_set():
            a = a @ a
            a /= np.abs(a).max()

    workers = [threading.Thread(target=burn) for _ in range(2)]
    for w in workers:
        w.start()
    from polyprof.collect.plugin import SessionContext
    from polyprof.collect.clock import now_ns, wall_anchor

    ctx = SessionContext(start_ns=now_ns(), wall_anchor=wall_anchor())
    t0 = time.perf_counter()
    plugin.start(ctx)
    t["start"] = time.perf_counter() - t0
    time.sleep(seconds)
    t0 = time.perf_counter()
    plugin.stop()
    t["stop"] = time.perf_counter() - t0
    halt.set()
    for w in workers:
        w.join()
    t0 = time.perf_counter()
    trace = plugin.collect()
    t["collect"] = time.perf_counter() - t0
    t["events"] = trace.n_events
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.5)
    args = ap.parse_args()
    so = Path(tempfile.mkdtemp()) / "libprocstat.so"
    subprocess.run([shutil.which("cc") or "cc", "-shared", "-fPIC", "-O2", "-pthread", f"-I{ROOT / 'include'}",
                    str(ROOT / "examples/native_plugin/procstat.c"), "-o", str(so)], check=True)
    res: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    one(so, True, 0.05), one(so, False, 0.05)  # warm-up (imports, page cache)
    child0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for r in range(args.rounds):
        for inproc in ((True, False) if r % 2 == 0 else (False, True)):
            res[inproc].append(one(so, inproc, args.seconds))
    child1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    helper_cpu = (child1.ru_utime + child1.ru_stime - child0.ru_utime - child0.ru_stime) / args.rounds
    print(f"uptime: {os.getloadavg()}  rounds {args.rounds}, {args.seconds} s of activity each")
    print(f"{'step':<14}{'in-process min/med':>22}{'helper min/med':>22}{'ratio min/med':>18}")
    for k in STEPS:
        a = [x[k] for x in res[True]]
        b = [x[k] for x in res[False]]
        unit, f = ("us", 1.0) if k.endswith("_us") else ("ms", 1e3)
        print(f"{k:<14}{min(a) * f:>10.2f}/{statistics.median(a) * f:<8.2f}{unit:>3}"
              f"{min(b) * f:>10.2f}/{statistics.median(b) * f:<8.2f}{unit:>3}"
              f"{min(b) / max(min(a), 1e-12):>9.1f}x/{statistics.median(b) / max(statistics.median(a), 1e-12):.1f}x")
    print(f"events per session: {statistics.median(x['events'] for x in res[False]):.0f} (helper), "
          f"{statistics.median(x['events'] for x in res[True]):.0f} (in-process)")
    print(f"helper process CPU per session (load to exit): {helper_cpu * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
