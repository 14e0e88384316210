"""What an idle capture server costs the program: the demo workload's time with no
server, with ``polyprof.serve()`` waiting, and with JAX's own profiler server
(``jax.profiler.start_server``, the peer) waiting. No capture runs.

Each run is a fresh child process that starts its server (or none), then times only
the workload (``polyprof.demo.threaded_pipeline``: a loader thread feeding a NumPy
training loop, the bundled demo that runs on every machine). Modes alternate, round
by round; reports, for the workload's wall time and its process CPU time (all threads,
so a server thread that wakes up counts; far less sensitive to a loaded machine than
wall time), each mode's min and median and the ratios to no server (min/min,
median/median, and the median of the per-round ratios); and the CPU time the server's
own threads (the ones that appeared when it started) used during the workload, the
direct cost, which a loaded machine does not blur (/proc/self/task/*/schedstat: ns),
and how often they woke up.

    python bench/serve_idle.py --rounds 15 --steps 60
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child_env import child_env  # noqa: E402

CHILD = r"""
import json, os, sys, time
mode, steps = sys.argv[1], int(sys.argv[2])
import numpy
from polyprof.demo import threaded_pipeline as demo

def tasks():
    return set(os.listdir("/proc/self/task"))

def cpu_s(tids):  # CPU time of these threads in ns (schedstat), and their wake-ups
    total = switches = 0
    for t in tids:
        try:
            total += int(open(f"/proc/self/task/{t}/schedstat").read().split()[0])
            for line in open(f"/proc/self/task/{t}/status"):
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
        except OSError:
            continue
    return total / 1e9, switches

before = tasks()
if mode == "polyprof":
    import polyprof
    server = polyprof.serve(0)
elif mode == "jax":
    import jax.profiler
    from socket import socket
    with socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    jax.profiler.start_server(port)
import contextlib, io
time.sleep(0.2)  # let the server's threads settle, as in a long-running program
server_tasks = tasks() - before  # the threads the server started (gRPC's, executor's)
with contextlib.redirect_stdout(io.StringIO()):
    (s0, w0), c0, t0 = cpu_s(server_tasks), time.process_time(), time.perf_counter()
    demo.main(["--steps", str(steps)])
    took, cpu, (s1, w1) = time.perf_counter() - t0, time.process_time() - c0, cpu_s(server_tasks)
print(json.dumps({"wall": took, "cpu": cpu, "server_cpu": s1 - s0, "server_wakeups": w1 - w0,
                  "server_threads": len(server_tasks)}))
"""

def one(mode: str, steps: int, src: str) -> dict[str, float]:
    p = subprocess.run([sys.executable, "-c", CHILD, mode, str(steps)], capture_output=True, text=True,
                       timeout=600, env=child_env(src))
    if p.returncode != 0:
        raise SystemExit(f"{mode} child failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=60, help="demo steps per run (default 60)")
    ap.add_argument("--no-jax", action="store_true", help="leave out JAX's server")
    args = ap.parse_args()
    src = str(Path(__file__).resolve().parents[1] / "src")
    modes = ["none", "polyprof"]
    if not args.no_jax and importlib.util.find_spec("jax") is not None:
        modes.append("jax")
    for m in modes:  # untimed warm-up: bytecode, page cache
        one(m, 2, src)
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for m in (modes if r % 2 == 0 else modes[::-1]):
            runs[m].append(one(m, args.steps, src))
    for what in ("wall", "cpu"):
        base = [x[what] for x in runs["none"]]
        print(f"{what} time of the workload (process CPU time: every thread, the server's too)" if what == "cpu"
              else f"{what} time of the workload")
        print(f"  {'mode':10} {'min s':>8} {'median s':>9} {'min ratio':>10} {'median ratio':>13} {'round ratio':>12}")
        for m in modes:
            t = [x[what] for x in runs[m]]
            per_round = statistics.median(a / b for a, b in zip(t, base))
            print(f"  {m:10} {min(t):8.3f} {statistics.median(t):9.3f} {min(t) / min(base):10.4f} "
                  f"{statistics.median(t) / statistics.median(base):13.4f} {per_round:12.4f}")
    print("the server's own threads during the workload (direct cost, robust to a loaded machine)")
    for m in modes[1:]:
        used = sum(x["server_cpu"] for x in runs[m])
        cpu = sum(x["cpu"] for x in runs[m])
        wall = sum(x["wall"] for x in runs[m])
        wakeups = sum(x["server_wakeups"] for x in runs[m])
        print(f"  {m:10} {runs[m][0]['server_threads']} threads: {used * 1000:.2f} ms CPU over {cpu:.1f} s of "
              f"workload CPU in {len(runs[m])} runs = {100 * used / cpu:.4f}%; {wakeups / wall:.1f} wake-ups/s")

if __name__ == "__main__":
    main()
