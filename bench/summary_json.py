"""``polyprof summary FILE --json`` of two source trees, paired: time and peak memory.

What issue 27's one table type changed for this command: the tables were DataFrames
and the records were written by pandas (which the command imported); now they are
polyprof's Tables, written by ``report/json_records.py`` without pandas. Each round runs
the command once with each tree on ``PYTHONPATH`` (alternating which goes first), in a
fresh process as a user runs it, output to /dev/null; the peak RSS is the child's own
(``wait4``). Printed: min and median seconds and MB per tree, the min and median of the
per-round ratios (before / after), the load average at start and end, and whether the
two trees' outputs were the same bytes.

    python bench/summary_json.py --before /path/to/old/src [FILE ...] [--repeat 7] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "traces" / "kineto"
DEFAULT = [KINETO / "v100_ns_resolution_rank0.json.gz", KINETO / "a100_alexnet_small.json.gz"]


def once(src: str, path: Path) -> tuple[float, float, str]:
    """(seconds, peak MB, sha256 of the output) of one ``summary --json`` in a fresh process."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "polyprof", "summary", str(path), "--json"], env=child_env(src),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read() if p.stdout else b""
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise RuntimeError(f"{src}: summary --json {path.name} exited {p.returncode}")
    return wall, usage.ru_maxrss / 1024, hashlib.sha256(out).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="traces (default: the V100 and the AlexNet samples)")
    ap.add_argument("--before", required=True, help="the other tree's src directory")
    ap.add_argument("--after", default=str(ROOT / "src"), help="this tree's src (default)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    trees = {"before": args.before, "after": args.after}
    load0 = os.getloadavg()[0]
    result: dict = {"load_start": load0, "files": {}}
    for path in args.files or DEFAULT:
        for src in trees.values():  # warm-up: bytecode, file cache
            once(src, path)
        runs: dict[str, list[tuple[float, float, str]]] = {k: [] for k in trees}
        for i in range(args.repeat):
            order = list(trees) if i % 2 == 0 else list(trees)[::-1]
            for k in order:
                runs[k].append(once(trees[k], path))
        secs = {k: [r[0] for r in v] for k, v in runs.items()}
        mb = {k: [r[1] for r in v] for k, v in runs.items()}
        ratio = [b / a for b, a in zip(secs["before"], secs["after"])]
        result["files"][path.name] = {
            **{f"{k}_s": {"min": min(v), "median": statistics.median(v)} for k, v in secs.items()},
            **{f"{k}_mb": {"min": min(v), "median": statistics.median(v)} for k, v in mb.items()},
            "ratio_before_over_after": {"min": min(ratio), "median": statistics.median(ratio)},
            "same_output": len({r[2] for v in runs.values() for r in v}) == 1,
        }
    result["load_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for name, r in result["files"].items():
        print(f"{name}: before {r['before_s']['min']:.3f} / {r['before_s']['median']:.3f} s, "
              f"{r['before_mb']['median']:.0f} MB; after {r['after_s']['min']:.3f} / {r['after_s']['median']:.3f} s, "
              f"{r['after_mb']['median']:.0f} MB (min / median); ratio before/after min "
              f"{r['ratio_before_over_after']['min']:.2f}x, median {r['ratio_before_over_after']['median']:.2f}x; "
              f"same output: {r['same_output']}")
    print(f"load average {result['load_start']:.1f} -> {result['load_end']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
