"""What typing Kineto's [memory] events at load costs: a synthetic torch-shaped trace of
N allocation/free events (half alive at random, 64 B to 1 MiB, Total Allocated kept),
loaded with and without the memory typing, alternating, best and median of the rounds,
and the cost per memory event: the difference of each round's pair (with - without),
divided by N, its min and median, in wall time and in this process's CPU time (less
blurred by other work on a shared machine), and the ratio in CPU time too; the load
average before and after.

    python bench/memory_ingest.py --events 300000 --repeat 4 [--cli-start]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import polyprof
from polyprof.formats import kineto_memory


def make(n: int, path: Path) -> None:
    rng = random.Random(0)
    ev, live, total, t = [], [], 0, 1000.0
    for i in range(n):
        t += 0.5
        if live and rng.random() < 0.5:
            addr, size = live.pop(rng.randrange(len(live)))
            size = -size
        else:
            addr, size = 10_000 + i * 64, rng.choice([64, 4096, 1 << 20])
            live.append((addr, size))
        total += size
        ev.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
                   "ts": t, "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": size,
                                     "Device Id": -1, "Device Type": 0, "Addr": addr}})
        if i % 10 == 0:
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::op", "pid": 1, "tid": 1, "ts": t - 0.1, "dur": 0.3})
    path.write_text(json.dumps({"traceEvents": ev}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--cli-start", action="store_true",
                    help="prepare the heap first, as a read-only command of the CLI does (cli/__init__.py): "
                         "what `polyprof summary FILE` pays; without it, a library user's polyprof.load")
    args = ap.parse_args()
    if args.cli_start:
        from polyprof.lowlevel import heap

        heap.prepare_heap()
    load0 = os.getloadavg()[0]
    path = Path(tempfile.mkdtemp()) / "memory.json"
    make(args.events, path)
    polyprof.load(path)  # warm up (imports)
    real = kineto_memory.has_memory
    times: dict[str, list[float]] = {"with memory typing": [], "without": []}
    cpu: dict[str, list[float]] = {name: [] for name in times}
    for _ in range(args.repeat):
        for name in times:
            kineto_memory.has_memory = real if name == "with memory typing" else (lambda text: False)
            t0, c0 = time.perf_counter(), time.process_time()
            polyprof.load(path)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    kineto_memory.has_memory = real
    print(f"{args.events} [memory] events, {path.stat().st_size / 1e6:.0f} MB; load average {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f}")
    for name, v in times.items():
        print(f"{name:<20} best {min(v):.2f} s  median {statistics.median(v):.2f} s")
    w, wo = times["with memory typing"], times["without"]
    print(f"with / without: {min(w) / min(wo) - 1:+.0%} best, {statistics.median(w) / statistics.median(wo) - 1:+.0%} "
          "median")
    per = [(a - b) / args.events * 1e9 for a, b in zip(w, wo)]
    print(f"cost per memory event (paired rounds): min {min(per):.0f} ns, median {statistics.median(per):.0f} ns")
    cw, cwo = cpu["with memory typing"], cpu["without"]
    per = [(a - b) / args.events * 1e9 for a, b in zip(cw, cwo)]
    print(f"  in CPU time (this process only): min {min(per):.0f} ns, median {statistics.median(per):.0f} ns")
    print(f"with / without in CPU time: {min(cw) / min(cwo) - 1:+.0%} best, "
          f"{statistics.median(cw) / statistics.median(cwo) - 1:+.0%} median")


if __name__ == "__main__":
    main()
