"""What recording NVTX costs per range: a program of ``--ranges`` ``nvtx.annotate`` ranges
(the nvtx package: domain API, registered strings) and as many ``nvtx.push_range`` /
``pop_range`` pairs (a new message each, so a string copy) run as users run it: plain
``python`` (no NVTX tool: NVTX's calls are no-ops) and under ``polyprof run`` (polyprof's
NVTX injection library records every call), alternating, ``--rounds`` times, in fresh
processes. The program times its own loops (``LOOP_S``); the cost per range is (loop time
under polyprof - plain) / ranges, min and median over rounds, with the whole processes'
wall times and the load average.

    PYTHONPATH=$PWD/src python bench/nvtx_cost.py --rounds 7 --ranges 200000
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child_env import child_env  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"

PROGRAM = '''
import sys, time
import nvtx
n = int(sys.argv[1])
t0 = time.perf_counter()
for i in range(n):
    with nvtx.annotate("step", color="blue"):
        pass
t1 = time.perf_counter()
for i in range(n):
    nvtx.push_range(f"item {i % 1000}")
    nvtx.pop_range()
t2 = time.perf_counter()
print("LOOP_S", t1 - t0, t2 - t1)
'''


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t
    annotate, push = map(float, out.split("LOOP_S")[-1].split()[:2])
    return wall, annotate, push


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ranges", type=int, default=200_000)
    a = ap.parse_args()
    env = child_env(str(SRC))
    env.pop("NVTX_INJECTION64_PATH", None)
    with tempfile.TemporaryDirectory() as tmp:
        prog = Path(tmp) / "nvtx_program.py"
        prog.write_text(PROGRAM)
        out = Path(tmp) / "out.polyprof"
        cmds = {"plain": [sys.executable, str(prog), str(a.ranges)],
                "polyprof": [sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(prog),
                             str(a.ranges)]}
        for cmd in cmds.values():  # one untimed round
            run(cmd, env)
        res: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cmds}
        for _ in range(a.rounds):
            for k, cmd in cmds.items():
                res[k].append(run(cmd, env))
    print(f"{a.ranges:,} ranges of each kind, {a.rounds} rounds, load average {os.getloadavg()[0]:.2f}")
    for i, what in ((1, "nvtx.annotate"), (2, "push_range/pop_range (new text)")):
        per = [(p[i] - q[i]) / a.ranges * 1e9 for p, q in zip(res["polyprof"], res["plain"])]
        plain = [q[i] / a.ranges * 1e9 for q in res["plain"]]
        print(f"{what}: plain {min(plain):.0f} ns/range (median {statistics.median(plain):.0f}); recording adds "
              f"min {min(per):.0f} ns, median {statistics.median(per):.0f} ns per range")
    walls = {k: [r[0] for r in v] for k, v in res.items()}
    ratio = [p / q for p, q in zip(walls["polyprof"], walls["plain"])]
    print(f"whole process: plain median {statistics.median(walls['plain']):.2f} s, polyprof run median "
          f"{statistics.median(walls['polyprof']):.2f} s; ratio min {min(ratio):.2f}, median "
          f"{statistics.median(ratio):.2f}")


if __name__ == "__main__":
    main()
