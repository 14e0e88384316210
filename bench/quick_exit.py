"""Paired, alternating, whole processes: `polyprof summary TRACE` ending by
lowlevel.exit.quick_exit against the same main() ending by sys.exit.

    python bench/quick_exit.py TRACE ROUNDS
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    trace, rounds = sys.argv[1], int(sys.argv[2])
    quick = [sys.executable, "-m", "polyprof", "summary", trace]
    plain = [sys.executable, "-c", "import sys; from polyprof.cli import main; sys.exit(main(sys.argv[1:]))",
             "summary", trace]
    res: dict[str, list[float]] = {"quick": [], "plain": []}
    for i in range(rounds):
        order = (("quick", quick), ("plain", plain)) if i % 2 == 0 else (("plain", plain), ("quick", quick))
        for name, cmd in order:
            t = time.perf_counter()
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert r.returncode == 0, cmd
            res[name].append(time.perf_counter() - t)
    ratios = [q / p for q, p in zip(res["quick"], res["plain"])]
    print(f"quick exit / plain exit, wall: min {min(ratios):.3f} median {statistics.median(ratios):.3f}; "
          f"quick median {statistics.median(res['quick']):.3f} s, plain median {statistics.median(res['plain']):.3f} s; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
