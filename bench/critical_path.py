"""Critical path benchmark: what the critical path of a trace costs against its summary,
and against HTA's critical path analysis when HTA runs here.

Each a fresh process per round, rounds alternating, after one untimed warm-up child each:

* summary: ``polyprof summary FILE`` (the terminal summary, every table, its critical path
  table included), output to /dev/null;
* critical path: ``polyprof.load`` and ``analyze.critical_path.critical_path`` over every
  step (``window=None``), the table built;
* HTA (``--hta``): ``TraceAnalysis`` of the file's directory and
  ``critical_path_analysis`` of its first ``ProfilerStep`` (HTA builds one step's graph a
  call; polyprof above builds every step's).

Reported: best and median seconds of each, critical path / summary ratios (best, median,
round by round), HTA / polyprof where HTA ran, and the load average.

    python bench/critical_path.py                          # V100 trace, 5 rounds
    python bench/critical_path.py FILE --repeat 9 --hta --hta-python PATH
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
V100 = ROOT / "tests" / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"

_PATH = r"""
import json, sys, logging
logging.disable(logging.CRITICAL)
import polyprof
from polyprof.analyze.critical_path import critical_path
t = polyprof.load(sys.argv[1])
cp = critical_path(t)
print(json.dumps({"rows": len(cp)}))
"""

_HTA = r"""
import json, os, sys, logging, warnings
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
os.environ["CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE"] = "1"
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
g, ok = ta.critical_path_analysis(rank=0, annotation="ProfilerStep", instance_id=0)
print(json.dumps({"nodes": len(g.critical_path_nodes), "ok": bool(ok)}))
"""


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, timeout=900)
    dt = time.perf_counter() - t0
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {p.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(V100))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hta", action="store_true", help="also time HTA's critical path analysis")
    ap.add_argument("--hta-python", default=os.environ.get("POLYPROF_HTA_PYTHON") or sys.executable)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    env = child_env(str(ROOT / "src"))
    py = sys.executable
    tools = {
        "summary": [py, "-m", "polyprof", "summary", a.trace],
        "critical_path": [py, "-c", _PATH, a.trace],
    }
    tmp = None
    if a.hta:
        tmp = Path(tempfile.mkdtemp())
        shutil.copy(a.trace, tmp / Path(a.trace).name)
        tools["hta"] = [a.hta_python, "-c", _HTA, str(tmp)]
    try:
        envs = {k: dict(os.environ) if k == "hta" else env for k in tools}  # HTA as installed
        for k, cmd in tools.items():  # warm-up: bytecode, page cache
            timed(cmd, envs[k])
        times: dict[str, list[float]] = {k: [] for k in tools}
        for r in range(a.repeat):
            names = list(tools) if r % 2 == 0 else list(reversed(tools))
            for k in names:
                times[k].append(timed(tools[k], envs[k]))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    ratios = [c / s for c, s in zip(times["critical_path"], times["summary"])]
    out = {
        "trace": Path(a.trace).name,
        "best_s": {k: min(v) for k, v in times.items()},
        "median_s": {k: statistics.median(v) for k, v in times.items()},
        "critical_path_over_summary": {"min": min(ratios), "median": statistics.median(ratios),
                                       "rounds": [round(x, 3) for x in ratios]},
        "loadavg": os.getloadavg(),
    }
    if "hta" in times:
        hr = [h / c for h, c in zip(times["hta"], times["critical_path"])]
        out["hta_over_critical_path"] = {"min": min(hr), "median": statistics.median(hr)}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['trace']}: {a.repeat} rounds, load average {' '.join(f'{x:.2f}' for x in out['loadavg'])}")
    for k in times:
        print(f"  {k:14s} best {out['best_s'][k]:.3f} s  median {out['median_s'][k]:.3f} s")
    r = out["critical_path_over_summary"]
    print(f"  critical path / summary: min {r['min']:.2f}x  median {r['median']:.2f}x  rounds {r['rounds']}")
    if "hta_over_critical_path" in out:
        h = out["hta_over_critical_path"]
        print(f"  HTA / polyprof critical path: min {h['min']:.2f}x  median {h['median']:.2f}x")


if __name__ == "__main__":
    main()
