"""Time ``polyprof.load`` of one trace: in-process repeats and fresh processes, optionally
against another checkout's ``src`` (before/after a change, measured in the same run).

    python bench/load.py                                  # the V100 Kineto trace, 7 runs
    python bench/load.py FILE --repeat 7 --against /tmp/before/src

Each tree runs in children with ``PYTHONPATH=<tree>``, alternating between the trees:
"in-process" is ``--rounds`` children per tree, each loading the file ``--repeat`` times
after one warm-up load (all those loads pooled); "fresh" is ``--repeat`` children per
tree, one load each (imports not timed). Also
timed: load + decoding every stat (``len(trace.stats)``), which a deferred-stats reader
leaves for later. Best and median of each; the machine may be shared, so compare bests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests" / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"

_CHILD = r"""
import json, logging, sys, time
logging.disable(logging.CRITICAL)
import polyprof
path, n, warm = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
if warm:
    polyprof.load(path)
out = []
for _ in range(n):
    t0 = time.perf_counter()
    tr = polyprof.load(path)
    t1 = time.perf_counter()
    len(tr.stats)
    out.append((t1 - t0, time.perf_counter() - t0))
    del tr
print(json.dumps({"runs": out, "module": polyprof.__file__}))
"""


def child(tree: str, path: Path, n: int, warm: bool) -> dict:
    env = child_env(tree)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(n), "1" if warm else "0"],
                       capture_output=True, text=True, env=env, cwd="/")
    if r.returncode:
        raise SystemExit(f"{tree}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3, help="in-process children per tree (default 3)")
    ap.add_argument("--against", help="another checkout's src folder (e.g. the code before a change)")
    args = ap.parse_args()
    trees = {"this": str(ROOT / "src")}
    if args.against:
        trees = {"against": str(Path(args.against).resolve()), **trees}
    inproc: dict[str, list] = {k: [] for k in trees}
    fresh: dict[str, list] = {k: [] for k in trees}
    for _ in range(args.rounds):
        for k, tree in trees.items():
            inproc[k] += child(tree, args.file, args.repeat, warm=True)["runs"]
    for _ in range(args.repeat):
        for k, tree in trees.items():
            fresh[k] += child(tree, args.file, 1, warm=False)["runs"]
    print(f"{args.file.name}: best / median (s) of {args.rounds} x {args.repeat} in-process loads, "
          f"{args.repeat} fresh ones")
    print(f"  {'tree':<8} {'how':<11} {'load':>17} {'load + all stats':>19}")
    for how, res in (("in-process", inproc), ("fresh", fresh)):
        for k in trees:
            load = [a for a, _ in res[k]]
            full = [b for _, b in res[k]]
            print(f"  {k:<8} {how:<11} {min(load):>8.3f} {statistics.median(load):>8.3f} "
                  f"{min(full):>9.3f} {statistics.median(full):>9.3f}")
        if args.against:
            a = [x for x, _ in res["against"]]
            t = [x for x, _ in res["this"]]
            print(f"  {'':<8} {how:<11} load: this is {1 - min(t) / min(a):.1%} faster (best), "
                  f"{1 - statistics.median(t) / statistics.median(a):.1%} (median)")
    for k, tree in trees.items():
        print(f"  {k}: {tree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
