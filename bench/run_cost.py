"""What ``polyprof run`` adds to a run: an empty script under plain ``python`` and under
``polyprof run`` (with and without the summary), alternating, in fresh processes.

Wall time of each child (``perf_counter`` around it), its CPU time (user + system,
all its threads) and its peak RSS (``ru_maxrss``), both from ``os.wait4`` of that
child in a small launcher process (``_LAUNCH``: a child's peak RSS can read no lower
than its parent's, and this script's is above plain python's); reports, per polyprof mode, the min and median of the differences to the plain
run of the same round, and of the ratios. On a loaded machine the CPU time says more
than the wall time (a child that waits for a core is not charged for it). Children write
bytecode to a cache outside the tree, as an installed package has it (bench/child_env.py),
and one untimed round goes first.

    PYTHONPATH=$PWD/src python bench/run_cost.py --rounds 15 [--json] [--src OTHER/src] [--before OLD/src]

``--before OLD/src`` runs both polyprof modes of another source tree too, in the same
rounds (before/after measured alternating, under the same load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child_env import child_env  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"


#: forks and execs one command and reports its wall time and rusage. It runs as
#: ``python -I -S`` (no site, ``os`` and ``time`` only: ≈ 8.5 MB), because a child's peak
#: RSS starts at its parent's: Linux carries the forking process's high-water mark over
#: the exec, so children of this benchmark (≈ 14 MB, and more once it has results) all
#: read at least that, which hid plain python's ≈ 9 MB and understated what polyprof adds.
_LAUNCH = """
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # what the child prints goes nowhere
        os.execv(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
print(wall, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, os.waitstatus_to_exitcode(status))
"""


def child(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MB, CPU seconds) of one child process, from the launcher."""
    p = subprocess.run([sys.executable, "-I", "-S", "-c", _LAUNCH, *argv], env=env, cwd=cwd,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines or lines[-1].split()[-1] != "0":
        raise SystemExit(f"{' '.join(argv)} failed: {p.stderr[-2000:]}")
    wall, rss_kb, cpu, _ = lines[-1].split()
    return float(wall), int(rss_kb) / 1024.0, float(cpu)


def floor_mb(env: dict[str, str], cwd: str) -> float:
    """The launcher's own peak RSS, below which no child's can be read (``/bin/true``'s)."""
    return child(["/bin/true"], env, cwd)[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--src", default=str(SRC), help="the polyprof source tree to measure (default: this one)")
    ap.add_argument("--before", help="another source tree (an older commit's src) measured in the same rounds")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="polyprof-runcost-")
    script = Path(tmp, "empty.py")
    script.write_text("")
    py = sys.executable
    run = [py, "-m", "polyprof", "run", "-o", "e.polyprof"]
    modes = {
        "plain python": ([py, str(script)], child_env(a.src)),
        "polyprof run --no-summary": ([*run, "--no-summary", str(script)], child_env(a.src)),
        "polyprof run": ([*run, str(script)], child_env(a.src)),
    }
    if a.before:
        modes["before: run --no-summary"] = ([*run, "--no-summary", str(script)], child_env(a.before))
        modes["before: polyprof run"] = ([*run, str(script)], child_env(a.before))
    runs: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    for r in range(a.rounds + 1):
        for m, (argv, env) in modes.items():
            res = child(argv, env, tmp)
            if r:  # round 0 warms the bytecode cache and the page cache
                runs[m].append(res)
    plain = runs["plain python"]
    out: dict[str, dict[str, float]] = {}
    for m, rs in runs.items():
        d_wall = [x[0] - p[0] for x, p in zip(rs, plain)]
        d_rss = [x[1] - p[1] for x, p in zip(rs, plain)]
        d_cpu = [x[2] - p[2] for x, p in zip(rs, plain)]
        out[m] = {"wall_min_s": min(x[0] for x in rs), "wall_median_s": statistics.median(x[0] for x in rs),
                  "rss_min_mb": min(x[1] for x in rs), "rss_median_mb": statistics.median(x[1] for x in rs),
                  "added_wall_min_s": min(d_wall), "added_wall_median_s": statistics.median(d_wall),
                  "added_rss_min_mb": min(d_rss), "added_rss_median_mb": statistics.median(d_rss),
                  "cpu_min_s": min(x[2] for x in rs), "added_cpu_min_s": min(d_cpu),
                  "added_cpu_median_s": statistics.median(d_cpu),
                  "wall_ratio_min": min(x[0] / p[0] for x, p in zip(rs, plain)),
                  "wall_ratio_median": statistics.median(x[0] / p[0] for x, p in zip(rs, plain))}
    floor = floor_mb(child_env(a.src), tmp)
    if a.json:
        print(json.dumps({"rounds": a.rounds, "load": os.getloadavg(), "rss_floor_mb": floor, "modes": out}, indent=1))
        return 0
    print(f"{a.rounds} rounds, alternating; load {os.getloadavg()[0]:.2f}; no peak RSS reads below the "
          f"launcher's {floor:.1f} MB")
    print(f"{'mode':<28}{'wall min/med s':>18}{'RSS min/med MB':>18}{'added s min/med':>19}{'added MB min/med':>19}"
          f"{'added CPU s min/med':>22}")
    for m, v in out.items():
        print(f"{m:<28}{v['wall_min_s']:>8.3f} /{v['wall_median_s']:>7.3f}{v['rss_min_mb']:>9.1f} /{v['rss_median_mb']:>6.1f}"
              f"{v['added_wall_min_s']:>10.3f} /{v['added_wall_median_s']:>6.3f}"
              f"{v['added_rss_min_mb']:>10.1f} /{v['added_rss_median_mb']:>6.1f}"
              f"{v['added_cpu_min_s']:>13.3f} /{v['added_cpu_median_s']:>6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
