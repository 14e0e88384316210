"""Cost of the OpenCL plugin per enqueue, against un-profiled pyopencl, in one process.

Three ways to run the same enqueue loop, interleaved so machine noise hits all alike:
  plain      no polyprof, a queue created without profiling (what users run)
  prof-queue no polyprof, a queue with PROFILING_ENABLE (what the plugin forces)
  polyprof   inside polyprof.profile(plugins=["opencl"]), queue created in the
             session (so the plugin made it profile): interception + profiling
Operations: a small kernel launch (64 work-items), a small non-blocking write (256 B),
a small blocking read (256 B). Only the enqueue loop is timed; the queue is drained
between batches. Reports the median over batches of µs per call, and ratios to plain;
and the session's stop + collect time per recorded call (read profiling info, map
clocks, build the trace).

    python bench/opencl.py [--n 2000] [--batches 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np
import pyopencl as cl

import polyprof

SRC = "__kernel void inc(__global float *a) { a[get_global_id(0)] += 1.0f; }"


def ops(ctx: Any) -> dict[str, Callable[[Any, int], None]]:
    prg = cl.Program(ctx, SRC).build()
    knl = cl.Kernel(prg, "inc")
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256)
    host = np.zeros(64, np.float32)
    out = np.empty(64, np.float32)
    knl.set_arg(0, buf)

    def launch(q: Any, n: int) -> None:
        for _ in range(n):
            knl(q, (64,), None, buf)

    def write(q: Any, n: int) -> None:
        for _ in range(n):
            cl.enqueue_copy(q, buf, host, is_blocking=False)

    def read(q: Any, n: int) -> None:
        for _ in range(n):
            cl.enqueue_copy(q, out, buf)

    return {"kernel launch (64 items)": launch, "write 256 B, non-blocking": write,
            "read 256 B, blocking": read}


def timed(fn: Callable[[Any, int], None], q: Any, n: int) -> float:
    q.finish()
    t0 = time.perf_counter_ns()
    fn(q, n)
    dt = time.perf_counter_ns() - t0
    q.finish()
    return dt / n / 1000.0  # µs per call


def wrapper_alone(n: int, repeat: int) -> dict[str, float]:
    """The wrapper around a trivial function, no OpenCL call: the pure cost of
    interception (two clock reads, one record), immune to device noise."""
    from polyprof.plugins.opencl import intercept as ic

    ev = object()

    def orig(queue: Any, kernel: Any, g: Any, l: Any, *args: Any, **kwargs: Any) -> Any:
        return ev

    wrapped = ic.wrap_kernel(orig)
    g = (64,)

    def best(fn: Callable[[], Any]) -> float:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            times.append((time.perf_counter_ns() - t0) / n / 1000.0)
        return min(times)

    saved = ic._rec
    try:
        ic._rec = ic.Recording()
        out = {"bare_us": best(lambda: orig(1, 2, g, None)),
               "wrapped_recording_us": best(lambda: wrapped(1, 2, g, None))}
        ic._rec = None
        out["wrapped_idle_us"] = best(lambda: wrapped(1, 2, g, None))
    finally:
        ic._rec = saved
    return {k: round(v, 3) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="calls per batch")
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ctx = cl.create_some_context(interactive=False)
    plain_q = cl.CommandQueue(ctx)
    prof_q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    table = ops(ctx)
    res: dict[str, dict[str, list[float]]] = {k: {"plain": [], "prof-queue": [], "polyprof": []} for k in table}
    for fn in table.values():  # warm up (kernel compile, first-use costs)
        timed(fn, plain_q, 200)
        timed(fn, prof_q, 200)
    stop_us: list[float] = []
    for _ in range(a.batches):
        for name, fn in table.items():
            res[name]["plain"].append(timed(fn, plain_q, a.n))
            res[name]["prof-queue"].append(timed(fn, prof_q, a.n))
        prof = polyprof.profile(plugins=["opencl"]).start()
        q = cl.CommandQueue(ctx)  # made profiling by the plugin
        for name, fn in table.items():
            res[name]["polyprof"].append(timed(fn, q, a.n))
        t0 = time.perf_counter_ns()
        trace = prof.stop()
        calls = trace.metadata["opencl"]["api_calls"]
        stop_us.append((time.perf_counter_ns() - t0) / calls / 1000.0)
        assert trace.metadata["opencl"]["device_events"] >= a.n * len(table)
    out = {}
    for name, cols in res.items():
        med = {k: statistics.median(v) for k, v in cols.items()}
        best = {k: min(v) for k, v in cols.items()}
        out[name] = {**{f"{k}_us": round(v, 3) for k, v in med.items()},
                     "overhead_us": round(med["polyprof"] - med["plain"], 3),
                     "interception_us": round(med["polyprof"] - med["prof-queue"], 3),
                     "ratio_polyprof_plain": round(med["polyprof"] / med["plain"], 3),
                     "ratio_profqueue_plain": round(med["prof-queue"] / med["plain"], 3),
                     **{f"best_{k}_us": round(v, 3) for k, v in best.items()},
                     "best_ratio_polyprof_plain": round(best["polyprof"] / best["plain"], 3)}
    out["stop+collect per recorded call"] = {"us": round(statistics.median(stop_us), 3)}
    out["wrapper alone"] = wrapper_alone(20000, 7)
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'operation (median | best)':28s} {'plain µs':>9s} {'prof-q µs':>9s} {'polyprof µs':>11s} "
          f"{'+µs':>7s} {'ratio':>6s} | {'plain':>6s} {'prof-q':>6s} {'polyprof':>8s} {'ratio':>6s}")
    for name, r in out.items():
        if "plain_us" not in r:
            continue
        print(f"{name:28s} {r['plain_us']:9.2f} {r['prof-queue_us']:9.2f} {r['polyprof_us']:11.2f} "
              f"{r['overhead_us']:7.2f} {r['ratio_polyprof_plain']:6.2f} | {r['best_plain_us']:6.2f} "
              f"{r['best_prof-queue_us']:6.2f} {r['best_polyprof_us']:8.2f} {r['best_ratio_polyprof_plain']:6.2f}")
    w = out["wrapper alone"]
    print(f"wrapper alone (trivial function, best of 7): bare {w['bare_us']:.3f} µs, wrapped and recording "
          f"{w['wrapped_recording_us']:.3f} µs, wrapped idle {w['wrapped_idle_us']:.3f} µs")
    print(f"session stop + collect: {out['stop+collect per recorded call']['us']:.2f} µs per recorded call")
    print(f"({a.batches} batches of {a.n} calls, median; pyopencl {cl.VERSION_TEXT}, "
          f"device {ctx.devices[0].name.strip()}, python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
